"""Plots of collected runs (matplotlib, headless): one grouped bar chart per metric."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd


def metric_frame(runs: Mapping[str, Mapping[str, Any]], metric: str,
                 columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Rows = runs, columns = categories (by category number) and both means, values of
    ``metric`` (fractions)."""
    rows = {}
    for label, m in runs.items():
        entry = m["metrics"].get(metric)
        if entry is None:
            raise KeyError(f"run {label!r} has no metric {metric!r}; has {sorted(m['metrics'])}")
        rows[label] = {k: v for k, v in entry.items() if k != "n"}
    frame = pd.DataFrame.from_dict(rows, orient="index").astype("float64")
    if columns is None:
        first = next(iter(runs.values()))["identity"].get("category_names", {})
        ordered = [first[k] for k in sorted(first, key=int)] + ["mean_cat_1_4", "mean_q_1_4"]
        columns = [c for c in ordered if c in frame.columns]
        columns += [c for c in frame.columns if c not in columns]
    return frame[list(columns)]


def bar_chart(frame: pd.DataFrame, path: str | Path, *, title: str, ylabel: str) -> Path:
    """Grouped bars (one group per column, one bar per row) saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(frame.columns)), 4.0))
    (100 * frame.T).plot.bar(ax=ax, rot=20, width=0.8)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
