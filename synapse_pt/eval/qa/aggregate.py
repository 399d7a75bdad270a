"""Per-category aggregation of per-question scores (SPEC §3).

SPEC §3 asks for every metric per category, plus two summaries over the answerable categories 1-4,
because the paper's "average" matches neither (SPEC §1.4):

* ``mean_cat_1_4`` (macro): the mean of the per-category means of categories 1-4;
* ``mean_q_1_4`` (micro): the mean over all category 1-4 questions (categories weighted by size);

and the official LoCoMo code's figure, which its published numbers include:

* ``overall``: the mean over every question of all five categories (category 5 scored by its
  refusal rule). ``snap-research/locomo`` (branch ``code``) ``task_eval/evaluation_stats.py``
  averages every question's score this way.

The two summaries are named by the categories they cover (:func:`summary_names`): LoCoMo's
``mean_cat_1_4`` and ``mean_q_1_4``, REALTALK's ``mean_cat_1_3`` / ``mean_q_1_3`` (its categories
1-3), BEAM's ``mean_cat_2_10`` / ``mean_q_2_10`` (its abilities but abstention, 1).

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

__all__ = ["MACRO", "MICRO", "OVERALL", "answerable_span", "per_category", "run_summary_names",
           "summarize", "summary_names"]

#: LoCoMo's two summaries (its answerable categories 1-4); other datasets': :func:`summary_names`
MACRO = "mean_cat_1_4"
MICRO = "mean_q_1_4"
OVERALL = "overall"


def answerable_span(answerable: Sequence[int]) -> str:
    """The answerable categories in a label: ``"1-4"`` for a run of consecutive numbers, else the
    numbers joined by ``","`` (``"1,3"``)."""
    cats = sorted(int(c) for c in answerable)
    if not cats:
        raise ValueError("aggregate: no answerable category to summarise")
    if cats == list(range(cats[0], cats[-1] + 1)) and len(cats) > 1:
        return f"{cats[0]}-{cats[-1]}"
    return ",".join(map(str, cats))


def summary_names(answerable: Sequence[int] = (1, 2, 3, 4)) -> tuple[str, str]:
    """``(macro, micro)``: the names of the mean of the per-category means and of the mean over
    the questions of the ``answerable`` categories, e.g. ``("mean_cat_1_4", "mean_q_1_4")``
    (LoCoMo), ``("mean_cat_2_10", "mean_q_2_10")`` (BEAM's abilities but abstention)."""
    span = answerable_span(answerable).replace("-", "_").replace(",", "_")
    return f"mean_cat_{span}", f"mean_q_{span}"


def run_summary_names(identity: Mapping[str, Any]) -> tuple[str, str]:
    """:func:`summary_names` of a run from its ``metrics.json`` identity (its
    ``answerable_categories``; LoCoMo's 1-4 where an older run has none)."""
    return summary_names(tuple(identity.get("answerable_categories") or (1, 2, 3, 4)))


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
        Index: the names of the categories present (in category-number order), then the macro
        and micro means (:func:`summary_names` of ``answerable``) and :data:`OVERALL`. Columns:
        a ``(metric, "mean" | "n")`` MultiIndex. The macro row's ``n`` is the number of question
        values behind it, as for the micro row.
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
    summary = pd.DataFrame([macro, micro, overall], index=[*summary_names(answerable), OVERALL])
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
        "mean_q_1_4": count over 1-4, "overall": count over all}}}`` (the summaries named by
        :func:`summary_names` of ``answerable``). Means are floats, NaN written as ``None``;
        counts are ints.
    """
    table = per_category(df, metrics, names, answerable=answerable)
    macro_name = summary_names(answerable)[0]
    out: dict[str, dict[str, Any]] = {}
    for m in metrics:
        entry: dict[str, Any] = {str(k): _json_number(v) for k, v in table[(m, "mean")].items()}
        counts = {str(k): int(v) for k, v in table[(m, "n")].items() if k != macro_name}
        entry["n"] = counts
        out[m] = entry
    return out
