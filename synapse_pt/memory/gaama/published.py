"""GAAMA's published LoCoMo numbers (SPEC §2), as data: arXiv 2603.27910 and swarna-kpaul/gaama
``README.md`` at 2d992f7, "Key Results"; shared/seeds/002_*."""

from __future__ import annotations

from typing import Any

from synapse_pt.steps import Published, register

# LLM-judge mean reward, %, LoCoMo-10 categories 1-4, 1,540 questions, mean over questions;
# gpt-4o-mini answers and judge; memory trimmed to 1,000 words (its "Commonsense" row, 96
# questions, is category 3, open-domain). An unreadable judge reply scores 0 in that code
# (``evals/locomo/locomo_eval.py``).
GAAMA: dict[str, Any] = {
    "mean_reward": {"GAAMA": 78.9, "semantic_only": 78.0, "RAG (tuned)": 75.0, "HippoRAG": 69.9,
                    "Nemori": 52.1, "A-Mem": 47.2, "GAAMA_ppr_weight_1.0": 74.6},
    "per_category": {"multi-hop": 72.2, "temporal": 71.9, "open-domain": 49.3, "single-hop": 87.2},
    "per_category_semantic_only": {"multi-hop": 72.2, "temporal": 71.5, "open-domain": 49.2,
                                   "single-hop": 85.7},
    "per_category_rag": {"multi-hop": 67.5, "temporal": 59.0, "open-domain": 44.6,
                         "single-hop": 87.1},
    "n_questions": 1540,
    # the graph, the answers and the judge by gpt-4o-mini (one judge call per question, its
    # retries aside); its own answer step and judge
    # (eval.answer_style=system -> gaama, eval.judge_protocol=system -> gaama, from its files)
    "our_build": "memory=gaama extractor=llm llm=openai eval=judge eval.judge_runs=1",
    "metric": "LLM judge reward",
}

PUBLISHED = register(Published(
    "GAAMA", GAAMA["per_category"], GAAMA["mean_reward"]["GAAMA"], "judge",
    "LLM judge, fraction of the reference's key facts covered (unreadable reply: 0), categories "
    "1-4 (1,540 questions), gpt-4o-mini, mean over questions",
    GAAMA["our_build"],
    "GAAMA, arXiv 2603.27910; swarna-kpaul/gaama README.md (2d992f7); SPEC §2; shared/seeds/002_*",
    rank=2))
