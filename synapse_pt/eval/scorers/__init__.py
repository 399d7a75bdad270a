"""Answer and retrieval scorers: official LoCoMo, A-Mem, retrieval-level metrics, LLM judge."""

from .amem import amem_tokenize, bleu1, f1_set, score_amem
from .judge import ACCURACY_PROMPT, JudgeResult, judge_answers, parse_judge_label
from .official import f1_multi, f1_tokens, is_rejection, normalize_answer, score_official
from .retrieval import evidence_recall_at_k, rejection_auc, rejection_metrics, roc_auc

__all__ = [
    "ACCURACY_PROMPT",
    "JudgeResult",
    "amem_tokenize",
    "bleu1",
    "evidence_recall_at_k",
    "f1_multi",
    "f1_set",
    "f1_tokens",
    "is_rejection",
    "judge_answers",
    "normalize_answer",
    "parse_judge_label",
    "rejection_auc",
    "rejection_metrics",
    "roc_auc",
    "score_amem",
    "score_official",
]
