"""Membox's own answer F1 (nnnoidea/Membox ``membox.py``: ``_tokens``, ``_f1``), SPEC §2-3: the
column ``f1_membox``.

* tokens: lowercase, every run of characters other than ``A-Z a-z 0-9`` is a separator (so
  ``"rex's"`` -> ``rex``, ``s``); no stemming, no stop words;
* F1 over token **multisets** (a repeated token counts as often as it appears in both), the best
  over the gold answers when a gold is a list; 0 when either side has no token;
* category 5 is not scored (``None``): Membox skips adversarial questions;
* a question whose retrieved context is empty is not scored either (``None``), as Membox's
  evaluation leaves it out: ``AnswerGenerator._generate_for_ranking`` returns before answering
  or scoring when ``contexts`` is empty (under Trace mode: no top box has a trace). Every other
  metric counts it; their number is ``retrieval.empty_context_questions`` in ``metrics.json``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from synapse_pt.retrieval.items import RetrievedItem
from synapse_pt.steps import Scorer, register

__all__ = ["f1_membox", "membox_tokenize", "score_membox"]

_SEPARATORS = re.compile(r"[^A-Za-z0-9]+")
ADVERSARIAL = 5


def membox_tokenize(text: object) -> list[str]:
    """Membox's ``_tokens``: lowercase, split on anything not alphanumeric."""
    return [t for t in _SEPARATORS.sub(" ", str(text or "").lower()).split() if t]


def f1_membox(prediction: str, gold: Any) -> float:
    """Token-multiset F1 of ``prediction`` against ``gold`` (a string or a list: the best)."""
    pred = Counter(membox_tokenize(prediction))
    best = 0.0
    for g in gold if isinstance(gold, list) else [gold]:
        ref = Counter(membox_tokenize(g))
        overlap = sum((pred & ref).values())
        if overlap:
            p, r = overlap / sum(pred.values()), overlap / sum(ref.values())
            best = max(best, 2 * p * r / (p + r))
    return best


def score_membox(prediction: str, gold: Any, category: int) -> float | None:
    """``f1_membox`` for categories 1-4; ``None`` (not scored) for category 5."""
    return None if category == ADVERSARIAL else f1_membox(prediction, gold)


def _score(prediction: str, gold: Any, category: int,
           items: Sequence[RetrievedItem]) -> dict[str, float | None]:
    return {"f1_membox": score_membox(prediction, gold, category) if items else None}


MEMBOX_SCORER = register(Scorer(
    "membox", ("f1_membox",), _score, rank=2,
    # a question with an empty context: left out (Membox's evaluation); runs recorded before
    # the field existed scored it
    protocol={"membox_empty_context": "exclude"},
    protocol_before={"membox_empty_context": "count"}))
