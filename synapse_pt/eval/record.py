"""What a run records: its identity, its metrics, what its answers cost and what it paid.

:func:`run_metrics` assembles ``metrics.json`` from an evaluation (:func:`~synapse_pt.eval.pipeline.
evaluate`); :func:`run_spend` is ``spend.json``; :func:`flatten_metrics` the flat names a logger
and a sweeper read; :func:`build_tables` the run's own ``tables/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from synapse_pt.models.accounting import summarize_usage
from synapse_pt.models.llm.base import LLM

from .aggregate import summarize
from .outputs import prompt_hashes
from .pipeline import EvalSettings, is_strict
from .report import run_tables

# what a run's answers cost wherever they came from (metrics.json, identical when a run resumes);
# which of them were paid for in this run is in spend.json
RUN_STATE_USAGE = ("n_cached", "cost_usd_spent")


def run_metrics(df: pd.DataFrame, summary: Mapping[str, Any], identity: Mapping[str, Any], *,
                settings: EvalSettings, names: Mapping[int, str], context_tokenizer: str,
                llm: LLM | None, prices: Mapping[str, Any], smoke: bool = False
                ) -> dict[str, Any]:
    """``metrics.json`` of a run: ``identity`` (what the caller knows of the run: commit, config
    hash, dataset, memory, models) completed with the evaluation's protocol, ``metrics`` (per
    category and both means of every per-question metric column of ``df``), ``retrieval``, and
    where present ``judge`` and ``usage`` (what the method's answers cost)."""
    metric_cols = [c for c in df.columns if c.startswith(("recall@", "f1_", "bleu", "judge"))]
    qa = settings.mode == "qa"
    metrics: dict[str, Any] = {
        "identity": {
            **identity,
            "eval_mode": settings.mode,
            "scoring_protocols": ["official", "amem", "membox"] if qa else [],
            "judge_protocol": (settings.judge_protocol if qa and settings.judge_runs > 0
                               else None),
            "category_date_instruction": settings.category_date_instruction,
            "category5_options": settings.category5_options,
            "strict": is_strict(settings),
            "answer_style": settings.answer_style,
            "prompts": prompt_hashes(),
            "context_tokenizer": context_tokenizer,
            "category_names": {str(k): v for k, v in names.items()},
            "smoke": smoke,
        },
        "metrics": summarize(df, metric_cols, names),
        "retrieval": {k: v for k, v in summary.items() if not k.startswith("judge")},
    }
    judge = {k: v for k, v in summary.items() if k.startswith("judge")}
    if judge:
        metrics["judge"] = judge
    if llm is not None and qa:
        answered = df[~df["gated"]]
        metrics["usage"] = method_usage(answered, prices, model=llm.model, num_queries=len(df))
    return metrics


def method_usage(answered: pd.DataFrame, prices: Mapping[str, Any], *, model: str,
                 num_queries: int) -> dict[str, Any]:
    """Tokens, latency and cost of the method's answers (the efficiency table, SPEC §1.4): the
    answers' recorded token counts, whether or not this run found them in the cache."""
    usage = summarize_usage(
        answered[["prompt_tokens", "completion_tokens", "latency_s"]].to_dict("records"),
        prices, model=model, num_queries=num_queries)
    return {k: v for k, v in usage.items() if k not in RUN_STATE_USAGE}


def run_spend(llm: LLM | None, prices: Mapping[str, Any]) -> dict[str, Any] | None:
    """What this run sent to the model and paid: every response the run's LLM served (answers,
    judge, extraction), cache hits at no cost. ``None`` without a cached LLM."""
    served = getattr(llm, "served", None)
    if served is None:
        return None
    usage = summarize_usage(served, prices)
    paid = [r for r in served if not r.cached]
    return {"n_responses": usage["n_responses"], "n_cached": usage["n_cached"],
            "n_paid": len(paid),
            "prompt_tokens_paid": sum(r.prompt_tokens for r in paid),
            "completion_tokens_paid": sum(r.completion_tokens for r in paid),
            "cost_usd_spent": usage["cost_usd_spent"],
            "cost_usd_if_uncached": usage["cost_usd"],
            "unpriced_models": usage["unpriced_models"]}


def flatten_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """``{"recall@10/single-hop": 0.61, ..., "retrieval/false_rejection_rate": ...}``."""
    flat: dict[str, float] = {}
    for metric, per_cat in metrics.get("metrics", {}).items():
        for key, value in per_cat.items():
            if key != "n" and isinstance(value, (int, float)):
                flat[f"{metric}/{key}"] = float(value)
    for section in ("retrieval", "judge", "usage"):
        for key, value in metrics.get(section, {}).items():
            if isinstance(value, (int, float)):
                flat[f"{section}/{key}"] = float(value)
    return flat


def build_tables(metrics: Mapping[str, Any], names: Mapping[int, str], run_label: str
                 ) -> dict[str, pd.DataFrame]:
    """This run's own tables (one row, plus the paper's rows where the metric matches)."""
    return run_tables({run_label: metrics}, names)
