"""Evaluate many SYNAPSE hyperparameter configurations in one batched pass on LoCoMo.

The memory is built once, as ``python -m synapse_pt.run experiment=paper_main`` builds it (MiniLM,
LLM-free keyword extractor; any Hydra overrides after the options). Each configuration is a set of
values for the continuous hyperparameters (S, delta, beta, gamma, theta, lambda1-3, tau_gate); the
query columns of the activation matrix are the (configuration, question) pairs, so a chunk of
configurations costs one call of ``SynapseMemory.sweep``. Recall is computed on index tensors.
Configuration 0 is the paper's defaults; the others are drawn uniformly from the ranges of
:mod:`synapse_pt.eval.tuning.grid` (``RANGES``).
Prints the best configurations by evidence recall@10 over categories 1-4 (by question); the last
line is the sweep throughput in configurations per minute (each configuration = every question).

``--chunk auto`` (default) sizes the chunk to the device: the ``[N_g, C x B_g]`` blocks of one
configuration hold ``sum_g N_g B_g`` cells; about ``BUFFERS`` (16) float32 buffers of that size are
live at once, and a chunk takes at most half of the memory available now (CUDA:
``torch.cuda.mem_get_info``; CPU: ``MemAvailable`` of ``/proc/meminfo``); on the CPU its largest
block holds at most ``CPU_BLOCK_CELLS`` cells (cache-sized blocks run faster).

    python scripts/bench_sweep.py [--configs 256] [--chunk auto|N] [--device cpu|cuda] [--seed 0]
                                  [--profile] [overrides...]

``--profile`` profiles one more batched call after the timed
sweep and prints its largest operators and the rate the top-k and sparse products alone allow.

The same sweep split into jobs (Hydra's submitit launcher; one merged parquet table):
``python -m synapse_pt.sweep -m experiment=paper_main sweep.chunks=4 sweep.chunk=0,1,2,3``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
import torch

from synapse_pt.commands.build import composed_memory
from synapse_pt.eval.reports.profile import op_breakdown, primitive_seconds
from synapse_pt.eval.tuning.grid import auto_chunk, draw_configs, sweep_table
from synapse_pt.memory.synapse import SynapseMemory
from synapse_pt.retrieval.settings import SynapseParams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*",
                        help="Hydra overrides of the memory (default: experiment=paper_main; "
                             "dataset.path=... for another file)")
    parser.add_argument("--configs", type=int, default=256)
    parser.add_argument("--chunk", default="auto",
                        help="configurations per batched call, or auto (fit the device)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--profile", action="store_true",
                        help="also profile one batched call (one chunk) and print where its time "
                             "goes and the ceiling its top-k and sparse products set")
    parser.add_argument("--table", type=Path, default=None,
                        help="write every configuration's metrics here (parquet; the input of "
                             "make_figures' sweep landscape)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    memory, dataset = composed_memory(["experiment=paper_main", f"device={args.device}",
                                       *args.overrides], "the sweep benchmark")
    if not isinstance(memory, SynapseMemory):
        raise ValueError(f"the sweep needs a SYNAPSE memory, got {type(memory).__name__}")
    questions = list(dataset.questions())
    B = len(questions)
    chunk_size = (auto_chunk(memory, questions, args.device, args.configs)
                  if args.chunk == "auto" else int(args.chunk))
    grid = draw_configs(args.configs, args.seed)
    memory.sweep(questions[:4], SynapseParams(**{k: v[:2] for k, v in grid.items()}))  # warm-up
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    table = sweep_table(memory, questions, grid, chunk_size=chunk_size, device=args.device)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    if args.table:
        args.table.parent.mkdir(parents=True, exist_ok=True)
        table.to_parquet(args.table)
    if args.profile:
        chunk = {k: v[:chunk_size] for k, v in grid.items()}
        table_p, total = op_breakdown(
            lambda: sweep_table(memory, questions, chunk, chunk_size=chunk_size,
                                device=args.device), cuda=args.device.startswith("cuda"))
        bound = primitive_seconds(table_p)
        print(f"profile of one batched call ({chunk_size} configurations): {total:.2f} s of "
              "operator self time; the largest:")
        print(table_p.head(8).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        floor = bound["top-k"] + bound["sparse products"]
        print(f"top-k {bound['top-k']:.2f} s + sparse products {bound['sparse products']:.2f} s "
              f"= {floor / total:.0%}: were everything else free, "
              f"{60 * chunk_size / floor:.0f} configs/min")
    pd.set_option("display.width", 200)
    pd.set_option("display.float_format", lambda v: f"{v:.3f}")
    print(f"{args.configs} configurations x {B} questions = {args.configs * B:,} query columns "
          f"in {seconds:.1f} s ({chunk_size} configurations per batched call"
          f"{' (auto)' if args.chunk == 'auto' else ''}, {args.device}, "
          f"{torch.get_num_threads()} threads)")
    print("paper defaults (configuration 0):")
    print(table.iloc[[0]].to_string())
    print("best 5 by recall@10 (categories 1-4, mean over questions):")
    print(table.sort_values("recall@10", ascending=False).head(5).to_string())
    print(f"sweep_configs_per_minute: {60 * args.configs / seconds:.0f} configs/min")


if __name__ == "__main__":
    main()
