r"""Judge sensitivity: how a study's systems rank under each judge and each scorer.

The same answers scored by several judges (``eval.judges``, :func:`~synapse_pt.eval.qa.pipeline.
judge_all`) and by every scorer (official F1, A-Mem F1, BLEU-1, Membox F1, evidence recall) give
one score per system and measure. From the runs' ``metrics.json``
(:func:`~synapse_pt.eval.records.collect.
load_runs`) :func:`sensitivity_tables` builds

* ``judges_scores``: each system's score (percent, mean over the questions of the answerable
  categories, ``mean_q_1_4`` on LoCoMo) under each measure;
* ``judges_orders``: each measure's order of the systems, best first (``a > b = c``);
* ``judges_tau``: Kendall's :math:`\tau_b` between the orders of each pair of measures
  (:func:`kendall_tau_b`), over the systems both score;
* ``judges_swaps``: for each pair of measures, the pairs of systems they order oppositely.

A measure is ``judge_<protocol>`` (a judge; a run with one judge names it by its
``judge_protocol``) or a scorer's metric name. Every measure is higher-better.

.. math::
    \tau_b = \frac{C - D}{\sqrt{(n_0 - n_1)(n_0 - n_2)}},\quad n_0 = \tbinom{n}{2},

with :math:`C` / :math:`D` the concordant / discordant pairs and :math:`n_1`, :math:`n_2` the
pairs tied in one order, in the other (NaN when either order ties every pair).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

import pandas as pd

from synapse_pt.eval.qa.aggregate import run_summary_names
from synapse_pt.eval.qa.scorers import scorer_columns
from synapse_pt.eval.qa.scorers.judge import JUDGE_PROTOCOLS

#: the answer scorers' columns, in registry order (recall@k and recall@<T>tok follow, by k then T)
SCORERS = tuple(scorer_columns())
JUDGE_PREFIX = "judge_"


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's :math:`\\tau_b` of two aligned score lists (ties counted as in
    ``scipy.stats.kendalltau``'s default); NaN for fewer than two items or an order that ties
    every pair."""
    if len(x) != len(y):
        raise ValueError(f"kendall_tau_b: {len(x)} scores against {len(y)}")
    concordant = discordant = tied_x = tied_y = 0
    for i, j in combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        if dx == 0:
            tied_x += 1
        if dy == 0:
            tied_y += 1
        if dx * dy > 0:
            concordant += 1
        elif dx * dy < 0:
            discordant += 1
    n0 = len(x) * (len(x) - 1) // 2
    denominator = math.sqrt((n0 - tied_x) * (n0 - tied_y))
    return (concordant - discordant) / denominator if denominator > 0 else math.nan


def run_scores(metrics: Mapping[str, Any]) -> dict[str, float]:
    """``{measure: score in percent}`` of one run: each judge's and scorer's mean over the
    questions of the answerable categories (measures the run lacks, or that have no value over
    them, left out)."""
    micro = run_summary_names(metrics["identity"])[1]
    protocol = metrics["identity"].get("judge_protocol")
    out: dict[str, float] = {}
    for name, entry in metrics.get("metrics", {}).items():
        value = entry.get(micro) if isinstance(entry, Mapping) else None
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        if name == "judge" and protocol:
            out[f"{JUDGE_PREFIX}{protocol}"] = 100 * float(value)
        elif name in _judge_measures() or name in SCORERS or _recall_key(name) is not None:
            out[name] = 100 * float(value)
    return out


def _judge_measures() -> list[str]:
    return [f"{JUDGE_PREFIX}{p}" for p in JUDGE_PROTOCOLS]


def _recall_key(name: str) -> tuple[int, int] | None:
    """Sort key of ``recall@k`` (0, k) and ``recall@<T>tok`` (1, T); ``None`` for other names."""
    if not name.startswith("recall@"):
        return None
    tail = name[len("recall@"):]
    if tail.isdigit():
        return 0, int(tail)
    if tail.endswith("tok") and tail[:-3].isdigit():
        return 1, int(tail[:-3])
    return None


def _measure_key(name: str) -> tuple[int, int, int]:
    if name in _judge_measures():
        return 0, _judge_measures().index(name), 0
    if name in SCORERS:
        return 1, SCORERS.index(name), 0
    kind, value = _recall_key(name) or (9, 0)
    return 2 + kind, value, 0


def scores_table(runs: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Rows = systems (run labels), columns = measures (judges, then scorers, then recall),
    values the score in percent (NaN where a run lacks the measure)."""
    scores = {label: run_scores(m) for label, m in runs.items()}
    measures = sorted({name for s in scores.values() for name in s}, key=_measure_key)
    df = pd.DataFrame.from_dict(scores, orient="index", columns=measures).astype("float64")
    df.index.name = "system"
    return df


def order_of(column: pd.Series) -> str:
    """A measure's order of the systems, best first: ``a > b = c`` (systems without a score
    left out)."""
    values = column.dropna().sort_values(ascending=False, kind="stable")
    parts: list[str] = []
    previous: float | None = None
    for label, value in values.items():
        if previous is not None:
            parts.append("=" if value == previous else ">")
        parts.append(str(label))
        previous = value
    return " ".join(parts)


def swapped_pairs(a: pd.Series, b: pd.Series) -> list[tuple[str, str]]:
    """The pairs of systems ``a`` and ``b`` order oppositely (one strictly above in ``a``, strictly
    below in ``b``; a tie is no swap), each as ``(above in a, above in b)``."""
    both = a.notna() & b.notna()
    out = []
    for x, y in combinations([str(i) for i in a.index[both]], 2):
        da, db = a[x] - a[y], b[x] - b[y]
        if da * db < 0:
            out.append((x, y) if da > 0 else (y, x))
    return out


def sensitivity_tables(runs: Mapping[str, Mapping[str, Any]]) -> dict[str, pd.DataFrame]:
    """``judges_scores``, ``judges_orders``, ``judges_tau`` and ``judges_swaps`` of the runs (see
    the module's docstring)."""
    scores = scores_table(runs)
    measures = list(scores.columns)
    orders = pd.DataFrame({"order (best first)": [order_of(scores[m]) for m in measures]},
                          index=pd.Index(measures, name="measure"))
    tau = pd.DataFrame(index=pd.Index(measures, name="measure"), columns=measures,
                       dtype="float64")
    swaps = []
    for m in measures:  # 1, or NaN where the measure ties every pair (tau-b is undefined)
        tau.loc[m, m] = kendall_tau_b(scores[m].dropna().tolist(), scores[m].dropna().tolist())
    for a, b in combinations(measures, 2):
        both = scores[a].notna() & scores[b].notna()
        t = kendall_tau_b(scores.loc[both, a].tolist(), scores.loc[both, b].tolist())
        tau.loc[a, b] = tau.loc[b, a] = t
        pairs = swapped_pairs(scores[a], scores[b])
        if pairs:
            swaps.append({"measure A": a, "measure B": b, "tau": t, "swaps": len(pairs),
                          "pairs (above in A / above in B)": "; ".join(
                              f"{x} / {y}" for x, y in pairs)})
    swaps_df = pd.DataFrame(swaps, columns=["measure A", "measure B", "tau", "swaps",
                                            "pairs (above in A / above in B)"])
    swaps_df.index = pd.RangeIndex(1, len(swaps_df) + 1, name="#")
    return {"judges_scores": scores, "judges_orders": orders, "judges_tau": tau,
            "judges_swaps": swaps_df}


def has_judges(runs: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether the runs hold a judge's score and at least two systems to order."""
    return len(runs) >= 2 and any(name.startswith(JUDGE_PREFIX)
                                  for m in runs.values() for name in run_scores(m))


#: each table's float format (scores in percent, tau to two places)
FORMATS = {"judges_scores": ".1f", "judges_orders": ".1f", "judges_tau": ".2f",
           "judges_swaps": ".2f"}
_TITLES = {"judges_scores": "Scores (%, mean over the questions of the answerable categories)",
           "judges_orders": "Each measure's order of the systems",
           "judges_tau": "Kendall tau-b between the orders",
           "judges_swaps": "Pairs of systems two orders swap"}


def sensitivity_markdown(runs: Mapping[str, Mapping[str, Any]], title: str) -> str:
    """The four tables of :func:`sensitivity_tables` as one Markdown document under ``title``."""
    from synapse_pt.eval.reports.tables import to_markdown

    parts = [f"# {title}\n"]
    for name, df in sensitivity_tables(runs).items():
        body = to_markdown(df, floatfmt=FORMATS[name]) if len(df) else "(none)\n"
        parts.append(f"## {_TITLES[name]}\n\n{body}")
    return "\n".join(parts)
