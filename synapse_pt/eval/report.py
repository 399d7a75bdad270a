"""Tables of one or many runs, from their ``metrics.json`` contents.

Used by every run (its own ``tables/``) and by ``scripts/make_tables.py`` (many run folders).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from .tables import ablation_table, efficiency_table, main_table

TABLE_METRICS = ("f1_official", "f1_amem", "bleu1", "judge", "recall@5", "recall@10", "recall@30")


def run_tables(runs: Mapping[str, Mapping[str, Any]], names: Mapping[int, str], *,
               ablation_baseline: str | None = None) -> dict[str, pd.DataFrame]:
    """``{table name: frame}`` for the metrics the runs have in common.

    Args:
        runs: ``{row label: metrics.json content}``.
        names: category names.
        ablation_baseline: label of the full-system row; when given (and present) ablation tables
            with the paper's reported effects are added.
    """
    results = {label: m["metrics"] for label, m in runs.items()}
    common = set.intersection(*(set(r) for r in results.values())) if results else set()
    tables: dict[str, pd.DataFrame] = {}
    # the categories of the runs' dataset (identity; LoCoMo's where an older run has none)
    first = next(iter(runs.values()), {}).get("identity", {})
    answerable = tuple(first.get("answerable_categories", (1, 2, 3, 4)))
    unanswerable = first.get("unanswerable_category", 5)
    locomo = answerable == (1, 2, 3, 4) and unanswerable == 5
    for metric in TABLE_METRICS:
        if metric not in common:
            continue
        # the paper's numbers are LoCoMo F1 under the official protocol
        paper = metric == "f1_official" and locomo
        tables[f"main_{metric}"] = main_table(results, names, include_paper=paper, metric=metric,
                                              answerable=answerable, adversarial=unanswerable)
        if ablation_baseline in results and locomo:
            tables[f"ablation_{metric}"] = ablation_table(
                results, names, include_paper=paper, metric=metric, baseline=ablation_baseline)
    efficiency = {label: _efficiency_row(m) for label, m in runs.items() if "usage" in m}
    if efficiency:
        # the paper's efficiency rows are LoCoMo runs: beside another benchmark they mislead
        tables["efficiency"] = efficiency_table(efficiency, include_paper=locomo)
    return tables


def _efficiency_row(metrics: Mapping[str, Any]) -> dict[str, float | None]:
    usage = metrics["usage"]
    f1 = metrics["metrics"].get("f1_official", {}).get("mean_cat_1_4")
    return {"tokens_per_query": usage.get("tokens_per_query"),
            "latency_s": usage.get("latency_s_per_query"),
            "cost_per_1k": usage.get("cost_per_1k_queries"),
            "f1": f1}
