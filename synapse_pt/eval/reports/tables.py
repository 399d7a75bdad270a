"""Result tables: main (per category), ablations, efficiency; Markdown and LaTeX writers.

Inputs are what :func:`synapse_pt.eval.qa.aggregate.summarize` writes to ``metrics.json``
(``{metric: {<category name>: mean, "mean_cat_1_4": ..., "mean_q_1_4": ..., "n": {...}}}``), one
per system or config. Our scores are fractions; tables multiply them by ``scale`` (100: percent,
like the papers). Rows holding numbers a paper reports
(:mod:`synapse_pt.eval.reports.paper_numbers`) are
named ``"paper: <system>"``; the paper's own "average" (which matches neither of our two means, SPEC
§1.4) gets its own column, ``paper_average``, never ours.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from synapse_pt.eval.qa.aggregate import OVERALL, summary_names
from synapse_pt.eval.reports import paper_numbers

__all__ = [
    "PAPER_AVERAGE",
    "PAPER_PREFIX",
    "ablation_table",
    "cost_per_1k_queries",
    "efficiency_table",
    "main_table",
    "to_latex",
    "to_markdown",
]

PAPER_PREFIX = "paper: "
PAPER_AVERAGE = "paper_average"
EFFICIENCY_COLUMNS = ("tokens/query", "latency s/query", "$ per 1,000 queries", "F1", "F1 per $")


def _columns(names: Mapping[int, str], answerable: Sequence[int], adversarial: int | None
             ) -> list[str]:
    extra = [] if adversarial is None else [names[adversarial]]
    return [names[c] for c in answerable] + [*extra, *summary_names(answerable), OVERALL,
                                             PAPER_AVERAGE]


def _our_row(entry: Mapping[str, Any], columns: Sequence[str], scale: float) -> dict[str, float]:
    row = {}
    for col in columns:
        v = entry.get(col) if col != PAPER_AVERAGE else None
        row[col] = math.nan if v is None else float(v) * scale
    return row


def _paper_row(values: Mapping[str, float | None], columns: Sequence[str]) -> dict[str, float]:
    row = {col: math.nan for col in columns}
    for key, v in values.items():
        col = PAPER_AVERAGE if key == "average" else key
        if col in row and v is not None:
            row[col] = float(v)
    return row


def _entry(results: Mapping[str, Mapping[str, Any]], system: str, metric: str) -> Mapping[str, Any]:
    try:
        return results[system][metric]
    except KeyError:
        raise KeyError(f"tables: results[{system!r}] has no metric {metric!r}; has "
                       f"{sorted(results[system])}") from None


def main_table(
    results: Mapping[str, Mapping[str, Any]],
    names: Mapping[int, str],
    include_paper: bool = True,
    *,
    metric: str = "f1_official",
    scale: float = 100.0,
    answerable: Sequence[int] = (1, 2, 3, 4),
    adversarial: int | None = 5,
) -> pd.DataFrame:
    """Main results table.

    Args:
        results: ``{system or config: summarize() output}``.
        names: ``{raw category: name}``; columns are named by it, and paper numbers are aligned
            to our columns by these names.
        include_paper: append the SYNAPSE paper's Table 1 rows (``"paper: <system>"``).
        metric: which metric of each result to show.

    Returns:
        Rows: systems (in the given order), then the paper rows. Columns: the names of the
        answerable categories, the adversarial category, the two means over the answerable ones
        (:func:`~synapse_pt.eval.qa.aggregate.summary_names`: ``mean_cat_1_4``, ``mean_q_1_4`` for
        LoCoMo), ``overall``, ``paper_average``. ``attrs`` records ``metric`` and ``scale``.
    """
    columns = _columns(names, answerable, adversarial)
    rows = {s: _our_row(_entry(results, s, metric), columns, scale) for s in results}
    if include_paper:
        for system, values in paper_numbers.MAIN_F1.items():
            rows[PAPER_PREFIX + system] = _paper_row(values, columns)
    df = pd.DataFrame.from_dict(rows, orient="index", columns=columns)
    df.index.name = "system"
    df.attrs.update(metric=metric, scale=scale)
    return df


def ablation_table(
    results: Mapping[str, Mapping[str, Any]],
    names: Mapping[int, str],
    include_paper: bool = True,
    *,
    metric: str = "f1_official",
    baseline: str = "full",
    scale: float = 100.0,
    paper_metrics: Sequence[str] = ("f1_official",),
    answerable: Sequence[int] = (1, 2, 3, 4),
    adversarial: int = 5,
) -> pd.DataFrame:
    """Ablation table: one row per config, each followed by the paper's number for it.

    The paper reports one number per ablation (SPEC §1.3: e.g. ``no_gate`` adversarial 67.2). When
    ``include_paper`` and ``metric`` is in ``paper_metrics`` (the paper reports F1; by default only
    our official-protocol F1 is put beside it), a row ``"paper: <config>"`` follows each config the
    paper ablates, holding the reported value in its column (``paper_average`` for "average"), and
    ``"paper: SYNAPSE"`` (Table 1) follows the ``baseline`` config.

    Returns:
        Columns as :func:`main_table`; ``attrs`` records ``metric``, ``scale``, ``baseline``.
    """
    columns = _columns(names, answerable, adversarial)
    with_paper = include_paper and metric in paper_metrics
    by_config: dict[str, dict[str, float | None]] = {}
    for ab in paper_numbers.ABLATIONS:
        by_config.setdefault(ab["config"], {})[ab["metric"]] = ab["ablated"]
    rows: dict[str, dict[str, float]] = {}
    for config in results:
        rows[config] = _our_row(_entry(results, config, metric), columns, scale)
        if not with_paper:
            continue
        if config == baseline:
            rows[PAPER_PREFIX + "SYNAPSE"] = _paper_row(paper_numbers.MAIN_F1["SYNAPSE"], columns)
        elif config in by_config:
            rows[PAPER_PREFIX + config] = _paper_row(by_config[config], columns)
    df = pd.DataFrame.from_dict(rows, orient="index", columns=columns)
    df.index.name = "config"
    df.attrs.update(metric=metric, scale=scale, baseline=baseline)
    return df


def cost_per_1k_queries(
    prompt_tokens_per_query: float,
    completion_tokens_per_query: float,
    usd_per_mtok_prompt: float,
    usd_per_mtok_completion: float,
) -> float:
    """API cost in $ of 1,000 queries from mean token counts and $ per million tokens."""
    per_query = (prompt_tokens_per_query * usd_per_mtok_prompt
                 + completion_tokens_per_query * usd_per_mtok_completion) / 1e6
    return 1000.0 * per_query


def efficiency_table(
    results: Mapping[str, Mapping[str, float | None]],
    include_paper: bool = True,
    *,
    scale: float = 100.0,
) -> pd.DataFrame:
    """Efficiency table (SYNAPSE Table 3/4 layout).

    Args:
        results: ``{system: {"tokens_per_query", "latency_s", "cost_per_1k", "f1"}}``, with ``f1``
            a fraction (e.g. our ``mean_cat_1_4``; the paper uses F1 without adversarial), scaled
            by ``scale``. Missing or ``None`` values are NaN.
        include_paper: append the paper's efficiency rows.

    Returns:
        Columns: tokens/query, latency s/query, $ per 1,000 queries, F1, F1 per $ (= F1 / $ per
        1,000 queries, the paper's definition).
    """
    def num(v: float | None) -> float:
        return math.nan if v is None else float(v)

    rows: dict[str, list[float]] = {}
    for system, r in results.items():
        f1 = num(r.get("f1")) * scale
        cost = num(r.get("cost_per_1k"))
        f1_per_dollar = f1 / cost if cost and not math.isnan(cost) else math.nan
        rows[system] = [num(r.get("tokens_per_query")), num(r.get("latency_s")), cost, f1,
                        f1_per_dollar]
    if include_paper:
        for system, r in paper_numbers.EFFICIENCY.items():
            rows[PAPER_PREFIX + system] = [num(r[k]) for k in (
                "tokens_per_query", "latency_s", "cost_per_1k", "f1", "f1_per_dollar")]
    df = pd.DataFrame.from_dict(rows, orient="index", columns=list(EFFICIENCY_COLUMNS))
    df.index.name = "system"
    df.attrs.update(scale=scale)
    return df


def _cell(v: Any, floatfmt: str, na_rep: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return na_rep
    if isinstance(v, float):
        return format(v, floatfmt)
    return str(v).replace("|", "\\|")


def _label(key: Any) -> str:
    if isinstance(key, tuple):
        return " / ".join(str(k) for k in key)
    return str(key)


def to_markdown(df: pd.DataFrame, floatfmt: str = ".1f", na_rep: str = "-") -> str:
    """A GitHub Markdown table of ``df`` with its index as the first column (no ``tabulate``).

    Floats use ``floatfmt``, NaN prints as ``na_rep``, MultiIndex labels are joined with ``" / "``,
    and ``|`` inside a cell is escaped. Numeric columns are right-aligned.
    """
    header = [df.index.name or ""] + [_label(c) for c in df.columns]
    numeric = [False] + [pd.api.types.is_numeric_dtype(df[c]) for c in df.columns]
    lines = ["| " + " | ".join(h.replace("|", "\\|") for h in header) + " |",
             "| " + " | ".join("---:" if n else "---" for n in numeric) + " |"]
    for idx, row in zip(df.index, df.itertuples(index=False, name=None), strict=True):
        cells = [_label(idx).replace("|", "\\|")] + [_cell(v, floatfmt, na_rep) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def to_latex(
    df: pd.DataFrame,
    floatfmt: str = ".1f",
    na_rep: str = "--",
    caption: str | None = None,
    label: str | None = None,
) -> str:
    """A booktabs LaTeX table via ``DataFrame.to_latex`` (needs jinja2), special characters
    escaped (``mean_cat_1_4`` -> ``mean\\_cat\\_1\\_4``)."""
    return df.to_latex(float_format=lambda v: format(v, floatfmt), na_rep=na_rep, escape=True,
                       caption=caption, label=label)
