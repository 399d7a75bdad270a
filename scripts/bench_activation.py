"""Throughput of the batched SYNAPSE dynamics (SPEC §1.2 steps 3-5) on a random graph.

    .venv/bin/python scripts/bench_activation.py --num-nodes 10000 --batch 2000 --device cpu

Builds a random directed graph with ``N`` nodes and about ``in_degree * N`` edges (uniform
sources and targets, weights in [0, 1)), ``B`` query columns with energy on ``anchors`` random
nodes each, and times ``T = 3`` steps: warm-up runs, then the median of ``repeats`` runs
(``torch.cuda.synchronize`` around each on CUDA); the minimum is printed too, as a figure
less sensitive to other load on a shared machine. The layer is
:func:`~synapse_pt.retrieval.synapse.activation_layer` of the config's values (``SynapseParams()``,
the engine's default storage ``frontier=auto``). Two figures:

* ``functional``: the layer on the edge list per call (normalising the graph it reads);
* ``cached``: the layer on a prebuilt fan-normalised adjacency (what retrieval calls).

The last line is ``activation_queries_per_s: <value> queries/s`` for the functional call
(median).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import time

import torch

from synapse_pt.eval.reports.profile import op_breakdown
from synapse_pt.nn import activation_adjacency
from synapse_pt.retrieval.synapse import STORAGE, SynapseParams, activation_layer


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn, device: torch.device, warmup: int, repeats: int) -> tuple[float, float]:
    """Median and minimum wall time of ``fn()`` in seconds."""
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-nodes", type=int, default=10_000, help="N (default 10,000)")
    parser.add_argument("--in-degree", type=float, default=15.0, help="mean in-degree")
    parser.add_argument("--batch", type=int, default=2_000, help="B query columns")
    parser.add_argument("--anchors", type=int, default=20, help="non-zero a(0) per column")
    parser.add_argument("--T", type=int, default=3, help="steps")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--fire-zero", action="store_true",
                        help="literal firing: every node fires (the dense path)")
    parser.add_argument("--profile", action="store_true",
                        help="also profile one cached call and print its largest operators")
    parser.add_argument("--chain", action="store_true",
                        help="add a temporal chain 0 -> 1 -> ... -> N-1 to the random edges")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    g = torch.Generator().manual_seed(args.seed)
    N, B = args.num_nodes, args.batch
    E = int(round(args.in_degree * N))
    edge_index = torch.randint(0, N, (2, E), generator=g)
    if args.chain:
        nodes = torch.arange(N)
        edge_index = torch.cat([torch.stack([nodes[:-1], nodes[1:]]), edge_index], dim=1)
        E = edge_index.size(1)
    edge_index = edge_index.to(device)
    edge_weight = torch.rand(E, generator=g, dtype=dtype).to(device)
    a0 = torch.zeros(N, B, dtype=dtype)
    rows = torch.randint(0, N, (args.anchors, B), generator=g)
    a0.scatter_(0, rows, torch.rand(args.anchors, B, generator=g, dtype=dtype))
    a0 = a0.to(device)

    if device.type == "cuda":
        hardware = torch.cuda.get_device_name(device)
    else:
        hardware = platform.processor() or platform.machine()
    print(
        f"device: {device} ({hardware}), torch {torch.__version__}, "
        f"threads {torch.get_num_threads()}, dtype {args.dtype}"
    )
    print(f"N = {N:,}  E = {E:,}  B = {B:,}  T = {args.T}  anchors/column = {args.anchors}  "
          f"fire_zero = {args.fire_zero}")
    p = SynapseParams(T=args.T, fire_zero=args.fire_zero)
    layer = activation_layer(p, **STORAGE)
    hyper = dict(S=p.S, delta=p.delta, beta=p.beta, gamma=p.gamma, theta=p.theta)

    def functional() -> torch.Tensor:
        return layer(a0, edge_index, edge_weight, **hyper)

    adj_t = activation_adjacency(edge_index, edge_weight, N, dtype=dtype)

    def cached() -> torch.Tensor:
        return layer(a0, adj_t, normalized=True, **hyper)

    t_cached = _time(cached, device, args.warmup, args.repeats)
    t_func = _time(functional, device, args.warmup, args.repeats)
    out = functional()
    print(f"load average (1, 5, 15 min) at the end: {os.getloadavg()}")
    print(f"peak resident memory of the process: "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
    print(f"active nodes per column after T: {(out > 0).sum(0).float().mean().item():.1f}")
    for name, (med, best) in (("cached", t_cached), ("functional", t_func)):
        print(
            f"{name:>10}: median {med * 1e3:9.1f} ms per call ({B / med:9,.0f} queries/s)"
            f"   min {best * 1e3:9.1f} ms ({B / best:9,.0f} queries/s)"
        )
    if args.profile:
        table, total = op_breakdown(cached, cuda=device.type == "cuda")
        print(f"profile of one cached call: {total:.2f} s of operator self time; the largest:")
        print(table.head(8).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"activation_queries_per_s: {B / t_func[0]:.1f} queries/s")


if __name__ == "__main__":
    main()
