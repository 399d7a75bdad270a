"""A study's paper table: each variant's score beside the number its system published.

A study file may name, per variant, the published row it sits beside (``published: {label:
system}``, a key of :data:`~synapse_pt.eval.reports.paper_numbers.PUBLISHED_ROWS`).
:func:`paper_table`
gives one row per variant: every category and the mean as ``"ours / published"`` (percent), our
number scored under the published row's protocol (its ``metric``: official F1 for SYNAPSE,
Membox's F1 for Membox, the LLM judge for GAAMA), then the protocol and the metric in words. A
variant without a published row shows official F1 beside ``-``.

    python scripts/run_study.py paper_table --out multirun/paper_table llm=openai
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from synapse_pt.eval.qa.aggregate import run_summary_names
from synapse_pt.eval.reports import paper_numbers

#: the metric a variant with no published row is shown in
DEFAULT_METRIC = "f1_official"
MEAN = "mean"
PROTOCOL = "published protocol"
OURS = "our metric"


def _number(value: Any, scale: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{float(value) * scale:.1f}"


def paper_table(runs: Mapping[str, Mapping[str, Any]], published: Mapping[str, str]
                ) -> pd.DataFrame:
    """One row per run (``{label: metrics.json}``): per category and the mean over the
    answerable questions, ``"ours / published"``; ``published`` maps a label to its
    :data:`~synapse_pt.eval.reports.paper_numbers.PUBLISHED_ROWS` key (labels absent: none
    published).

    Our mean is the question-weighted mean over the answerable categories (``mean_q_1_4`` on
    LoCoMo), the published mean as printed (SYNAPSE's "average" matches neither of our means:
    the protocol column says what it is). Our metric missing from a run (GAAMA's judge without
    ``eval=judge``) shows ``-``."""
    rows: dict[str, dict[str, str]] = {}
    for label, m in runs.items():
        system = published.get(label)
        if system is not None and system not in paper_numbers.PUBLISHED_ROWS:
            raise KeyError(f"published.{label}: {system!r} is no published row; known: "
                           f"{sorted(paper_numbers.PUBLISHED_ROWS)}")
        row_def = paper_numbers.PUBLISHED_ROWS.get(system or "", {})
        metric = row_def.get("metric", DEFAULT_METRIC)
        identity = m["identity"]
        names = {int(k): v for k, v in identity["category_names"].items()}
        answerable = identity.get("answerable_categories") or (1, 2, 3, 4)
        unanswerable = identity.get("unanswerable_category", 5)
        micro = run_summary_names(identity)[1]
        ours = m["metrics"].get(metric, {})
        values = row_def.get("values", {})
        row = {}
        for c in [*answerable, unanswerable]:
            name = names.get(int(c))
            if name is None:
                continue
            row[name] = f"{_number(ours.get(name), 100.0)} / {_number(values.get(name), 1.0)}"
        row[MEAN] = f"{_number(ours.get(micro), 100.0)} / {_number(row_def.get('mean'), 1.0)}"
        row[PROTOCOL] = (f"{system}: {row_def['protocol']}" if system
                         else "none published")
        row[OURS] = metric
        rows[label] = row
    df = pd.DataFrame.from_dict(rows, orient="index").fillna("-")
    df.index.name = "variant (ours / published, %)"
    return df
