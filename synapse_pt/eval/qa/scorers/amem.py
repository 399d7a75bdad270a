"""The A-Mem answer scorer (WujiangXu/AgenticMemory ``utils.py``: ``simple_tokenize``,
``calculate_bleu_scores``, ``calculate_metrics``; copied into mem0's evaluation code), SPEC §3.

What the SYNAPSE baselines' numbers were computed with:

* F1 (:func:`f1_set`): tokens from :func:`amem_tokenize` (lowercase, ``. , ! ?`` -> spaces, split
  on whitespace), compared as **sets**: repeated tokens count once, no stemming, other punctuation
  stays glued (``"rex's"``, ``"(2022)"``).
* BLEU-1 (:func:`bleu1`): NLTK ``sentence_bleu`` with weights (1, 0, 0, 0) and
  ``SmoothingFunction().method1`` (clipped unigram precision times the brevity penalty).
* An empty prediction or an empty gold scores 0 on both (``if not prediction or not reference``).
* No category-specific handling: category 1 is not split on commas, category 3's gold is not cut.

Differences from the A-Mem code, on purpose:

* Category 5. A-Mem scores adversarial questions against the distractor ``adversarial_answer``,
  which rewards repeating the wrong answer. :func:`score_amem` instead scores category 5 with the
  official phrase rule (:func:`~synapse_pt.eval.qa.scorers.official.is_rejection`) and never reads a
  category-5 gold; both ``f1_amem`` and ``bleu1`` are that 0/1 value.
* BLEU tokenisation is the same: ``bleu_tokenizer="nltk"`` (default) is A-Mem's
  ``nltk.word_tokenize(text.lower())`` with nltk's real English Punkt model, loaded offline
  (:mod:`synapse_pt.eval.qa.scorers.word_tokenize`; nltk pinned to A-Mem's 3.9.1).
  ``bleu_tokenizer="simple"`` uses :func:`amem_tokenize`, what mem0's copy of the code falls back
  to when punkt is missing.
"""

from __future__ import annotations

from typing import Literal

from synapse_pt.eval.qa.scorers.official import is_rejection
from synapse_pt.eval.qa.scorers.word_tokenize import word_tokenize

__all__ = ["amem_tokenize", "bleu1", "f1_set", "score_amem"]

BleuTokenizer = Literal["nltk", "simple"]



def amem_tokenize(text: object) -> list[str]:
    """A-Mem's ``simple_tokenize``: ``str``, lowercase, ``. , ! ?`` -> spaces, whitespace split."""
    text = str(text).lower()
    for ch in ".,!?":
        text = text.replace(ch, " ")
    return text.split()


def _bleu_tokens(text: str, tokenizer: BleuTokenizer) -> list[str]:
    if tokenizer == "nltk":
        return word_tokenize(text.lower())
    if tokenizer == "simple":
        return amem_tokenize(text)
    raise ValueError(f"bleu_tokenizer must be 'nltk' or 'simple', got {tokenizer!r}")


def f1_set(prediction: str, gold: str) -> float:
    """A-Mem's set-based token F1 over :func:`amem_tokenize` tokens (0.0 if either set is empty)."""
    pred = set(amem_tokenize(prediction))
    ref = set(amem_tokenize(gold))
    if not pred or not ref:
        return 0.0
    common = len(pred & ref)
    if common == 0:
        return 0.0
    precision = common / len(pred)
    recall = common / len(ref)
    return 2 * precision * recall / (precision + recall)


def bleu1(prediction: str, gold: str, tokenizer: BleuTokenizer = "nltk") -> float:
    """A-Mem's BLEU-1: ``sentence_bleu([ref], hyp, weights=(1, 0, 0, 0), method1 smoothing)``.

    .. math::
        \\text{BLEU-1} = \\text{BP} \\cdot \\frac{\\sum_w \\min(c_{hyp}(w), c_{ref}(w))}{|hyp|},
        \\quad \\text{BP} = \\min(1, e^{1 - |ref| / |hyp|})
    """
    hyp = _bleu_tokens(prediction, tokenizer)
    ref = _bleu_tokens(gold, tokenizer)
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu  # nltk: on first use

    return float(sentence_bleu([ref], hyp, weights=(1, 0, 0, 0),
                               smoothing_function=SmoothingFunction().method1))


def score_amem(
    prediction: str,
    gold: str | int | None,
    category: int,
    *,
    bleu_tokenizer: BleuTokenizer = "nltk",
) -> dict[str, float]:
    """Score one answer with the A-Mem protocol: ``{"f1_amem": ..., "bleu1": ...}``.

    Category 5 is scored with the official phrase rule (1.0 iff the prediction contains
    "no information available" or "not mentioned"), **not** against the distractor
    ``adversarial_answer`` as A-Mem does; ``gold`` is not read for it and may be ``None``.
    Categories 1-4 compare the stripped prediction with ``str(gold)`` (integers allowed).
    """
    category = int(category)
    if category == 5:
        value = 1.0 if is_rejection(prediction) else 0.0
        return {"f1_amem": value, "bleu1": value}
    if category not in (1, 2, 3, 4):
        raise ValueError(f"A-Mem scorer: unknown category {category!r} (expected 1-5)")
    if gold is None:
        raise ValueError(f"A-Mem scorer: category {category} needs a gold answer, got None")
    prediction = prediction.strip()
    gold = str(gold).strip()
    if not prediction or not gold:
        return {"f1_amem": 0.0, "bleu1": 0.0}
    return {
        "f1_amem": f1_set(prediction, gold),
        "bleu1": bleu1(prediction, gold, bleu_tokenizer),
    }
