"""Per-category aggregation of per-question scores (SPEC §3).

SPEC §3 asks for every metric per category, plus two summaries over the answerable categories 1-4,
because the paper's "average" matches neither (SPEC §1.4):

* ``mean_cat_1_4`` (macro): the mean of the per-category means of categories 1-4;
* ``mean_q_1_4`` (micro): the mean over all category 1-4 questions (categories weighted by size);

and the official LoCoMo code's figure, which its published numbers include:

* ``overall``: the mean over every question of all five categories (category 5 scored by its
  refusal rule). ``snap-research/locomo`` (branch ``code``) ``task_eval/evaluation_stats.py``
  averages every question's score this way.

Means are NaN-aware: a NaN score (a metric that does not apply, e.g. recall for a question without
evidence, or a judge failure) is left out of both the mean and the count. The macro mean is over the
categories 1-4 that have at least one value (a smoke run may lack some); ``n`` says how many values
each number rests on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

__all__ = ["MACRO", "MICRO", "OVERALL", "per_category", "summarize"]

MACRO = "mean_cat_1_4"
MICRO = "mean_q_1_4"
OVERALL = "overall"


def _check(df: pd.DataFrame, metrics: Sequence[str], names: Mapping[int, str]) -> None:
    missing = [c for c in ("category", *metrics) if c not in df.columns]
    if missing:
        raise KeyError(f"aggregate: per-question frame lacks column(s) {missing}; "
                       f"has {list(df.columns)}")
    unnamed = sorted(set(int(c) for c in df["category"].unique()) - set(names))
    if unnamed:
        raise KeyError(f"aggregate: no name for category number(s) {unnamed} in {dict(names)}")


def per_category(
    df: pd.DataFrame,
    metrics: Sequence[str],
    names: Mapping[int, str],
    *,
    answerable: Sequence[int] = (1, 2, 3, 4),
) -> pd.DataFrame:
    """Mean and count of each metric per category, the macro and micro rows over 1-4 and the
    official ``overall`` row over every question.

    Args:
        df: one row per question, with an int ``category`` column and the metric columns.
        metrics: metric column names.
        names: ``{raw category number: name}`` (a config; see :mod:`synapse_pt.data.categories`).
        answerable: the categories the two summary rows cover.

    Returns:
        Index: the names of the categories present (in category-number order), then
        :data:`MACRO`, :data:`MICRO` and :data:`OVERALL`. Columns: a ``(metric, "mean" | "n")``
        MultiIndex. The macro row's ``n`` is the number of question values behind it, as for the
        micro row.
    """
    _check(df, metrics, names)
    cats = df["category"].astype(int)
    grouped = df[list(metrics)].astype(float).groupby(cats).agg(["mean", "count"])
    grouped = grouped.rename(columns={"count": "n"}, level=1).sort_index()
    ans = grouped.loc[grouped.index.isin(list(answerable))]
    in_ans = cats.isin(list(answerable))
    macro, micro, overall = {}, {}, {}
    for m in metrics:
        values = df.loc[in_ans, m].astype(float)
        n = int(values.notna().sum())
        macro[(m, "mean")] = ans[(m, "mean")].mean(skipna=True)
        macro[(m, "n")] = n
        micro[(m, "mean")] = values.mean(skipna=True)
        micro[(m, "n")] = n
        every = df[m].astype(float)
        overall[(m, "mean")] = every.mean(skipna=True)
        overall[(m, "n")] = int(every.notna().sum())
    grouped.index = [names[int(c)] for c in grouped.index]
    summary = pd.DataFrame([macro, micro, overall], index=[MACRO, MICRO, OVERALL])
    summary.columns = pd.MultiIndex.from_tuples(summary.columns)
    out = pd.concat([grouped, summary[grouped.columns]])
    out.index.name = "category"
    for m in metrics:
        out[(m, "n")] = out[(m, "n")].astype(int)
    return out


def _json_number(x: Any) -> float | int | None:
    """A JSON-safe number: NaN -> ``None`` (``json.dump`` would write the invalid token NaN)."""
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


def summarize(
    df: pd.DataFrame,
    metrics: Sequence[str],
    names: Mapping[int, str],
    *,
    answerable: Sequence[int] = (1, 2, 3, 4),
) -> dict[str, dict[str, Any]]:
    """Nested summary for ``metrics.json``.

    Returns:
        ``{metric: {<category name>: mean, ..., "mean_cat_1_4": macro, "mean_q_1_4": micro,
        "overall": mean over every question, "n": {<category name>: count, ...,
        "mean_q_1_4": count over 1-4, "overall": count over all}}}``. Means are floats,
        NaN written as ``None``; counts are ints.
    """
    table = per_category(df, metrics, names, answerable=answerable)
    out: dict[str, dict[str, Any]] = {}
    for m in metrics:
        entry: dict[str, Any] = {str(k): _json_number(v) for k, v in table[(m, "mean")].items()}
        counts = {str(k): int(v) for k, v in table[(m, "n")].items() if k != MACRO}
        entry["n"] = counts
        out[m] = entry
    return out
