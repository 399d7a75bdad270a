"""The batched hyperparameter sweep of SYNAPSE on a dataset: configurations, chunks, tables.

A configuration is a set of values for the continuous hyperparameters (S, delta, beta, gamma,
theta, lambda1-3, tau_gate); the query columns of one batched call are the (configuration,
question) pairs (:meth:`~synapse_pt.memory.synapse.SynapseMemory.sweep`). Configuration 0 is the
paper's defaults, the others are drawn uniformly from :data:`RANGES` (the continuous entries of
SYNAPSE's declared search space, :mod:`synapse_pt.retrieval.search_space`) with a seed, so any
configuration of a sweep is known by ``(seed, index)`` alone: a sweep split into chunks that run
as separate jobs (``python -m synapse_pt.sweep -m sweep.chunk=0,1,2,3 sweep.chunks=4``) draws the
same grid in every job, evaluates its own slice, and :func:`merge_tables` joins the slices.

Recall is computed on index tensors; a configuration in a sweep gets exactly the metrics it gets
alone (``tests/retrieval/test_synapse_retrieval.py::test_sweep_equals_separate_retrievals``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd
import torch

from synapse_pt.data.schema import Question
from synapse_pt.eval.qa.pipeline import blind
from synapse_pt.eval.qa.scorers.retrieval import evidence_recall_from_index
from synapse_pt.memory.synapse import SynapseMemory
from synapse_pt.retrieval.search_space import SPACE, ranges
from synapse_pt.retrieval.settings import SynapseParams

__all__ = ["BUFFERS", "CPU_BLOCK_CELLS", "DEPTH", "RANGES", "auto_chunk", "available_bytes",
           "chunk_bounds", "draw_configs", "merge_tables", "sweep_table"]

#: the continuous hyperparameters of SYNAPSE's one declared search space
#: (:data:`synapse_pt.retrieval.search_space.SPACE`), by field name, in declared order (the
#: order of the draws)
RANGES = {key.split(".", 1)[1]: bounds for key, bounds in ranges(SPACE).items()}
BUFFERS = 16  # float32 [N_g, C x B_g] tensors live at once in one batched call (upper estimate)
#: On the CPU a chunk's largest ``[N_g, C x B_g]`` block holds at most this many cells (16 MiB of
#: float32, half of a 32 MiB L3): measured on LoCoMo-10 with a 2-core EPYC, 168 configurations
#: ran at 493-505 per minute in chunks of 8-16 (blocks of 2.5-5 M cells) against 439 at 32 and
#: 403 at 84 (blocks of 26 M cells, the memory-fitted chunk), experiments/sweep_batched.md.
CPU_BLOCK_CELLS = 1 << 22
DEPTH = 10  # the table's recall@k


def draw_configs(n: int, seed: int) -> dict[str, torch.Tensor]:
    """``n`` configurations ``{name: [n]}``: row 0 the paper's defaults, the rest uniform in
    :data:`RANGES` (one generator seeded with ``seed``: the same grid in every job)."""
    if n < 1:
        raise ValueError(f"sweep.configs must be >= 1, got {n}")
    gen = torch.Generator().manual_seed(seed)
    defaults = SynapseParams()
    out = {}
    for name, (lo, hi) in RANGES.items():
        values = lo + (hi - lo) * torch.rand(n, generator=gen)
        values[0] = float(getattr(defaults, name))
        out[name] = values
    return out


def chunk_bounds(n: int, chunks: int, chunk: int) -> tuple[int, int]:
    """``[start, stop)`` of chunk ``chunk`` when ``n`` configurations are split into ``chunks``
    near-equal contiguous slices (the first ``n % chunks`` one longer)."""
    if chunks < 1 or not 0 <= chunk < chunks:
        raise ValueError(f"sweep.chunk must be in [0, sweep.chunks), got chunk={chunk}, "
                         f"chunks={chunks}")
    if chunks > n:
        raise ValueError(f"sweep.chunks={chunks} is more than the {n} configurations")
    size, extra = divmod(n, chunks)
    start = chunk * size + min(chunk, extra)
    return start, start + size + (chunk < extra)


def available_bytes(device: str) -> int:
    """Memory free for a chunk on ``device`` now (CUDA: ``mem_get_info``; CPU: MemAvailable)."""
    if device.startswith("cuda"):
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("cannot read MemAvailable from /proc/meminfo; give the chunk size")


def auto_chunk(memory: SynapseMemory, questions: Sequence[Question], device: str,
               limit: int) -> int:
    """Configurations per batched call that fit in half the available memory: the
    ``[N_g, C x B_g]`` blocks of one configuration hold ``sum_g N_g B_g`` cells, about
    :data:`BUFFERS` float32 buffers of that size are live at once. On the CPU, also at most
    :data:`CPU_BLOCK_CELLS` cells in the largest block (cache-sized blocks run faster)."""
    ptr = memory.batch.ptr.tolist()
    order = {s: i for i, s in enumerate(memory.batch.sample_ids)}
    per_graph = torch.bincount(torch.tensor([order[q.sample_id] for q in questions]),
                               minlength=len(ptr) - 1).tolist()
    blocks = [(ptr[g + 1] - ptr[g]) * n for g, n in enumerate(per_graph)]
    per_config = sum(blocks) * 4 * BUFFERS
    chunk = min(limit, available_bytes(device) // 2 // max(1, per_config))
    if not device.startswith("cuda"):
        chunk = min(chunk, CPU_BLOCK_CELLS // max(1, max(blocks, default=1)))
    return max(1, chunk)


def sweep_table(memory: SynapseMemory, questions: Sequence[Question],
                grid: dict[str, torch.Tensor], *, start: int = 0, stop: int | None = None,
                chunk_size: int, device: str) -> pd.DataFrame:
    """Evaluate configurations ``[start, stop)`` of ``grid`` for every question, ``chunk_size``
    configurations per batched call: one row per configuration (``config``: its index in the
    grid, its values, recall@10 over categories 1-4 by question, false and true rejection).
    Every setting the grid does not vary (``k``, ``M``, ``T``, ``k_anchor``, the readings) is
    the memory's own (``memory.params``)."""
    n = next(iter(grid.values())).numel()
    stop = n if stop is None else stop
    if chunk_size < 1:
        raise ValueError(f"chunk size must be >= 1, got {chunk_size}")
    B = len(questions)
    evidence = memory.evidence_index(questions)  # [B, E] global node ids, padded with -1
    answerable = torch.tensor([q.category < 5 for q in questions], device=device)
    adversarial = ~answerable
    blinded = [blind(q) for q in questions]
    rows = []
    for c0 in range(start, stop, chunk_size):
        chunk = {k: v[c0:min(c0 + chunk_size, stop)].to(device) for k, v in grid.items()}
        C = next(iter(chunk.values())).numel()
        # the swept values over the memory's own settings (M, T, anchors, readings), ranked as
        # deep as the table reads (the top 10 of a stable top-k are its first 10)
        params = dataclasses.replace(memory.params, **chunk, k=min(memory.params.k, DEPTH))
        ranked = memory.sweep(blinded, params)
        recall = evidence_recall_from_index(ranked.index, ranked.valid, evidence.repeat(C, 1),
                                            ks=(DEPTH,))[DEPTH].view(C, B)
        gated = ranked.gated.view(C, B)
        r10 = torch.nanmean(recall[:, answerable], dim=1).tolist()
        false_rej = gated[:, answerable].float().mean(dim=1).tolist()
        true_rej = gated[:, adversarial].float().mean(dim=1).tolist()
        values = {k: v.tolist() for k, v in chunk.items()}
        for i in range(C):
            rows.append({"config": c0 + i, **{k: v[i] for k, v in values.items()},
                         "recall@10": r10[i], "false_rejection": false_rej[i],
                         "true_rejection": true_rej[i]})
    return pd.DataFrame(rows)


def merge_tables(paths: Iterable[str | Path], expected: int | None = None) -> pd.DataFrame:
    """The chunk tables at ``paths`` joined into one, sorted by ``config``; an error names a
    configuration found twice, and (with ``expected``) the ones missing."""
    paths = sorted(Path(p) for p in paths)
    if not paths:
        raise FileNotFoundError("no sweep chunk tables to merge")
    table = pd.concat([pd.read_parquet(p).assign(chunk_file=str(p)) for p in paths],
                      ignore_index=True)
    twice = table[table["config"].duplicated(keep=False)]
    if len(twice):
        first = twice.iloc[0]
        raise ValueError(f"configuration {int(first['config'])} is in more than one chunk table: "
                         f"{sorted(set(twice[twice['config'] == first['config']]['chunk_file']))}")
    if expected is not None:
        missing = sorted(set(range(expected)) - set(table["config"].tolist()))
        if missing:
            raise ValueError(f"{len(missing)} of {expected} configurations have no chunk table "
                             f"(first: {missing[:5]}); a job failed or is still running")
    return table.drop(columns="chunk_file").sort_values("config").reset_index(drop=True)
