"""Evaluate many SYNAPSE hyperparameter configurations in one batched pass on LoCoMo.

The memory is built once, as ``python -m synapse_pt.run experiment=paper_main`` builds it (MiniLM,
LLM-free keyword extractor; any Hydra overrides after the options). Each configuration is a set of
values for the continuous hyperparameters (S, delta, beta, gamma, theta, lambda1-3, tau_gate); the
query columns of the activation matrix are the (configuration, question) pairs, so a chunk of
configurations costs one call of ``SynapseMemory.sweep``. Recall is computed on index tensors.
Configuration 0 is the paper's defaults; the others are drawn uniformly from the ranges below.
Prints the best configurations by evidence recall@10 over categories 1-4 (by question); the last
line is the sweep throughput in configurations per minute (each configuration = every question).

``--chunk auto`` (default) sizes the chunk to the device: the ``[N_g, C x B_g]`` blocks of one
configuration hold ``sum_g N_g B_g`` cells; about ``BUFFERS`` float32 buffers of that size are
live at once, and a chunk takes at most half of the memory available now (CUDA:
``torch.cuda.mem_get_info``; CPU: ``MemAvailable`` of ``/proc/meminfo``).

    python scripts/bench_sweep.py [--configs 256] [--chunk auto|N] [--device cpu|cuda] [--seed 0]
                                  [overrides...]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
import torch

from synapse_pt.eval.pipeline import blind
from synapse_pt.eval.scorers.retrieval import evidence_recall_from_index
from synapse_pt.memory.synapse import SynapseMemory
from synapse_pt.retrieval.synapse import SynapseParams
from synapse_pt.run import composed_memory

RANGES = {"S": (0.2, 1.0), "delta": (0.0, 1.0), "beta": (0.0, 0.5), "gamma": (1.0, 10.0),
          "theta": (0.1, 0.9), "lambda1": (0.0, 1.0), "lambda2": (0.0, 1.0),
          "lambda3": (0.0, 0.5), "tau_gate": (0.0, 0.3)}


def draw_configs(n: int, seed: int) -> dict[str, torch.Tensor]:
    """``n`` configurations: row 0 the paper's defaults, the rest uniform in ``RANGES``."""
    gen = torch.Generator().manual_seed(seed)
    defaults = SynapseParams()
    out = {}
    for name, (lo, hi) in RANGES.items():
        values = lo + (hi - lo) * torch.rand(n, generator=gen)
        values[0] = float(getattr(defaults, name))
        out[name] = values
    return out


BUFFERS = 16  # float32 [N_g, C x B_g] tensors live at once in one batched call (upper estimate)


def available_bytes(device: str) -> int:
    """Memory free for a chunk on ``device`` now."""
    if device.startswith("cuda"):
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("cannot read MemAvailable from /proc/meminfo; pass --chunk N")


def auto_chunk(memory: SynapseMemory, questions, device: str, limit: int) -> int:
    """Configurations per batched call that fit in half the available memory."""
    ptr = memory.batch.ptr.tolist()
    order = {s: i for i, s in enumerate(memory.batch.sample_ids)}
    per_graph = torch.bincount(torch.tensor([order[q.sample_id] for q in questions]),
                               minlength=len(ptr) - 1).tolist()
    cells = sum((ptr[g + 1] - ptr[g]) * n for g, n in enumerate(per_graph))
    per_config = cells * 4 * BUFFERS
    return max(1, min(limit, available_bytes(device) // 2 // max(1, per_config)))


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
    evidence = memory.evidence_index(questions)  # [B, E] global node ids, padded with -1
    answerable = torch.tensor([q.category < 5 for q in questions], device=args.device)
    adversarial = ~answerable
    blinded = [blind(q) for q in questions]

    chunk_size = (auto_chunk(memory, questions, args.device, args.configs)
                  if args.chunk == "auto" else int(args.chunk))
    grid = draw_configs(args.configs, args.seed)
    results = []
    memory.sweep(blinded[:4], SynapseParams(**{k: v[:2] for k, v in grid.items()}))  # warm-up
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    for c0 in range(0, args.configs, chunk_size):
        chunk = {k: v[c0:c0 + chunk_size].to(args.device) for k, v in grid.items()}
        C = next(iter(chunk.values())).numel()
        ranked = memory.sweep(blinded, SynapseParams(**chunk))
        recall = evidence_recall_from_index(ranked.index, ranked.valid, evidence.repeat(C, 1),
                                            ks=(10,))[10].view(C, B)
        gated = ranked.gated.view(C, B)
        r10 = torch.nanmean(recall[:, answerable], dim=1)
        false_rej = gated[:, answerable].float().mean(dim=1)
        true_rej = gated[:, adversarial].float().mean(dim=1)
        for i in range(C):
            results.append({**{k: float(v[i]) for k, v in chunk.items()},
                            "recall@10": float(r10[i]), "false_rejection": float(false_rej[i]),
                            "true_rejection": float(true_rej[i])})
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    table = pd.DataFrame(results)
    if args.table:
        args.table.parent.mkdir(parents=True, exist_ok=True)
        table.to_parquet(args.table)
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
