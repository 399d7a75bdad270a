"""Throughput of the batched SYNAPSE dynamics (SPEC §1.2 steps 3-5) on a random graph.

    .venv/bin/python scripts/bench_activation.py --num-nodes 10000 --batch 2000 --device cpu

Builds a random directed graph with ``N`` nodes and about ``in_degree * N`` edges (uniform
sources and targets, weights in [0, 1)), ``B`` query columns with energy on ``anchors`` random
nodes each, and times ``T = 3`` steps: warm-up runs, then the median of ``repeats`` runs
(``torch.cuda.synchronize`` around each on CUDA); the minimum is printed too, as a figure
less sensitive to other load on a shared machine. The layer is
:func:`~synapse_pt.retrieval.spreading.activation_layer` of the config's values
(``SynapseParams()``, the engine's default storage ``frontier=auto``). Two figures:

* ``functional``: the layer on the edge list per call (normalising the graph it reads);
* ``cached``: the layer on a prebuilt fan-normalised adjacency (what retrieval calls).

``--frontier auto,sparse,dense`` times each storage (:mod:`synapse_pt.nn.frontier`) on the same
input, round by round in turn (so a loaded machine slows them alike), and checks that they give
the same activations. ``--cpu-time`` times by the process's CPU time instead of the wall clock:
with ``--threads 1`` on a shared machine it leaves out the time other jobs hold the core.

The last line is ``activation_queries_per_s: <value> queries/s`` for the functional call
(median) of the first storage.
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
from synapse_pt.nn import Hyperparams, activation_adjacency
from synapse_pt.retrieval.settings import STORAGE, SynapseParams
from synapse_pt.retrieval.spreading import activation_layer


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fns: dict, device: torch.device, warmup: int, repeats: int, clock=time.perf_counter
          ) -> dict:
    """Median and minimum time of each ``fns[name]()`` in seconds, the functions called in turn
    within each repeat (the order reversed every other repeat)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    _sync(device)
    times: dict = {name: [] for name in fns}
    for r in range(repeats):
        for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            _sync(device)
            start = clock()
            fns[name]()
            _sync(device)
            times[name].append(clock() - start)
    return {name: (statistics.median(t), min(t)) for name, t in times.items()}


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
    parser.add_argument("--frontier", default=STORAGE["frontier"],
                        help="storages to time in turn, comma-separated (auto, sparse, dense; "
                             "default: the engine's)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time by the process's CPU time (use with --threads 1)")
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
    modes = [m.strip() for m in args.frontier.split(",")]
    layers = {m: activation_layer(p, m, STORAGE["frontier_density"]) for m in modes}
    hyper = Hyperparams(p.S, p.delta, p.beta, p.gamma, p.theta)
    adj_t = activation_adjacency(edge_index, edge_weight, N, dtype=dtype)
    fns = {}
    for m, layer in layers.items():
        fns[f"cached {m}"] = lambda layer=layer: layer(a0, adj_t, normalized=True, hyper=hyper)
        fns[f"functional {m}"] = lambda layer=layer: layer(a0, edge_index, edge_weight, hyper=hyper)
    clock = time.process_time if args.cpu_time else time.perf_counter
    timed = _time(fns, device, args.warmup, args.repeats, clock)
    out = fns[f"functional {modes[0]}"]()
    for m in modes[1:]:
        same = torch.equal(fns[f"functional {m}"](), out)
        print(f"frontier={m} gives frontier={modes[0]}'s activations bit for bit: {same}")
    print(f"load average (1, 5, 15 min) at the end: {os.getloadavg()}")
    print(f"peak resident memory of the process: "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
    print(f"active nodes per column after T: {(out > 0).sum(0).float().mean().item():.1f}")
    unit = "CPU " if args.cpu_time else ""
    for name, (med, best) in timed.items():
        print(
            f"{name:>18}: median {med * 1e3:9.1f} {unit}ms per call ({B / med:9,.0f} queries/s)"
            f"   min {best * 1e3:9.1f} ms ({B / best:9,.0f} queries/s)"
        )
    if args.profile:
        table, total = op_breakdown(fns[f"cached {modes[0]}"], cuda=device.type == "cuda")
        print(f"profile of one cached call: {total:.2f} s of operator self time; the largest:")
        print(table.head(8).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"activation_queries_per_s: {B / timed[f'functional {modes[0]}'][0]:.1f} queries/s")


if __name__ == "__main__":
    main()
