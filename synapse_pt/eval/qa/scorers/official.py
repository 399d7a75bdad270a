"""The official LoCoMo answer scorer (snap-research/locomo, ``task_eval/evaluation.py``).

Reproduces ``normalize_answer``, ``f1_score`` (here :func:`f1_tokens`), ``f1`` (here
:func:`f1_multi`) and the category routing of ``eval_question_answering`` (here
:func:`score_official`), SPEC §3. The official code's quirks, kept on purpose so numbers match:

* Normalisation order is: drop commas, lowercase, drop ASCII punctuation (``string.punctuation``),
  drop the words a/an/the/**and**, squeeze whitespace. Only ASCII punctuation goes: curly quotes and
  dashes (``’ “ —``) survive and stay glued to their word ("caroline’s" is one token).
* Articles are removed with a word-boundary regex *after* punctuation is gone, so "rock-and-roll"
  becomes "rockandroll" (one token) while "rock and roll" loses its "and".
* Tokens are Porter-stemmed (NLTK's default ``NLTK_EXTENSIONS`` mode), and repeated tokens count
  (``Counter`` intersection), so "paris paris" vs "paris" scores P = 1/2, R = 1.
* ``f1_score`` returns the integer 0 when nothing overlaps; here always a float.
* Category 1 splits prediction and gold on raw commas *before* normalising; an empty part (gold
  ``"a, "``) still counts in the mean and scores 0 against everything.
* Category 3 keeps only the gold before the first ``';'`` (the rest is an explanation).
* Category 5 ignores the gold: 1 iff the lower-cased prediction *contains* "no information
  available" or "not mentioned". A refusal worded differently ("No record of such pet found.")
  scores 0, and "not mentioned" anywhere (even "... not mentioned, but she likes X") scores 1, so
  the system's refusal text must contain one of the two phrases.
* Integer gold answers are compared as ``str(answer)``.

The official loop reads ``line['answer']`` for every item, which raises ``KeyError`` on the 444
category-5 items of the release that carry only ``adversarial_answer``; here a ``None`` gold is
accepted for category 5 (it is never read) and rejected for categories 1-4.
"""

from __future__ import annotations

import re
import string
from collections import Counter

from synapse_pt.retrieval.text import porter_stem

__all__ = [
    "REJECTION_PHRASES",
    "f1_multi",
    "f1_tokens",
    "is_rejection",
    "normalize_answer",
    "score_official",
    "stemmed_tokens",
]

# The phrases the official category-5 rule looks for (lower case, substring match).
REJECTION_PHRASES: tuple[str, ...] = ("no information available", "not mentioned")

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


def normalize_answer(text: str) -> str:
    """Official LoCoMo normalisation, in the official order.

    ``"The Cat, and a Dog!"`` -> drop commas ``"The Cat and a Dog!"`` -> lower
    ``"the cat and a dog!"`` -> strip punctuation ``"the cat and a dog"`` -> drop a/an/the/and
    ``"  cat    dog"`` -> squeeze spaces ``"cat dog"``.
    """
    text = text.replace(",", "")
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def stemmed_tokens(text: str) -> list[str]:
    """Normalised, whitespace-split, Porter-stemmed tokens (the official F1's token list)."""
    return [porter_stem(w) for w in normalize_answer(text).split()]


def f1_tokens(prediction: str, gold: str) -> float:
    """Official token F1 (``f1_score``): stemmed tokens, repeated tokens counted.

    .. math::
        P = \\frac{|p \\cap g|}{|p|}, \\quad R = \\frac{|p \\cap g|}{|g|}, \\quad
        F_1 = \\frac{2PR}{P + R}

    with :math:`\\cap` the multiset intersection. 0.0 when nothing overlaps (which includes an
    empty prediction or an empty gold after normalisation).
    """
    pred = stemmed_tokens(prediction)
    ref = stemmed_tokens(gold)
    num_same = sum((Counter(pred) & Counter(ref)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred)
    recall = num_same / len(ref)
    return 2 * precision * recall / (precision + recall)


def f1_multi(prediction: str, gold: str) -> float:
    """Official multi-answer F1 (``f1``, category 1).

    Prediction and gold are split on commas (parts stripped); each gold part takes its best
    :func:`f1_tokens` against any prediction part; the result is the mean over gold parts.
    """
    pred_parts = [p.strip() for p in prediction.split(",")]
    gold_parts = [g.strip() for g in gold.split(",")]
    best = [max(f1_tokens(p, g) for p in pred_parts) for g in gold_parts]
    return sum(best) / len(best)


def is_rejection(prediction: str) -> bool:
    """True iff the prediction contains one of :data:`REJECTION_PHRASES` (case-insensitive)."""
    low = prediction.lower()
    return any(phrase in low for phrase in REJECTION_PHRASES)


def score_official(prediction: str, gold: str | int | None, category: int) -> float:
    """Score one answer with the official LoCoMo protocol.

    Args:
        prediction: the system's answer (``""`` scores 0).
        gold: the gold answer; integers are compared as ``str(gold)``; may be ``None`` only for
            category 5, whose gold is never read.
        category: the raw LoCoMo category number: 1 -> :func:`f1_multi`; 2, 3, 4 ->
            :func:`f1_tokens` (category 3: gold cut at the first ``';'``); 5 -> 1.0 iff
            :func:`is_rejection` else 0.0.

    Returns:
        A score in [0, 1].
    """
    category = int(category)
    if category == 5:
        return 1.0 if is_rejection(prediction) else 0.0
    if category not in (1, 2, 3, 4):
        raise ValueError(f"official LoCoMo scorer: unknown category {category!r} (expected 1-5)")
    if gold is None:
        raise ValueError(
            f"official LoCoMo scorer: category {category} needs a gold answer, got None")
    gold = str(gold)
    if category == 3:
        gold = gold.split(";")[0].strip()
    if category == 1:
        return f1_multi(prediction, gold)
    return f1_tokens(prediction, gold)
