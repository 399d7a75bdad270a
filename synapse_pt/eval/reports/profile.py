"""Where a benchmark's time goes: the operators of one call, by self time (``torch.profiler``).

What the benchmarks print with ``--profile`` (``scripts/bench_sweep.py``,
``scripts/bench_retrieval.py``), so the reason a figure is what it is comes from the same run as
the figure: which operators bound it, and the ceiling they set on their own.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
from torch.profiler import ProfilerActivity, profile

__all__ = ["PRIMITIVES", "op_breakdown", "primitive_seconds"]

#: The operators no eager rewrite removes from SYNAPSE retrieval: the top-k selections and the
#: sparse products (a CSR ``torch.sparse.mm`` is ``aten::_sparse_mm`` over ``aten::addmm``) and
#: the dense cosine (``aten::mm``).
PRIMITIVES = {"top-k": ("aten::topk",), "sparse products": ("aten::addmm", "aten::_sparse_mm"),
              "dense matmul": ("aten::mm",)}


def op_breakdown(fn: Callable[[], object], cuda: bool = False) -> tuple[pd.DataFrame, float]:
    """Run ``fn`` once under the profiler; returns ``(table, total)``: one row per operator
    (``op``, ``calls``, ``self_s`` its self time in seconds, ``share`` of the total self time),
    largest first, and the total self time in seconds (device time on CUDA)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        fn()
    rows = []
    for event in prof.key_averages():
        self_us = (event.self_device_time_total if cuda else event.self_cpu_time_total)
        if self_us > 0:
            op = "torch.compile kernel" if "CompiledFxGraph" in event.key else event.key
            rows.append({"op": op, "calls": event.count, "self_s": self_us / 1e6})
    table = pd.DataFrame(rows, columns=["op", "calls", "self_s"]).groupby(
        "op", as_index=False, sort=False).sum()
    table = table.sort_values("self_s", ascending=False, ignore_index=True)
    total = float(table["self_s"].sum())
    table["share"] = table["self_s"] / total if total > 0 else 0.0
    return table, total


def primitive_seconds(table: pd.DataFrame) -> dict[str, float]:
    """Self seconds of each group of :data:`PRIMITIVES` in an :func:`op_breakdown` table."""
    return {name: float(table.loc[table["op"].isin(ops), "self_s"].sum())
            for name, ops in PRIMITIVES.items()}
