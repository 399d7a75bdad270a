"""The batched sweep with its old selection and firing against the new, alternating in one process
(issue 62 item 4): configurations a minute, and the tables compared exactly.

    python experiments/sweep_selection_ab.py [--configs 26] [--rounds 4] [--threads 1]

One SYNAPSE memory of ``experiment=paper_main`` over LoCoMo-10 (cached embeddings: pass
``paths.cache_dir=...`` among the overrides), one grid of configurations, and ``--rounds`` rounds
of ``sweep_table`` with each of

* ``before``: the selection ``torch.topk(dim=0)`` (what ``column_topk`` ran on LoCoMo's blocks
  before issue 62) and firing's silent-node rule as a boolean mask and ``masked_fill``;
* ``after``: the code as it is (``column_topk``'s row-group candidates, the float gate);

the two in turn, the order reversed every round, so a loaded machine slows both alike. Each
round prints configurations a minute by the wall clock and per CPU-minute of the process; the
tables of all rounds must be identical (``DataFrame.equals``). The last line is the median
ratio after/before per CPU-minute.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import pandas as pd
import torch
from torch import Tensor

import synapse_pt.nn.activation as activation
import synapse_pt.retrieval.dense as dense
from synapse_pt.commands.build import composed_memory
from synapse_pt.eval.tuning.grid import auto_chunk, draw_configs, sweep_table
from synapse_pt.nn.sparse import row_blocks
from synapse_pt.retrieval.settings import SynapseParams


def topk_before(x: Tensor, k: int, *, sorted: bool = True) -> tuple[Tensor, Tensor]:
    """``column_topk`` as it ran on blocks of fewer than 2,000 rows before issue 62."""
    values, indices = torch.topk(x, k, dim=0, sorted=sorted)
    return values, indices


def fire_before(uhat: Tensor, gamma, theta, fire_zero: bool, *, inplace: bool = False) -> Tensor:
    """``fire`` as it was before issue 62: the silent nodes as a boolean mask, ``masked_fill``."""
    B = uhat.size(1)
    gamma_t = activation.column_param(gamma, B, uhat, "gamma")
    theta_t = activation.column_param(theta, B, uhat, "theta")
    out = uhat if inplace else torch.empty_like(uhat)
    for blk in row_blocks(uhat):
        x_b, o_b = uhat[blk], out[blk]
        silent = None if fire_zero else x_b <= 0
        torch.sub(x_b, theta_t, out=o_b).mul_(gamma_t).sigmoid_()
        if silent is not None:
            o_b.masked_fill_(silent, 0.0)
    return out


VARIANTS = {"before": (topk_before, fire_before),
            "after": (activation.column_topk, activation.fire)}


def use(name: str) -> None:
    topk, fire = VARIANTS[name]
    activation.column_topk = dense.column_topk = topk
    activation.fire = fire


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", type=int, default=26)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the memory")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    memory, dataset = composed_memory(["experiment=paper_main", "device=cpu", *args.overrides],
                                      "the sweep selection benchmark")
    questions = list(dataset.questions())
    grid = draw_configs(args.configs, args.seed)
    chunk = auto_chunk(memory, questions, "cpu", args.configs)
    memory.sweep(questions[:4], SynapseParams(**{k: v[:2] for k, v in grid.items()}))  # warm-up
    print(f"{args.configs} configurations x {len(questions)} questions, {chunk} a call, "
          f"{args.threads} threads; load {os.getloadavg()}", flush=True)
    tables: dict[str, pd.DataFrame] = {}
    rates: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    for r in range(args.rounds):
        for name in (list(VARIANTS) if r % 2 == 0 else list(VARIANTS)[::-1]):
            use(name)
            cpu, wall = time.process_time(), time.perf_counter()
            table = sweep_table(memory, questions, grid, chunk_size=chunk, device="cpu")
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            rates[name].append((60 * args.configs / wall, 60 * args.configs / cpu))
            if name in tables and not tables[name].equals(table):
                raise AssertionError(f"round {r + 1}: {name}'s table differs from its first")
            tables[name] = table
            print(f"round {r + 1} {name:6s}: {rates[name][-1][0]:6.0f} configurations a minute "
                  f"(wall), {rates[name][-1][1]:6.0f} per CPU-minute; load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
    use("after")
    same = tables["before"].equals(tables["after"])
    print(f"tables identical before and after: {same}")
    if not same:
        raise AssertionError("the sweep tables differ before and after")
    for name, values in rates.items():
        print(f"{name}: median {statistics.median(v[0] for v in values):.0f} a minute (wall), "
              f"{statistics.median(v[1] for v in values):.0f} per CPU-minute")
    wall = (statistics.median(v[0] for v in rates["after"])
            / statistics.median(v[0] for v in rates["before"]))
    print(f"after/before by the wall clock: {wall:.2f}")
    cpu = (statistics.median(v[1] for v in rates["after"])
           / statistics.median(v[1] for v in rates["before"]))
    print(f"sweep_after_over_before_per_cpu_minute: {cpu:.2f} x")


if __name__ == "__main__":
    main()
