"""Answer and retrieval scorers: official LoCoMo, A-Mem, retrieval-level metrics, LLM judge.

The per-question answer scorers are registered once (:class:`~synapse_pt.steps.Scorer`: a
name, the columns it writes, the function); the QA pipeline writes, and the tables read, the
columns of :func:`answer_scorers`. A related system's own scorer lives in its package (Membox's
F1, :mod:`synapse_pt.memory.membox.score`).
"""

from collections.abc import Sequence
from typing import Any

from synapse_pt.eval.qa.scorers.amem import amem_tokenize, bleu1, f1_set, score_amem
from synapse_pt.eval.qa.scorers.judge import (
    ACCURACY_PROMPT,
    JudgeResult,
    judge_answers,
    parse_judge_label,
)
from synapse_pt.eval.qa.scorers.official import (
    f1_multi,
    f1_tokens,
    is_rejection,
    normalize_answer,
    score_official,
)
from synapse_pt.eval.qa.scorers.retrieval import (
    evidence_recall_at_k,
    rejection_auc,
    rejection_metrics,
    roc_auc,
)
from synapse_pt.retrieval.items import RetrievedItem
from synapse_pt.steps import Scorer, register, scorer_columns, scorers

__all__ = ["ACCURACY_PROMPT", "JudgeResult", "amem_tokenize", "answer_scorers", "bleu1",
           "evidence_recall_at_k", "f1_multi", "f1_set", "f1_tokens", "is_rejection",
           "judge_answers", "normalize_answer", "parse_judge_label", "rejection_auc",
           "rejection_metrics", "roc_auc", "score_amem", "score_official", "scorer_columns",
           "scorer_protocol", "table_columns"]


def _official(prediction: str, gold: Any, category: int,
              items: Sequence[RetrievedItem]) -> dict[str, float]:
    return {"f1_official": score_official(prediction, gold, category)}


def _amem(prediction: str, gold: Any, category: int,
          items: Sequence[RetrievedItem]) -> dict[str, float]:
    return score_amem(prediction, gold, category)


register(Scorer("official", ("f1_official",), _official, rank=0))
register(Scorer("amem", ("f1_amem", "bleu1"), _amem, rank=1))


def table_columns() -> list[str]:
    """The answer scorers' columns as tables show them: the F1s first, then the others (BLEU-1),
    each in registry order."""
    return sorted(scorer_columns(), key=lambda c: not c.startswith("f1_"))


def scorer_protocol(qa: bool) -> dict[str, Any]:
    """The identity fields the scorers record (``metrics.json``; ``None`` outside qa mode)."""
    return {k: v if qa else None for s in scorers() for k, v in s.protocol.items()}


def answer_scorers() -> list[Scorer]:
    """Every answer scorer, in column order (the official F1, A-Mem's F1 and BLEU-1, then the
    related systems' own)."""
    return scorers()
