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
  official phrase rule (:func:`~synapse_pt.eval.scorers.official.is_rejection`) and never reads a
  category-5 gold; both ``f1_amem`` and ``bleu1`` are that 0/1 value.
* BLEU tokenisation. A-Mem tokenises BLEU input with ``nltk.word_tokenize`` (punkt sentence split,
  then the Treebank word tokenizer), which needs the ``punkt_tab`` data that cannot be downloaded
  here. ``bleu_tokenizer="treebank"`` (default) runs the same Treebank tokenizer
  (``NLTKWordTokenizer``, no data needed) after a rule-based sentence split that stands in for
  punkt; the two differ only on multi-sentence answers whose split punkt decides differently
  (abbreviations it knows and this list does not). ``bleu_tokenizer="simple"`` uses
  :func:`amem_tokenize`, which is what mem0's copy of the code falls back to when punkt is missing.
"""

from __future__ import annotations

import re
from typing import Literal

from nltk.tokenize import NLTKWordTokenizer
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

from .official import is_rejection

__all__ = ["amem_tokenize", "bleu1", "f1_set", "score_amem", "word_tokenize_offline"]

BleuTokenizer = Literal["treebank", "simple"]

_TREEBANK = NLTKWordTokenizer()
_SMOOTH = SmoothingFunction().method1
# A sentence ends at . ! or ? (optionally followed by closing quotes/brackets) before whitespace.
_SENT_END = re.compile(r"[.!?][\"'”’)\]]*\s+")
# Common English abbreviations (lower case, without the final period) after which punkt does not
# split; plus any single letter (initials such as "j. smith").
_ABBREVIATIONS = frozenset([
    "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "u.s", "a.m",
    "p.m", "no", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov",
    "dec", "mt", "ft", "co", "inc", "ltd",
])


def amem_tokenize(text: object) -> list[str]:
    """A-Mem's ``simple_tokenize``: ``str``, lowercase, ``. , ! ?`` -> spaces, whitespace split."""
    text = str(text).lower()
    for ch in ".,!?":
        text = text.replace(ch, " ")
    return text.split()


def _split_sentences(text: str) -> list[str]:
    """Rule-based stand-in for punkt's sentence split (see the module docstring)."""
    sentences: list[str] = []
    start = 0
    for m in _SENT_END.finditer(text):
        before = text[start:m.start()].split()
        last = before[-1].lower() if before else ""
        is_initial = len(last) == 1 and last.isalpha()
        if text[m.start()] == "." and (last in _ABBREVIATIONS or is_initial):
            continue
        sentences.append(text[start:m.end()].strip())
        start = m.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


def word_tokenize_offline(text: str) -> list[str]:
    """``nltk.word_tokenize`` without punkt data: rule-based sentence split, Treebank tokenizer."""
    return [tok for sent in _split_sentences(text) for tok in _TREEBANK.tokenize(sent)]


def _bleu_tokens(text: str, tokenizer: BleuTokenizer) -> list[str]:
    if tokenizer == "treebank":
        return word_tokenize_offline(text.lower())
    if tokenizer == "simple":
        return amem_tokenize(text)
    raise ValueError(f"bleu_tokenizer must be 'treebank' or 'simple', got {tokenizer!r}")


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


def bleu1(prediction: str, gold: str, tokenizer: BleuTokenizer = "treebank") -> float:
    """A-Mem's BLEU-1: ``sentence_bleu([ref], hyp, weights=(1, 0, 0, 0), method1 smoothing)``.

    .. math::
        \\text{BLEU-1} = \\text{BP} \\cdot \\frac{\\sum_w \\min(c_{hyp}(w), c_{ref}(w))}{|hyp|},
        \\quad \\text{BP} = \\min(1, e^{1 - |ref| / |hyp|})
    """
    hyp = _bleu_tokens(prediction, tokenizer)
    ref = _bleu_tokens(gold, tokenizer)
    return float(sentence_bleu([ref], hyp, weights=(1, 0, 0, 0), smoothing_function=_SMOOTH))


def score_amem(
    prediction: str,
    gold: str | int | None,
    category: int,
    *,
    bleu_tokenizer: BleuTokenizer = "treebank",
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
