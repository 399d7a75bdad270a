"""Tables of one or many runs, from their ``metrics.json`` contents.

Used by every run (its own ``tables/``) and by ``scripts/make_tables.py`` (many run folders).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from synapse_pt.eval.qa.aggregate import run_summary_names
from synapse_pt.eval.reports.tables import ablation_table, efficiency_table, main_table

#: the metrics a table is made of where the runs have them; ``judge`` stands for each judge a run
#: asked (:func:`table_metrics`: ``judge_mem0``, ``judge_gaama`` under ``eval.judges``)
TABLE_METRICS = ("f1_official", "f1_amem", "bleu1", "judge", "recall@5", "recall@10", "recall@30")
#: the golds a run's numbers can be scored against, in table order, and the suffix of their
#: tables' names (the official gold's tables keep their names)
GOLD_SUFFIX = {"official": "", "audited": "_audited"}
#: the column of every main table beside the metric: the mean context tokens a question the run
#: showed (``retrieval.context_tokens_mean``): recall@10 of a system that shows 15,000 tokens is
#: not recall@10 of one that shows 700
CONTEXT_COLUMN = "context tokens/question"


def run_judges(identity: Mapping[str, Any]) -> list[str]:
    """The judge metrics a run recorded, in the order it asked its judges: ``judge_<protocol>``
    for each of ``eval.judges`` (``identity.judges``), else the one judge's ``judge``
    (:func:`~synapse_pt.eval.qa.pipeline.judge_column`)."""
    return [f"judge_{p}" for p in identity.get("judges") or []] or ["judge"]


def table_metrics(runs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """:data:`TABLE_METRICS` with ``judge`` standing for every judge the runs asked
    (:func:`run_judges`), in the order they asked them."""
    judges = list(dict.fromkeys(j for m in runs.values()
                                for j in run_judges(m.get("identity", {}))))
    return [name for metric in TABLE_METRICS
            for name in (judges if metric == "judge" else [metric])]


def run_gold(identity: Mapping[str, Any]) -> str:
    """``dataset.gold`` of a run (``official``, ``audited`` or ``both``); a run recorded before the
    setting existed scored the release's gold: ``official``."""
    return str((identity.get("dataset") or {}).get("gold") or "official")


def gold_sections(metrics: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """``{gold: per-metric summaries}`` of a run's ``metrics.json``: a ``both`` run's ``metrics``
    are the official gold's and ``metrics_audited`` the audited gold's; an ``audited`` run's
    ``metrics`` are the audited gold's."""
    gold = run_gold(metrics.get("identity", {}))
    if gold == "both":
        return {"official": metrics["metrics"], "audited": metrics["metrics_audited"]}
    if gold not in GOLD_SUFFIX:
        raise ValueError(f"metrics.json: unknown dataset.gold {gold!r} (known: "
                         f"{[*GOLD_SUFFIX, 'both']})")
    return {gold: metrics["metrics"]}


def common_golds(runs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The golds every run was scored against (official first); an error naming each run's gold
    when there is none (a table never sets numbers under two golds side by side)."""
    sections = {label: gold_sections(m) for label, m in runs.items()}
    common = [g for g in GOLD_SUFFIX if all(g in s for s in sections.values())]
    if runs and not common:
        raise ValueError("tables: the runs were scored against different golds ("
                         + ", ".join(f"{label}: {run_gold(m.get('identity', {}))}"
                                     for label, m in runs.items())
                         + "); a table holds one gold: tabulate them separately")
    return common


def run_tables(runs: Mapping[str, Mapping[str, Any]], names: Mapping[int, str], *,
               ablation_baseline: str | None = None) -> dict[str, pd.DataFrame]:
    """``{table name: frame}`` for the metrics the runs have in common, under each gold they were
    all scored against (:func:`common_golds`): the official gold's tables as ``main_<metric>``,
    the audited gold's as ``main_<metric>_audited``; each table names its gold (the index's name,
    ``attrs["gold"]``), and the paper's rows (official gold) stand only beside official ones.
    Every main table shows each run's mean context tokens a question (:data:`CONTEXT_COLUMN`)
    beside its metric.

    Args:
        runs: ``{row label: metrics.json content}``.
        names: category names.
        ablation_baseline: label of the full-system row; when given (and present) ablation tables
            with the paper's reported effects are added.
    """
    golds = common_golds(runs)
    tables: dict[str, pd.DataFrame] = {}
    # the categories of the runs' dataset (identity; LoCoMo's where an older run has none)
    first = next(iter(runs.values()), {}).get("identity", {})
    answerable = tuple(first.get("answerable_categories", (1, 2, 3, 4)))
    unanswerable = first.get("unanswerable_category", 5)
    locomo = answerable == (1, 2, 3, 4) and unanswerable == 5
    for gold in golds:
        results = {label: gold_sections(m)[gold] for label, m in runs.items()}
        common = set.intersection(*(set(r) for r in results.values())) if results else set()
        suffix = GOLD_SUFFIX[gold]
        for metric in table_metrics(runs):
            if metric not in common:
                continue
            # the paper's numbers are LoCoMo F1 under the official protocol and gold
            paper = metric == "f1_official" and locomo and gold == "official"
            main = main_table(results, names, include_paper=paper, metric=metric,
                              answerable=answerable, adversarial=unanswerable)
            main[CONTEXT_COLUMN] = [_context_tokens(runs.get(label)) for label in main.index]
            tables[f"main_{metric}{suffix}"] = name_gold(main, gold)
            if ablation_baseline in results and locomo:
                ablation = ablation_table(results, names, include_paper=paper, metric=metric,
                                          baseline=ablation_baseline)
                tables[f"ablation_{metric}{suffix}"] = name_gold(ablation, gold)
    efficiency = {label: _efficiency_row(m, golds[0]) for label, m in runs.items()
                  if "usage" in m}
    if efficiency:
        # the paper's efficiency rows are LoCoMo runs: beside another benchmark they mislead
        table = efficiency_table(efficiency, include_paper=locomo and golds[0] == "official")
        tables["efficiency"] = name_gold(table, golds[0])
    return tables


def _context_tokens(metrics: Mapping[str, Any] | None) -> float:
    """A run's mean context tokens a question (NaN for a paper row, or a run without it)."""
    value = ((metrics or {}).get("retrieval") or {}).get("context_tokens_mean")
    return math.nan if value is None else float(value)


def name_gold(table: pd.DataFrame, gold: str) -> pd.DataFrame:
    """``table`` whose index is named for the gold its numbers were scored against
    (``system (audited gold)``), recorded in ``attrs["gold"]`` too."""
    table.index.name = f"{table.index.name} ({gold} gold)"
    table.attrs["gold"] = gold
    return table


def _efficiency_row(metrics: Mapping[str, Any], gold: str) -> dict[str, float | None]:
    usage = metrics["usage"]
    macro = run_summary_names(metrics.get("identity", {}))[0]
    f1 = gold_sections(metrics)[gold].get("f1_official", {}).get(macro)
    return {"tokens_per_query": usage.get("tokens_per_query"),
            "latency_s": usage.get("latency_s_per_query"),
            "cost_per_1k": usage.get("cost_per_1k_queries"),
            "f1": f1}
