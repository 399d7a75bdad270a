"""The hot path's building blocks against the torch calls they replace, on one machine.

    .venv/bin/python scripts/bench_kernels.py [--device cpu] [--threads 2]

Three comparisons, each on random data, best of several calls after a warm-up:

* ``column_topk`` (row-group candidates on large CPU blocks) against ``torch.topk(dim=0)``,
  k = 7, over block shapes from a 10^6-node memory to a LoCoMo sweep block; the values are
  checked equal;
* ``spmm_sum`` (the product written into an unfilled tensor) against ``torch.sparse.mm`` on a
  LoCoMo-sized block (1,300 nodes, 10 in-edges each, 3,100 columns); checked bit-equal;
* ``activation_adjacency`` (one stable key sort, ``csr_by_row``) against the fan-normalised
  weights put through ``coalesce()`` and ``to_sparse_csr()``, at 15 M edges (10^6 nodes, 14
  random in-edges each plus a chain); the products checked close.

The last line is ``topk_speedup_at_1e6x64: <ratio> x``.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable

import torch

from synapse_pt.nn.sparse import (
    activation_adjacency,
    column_topk,
    normalized_edge_weight,
    spmm_sum,
)

TOPK_SHAPES = [(1_000_000, 64), (11_068, 1_986), (3_000, 3_000), (1_300, 3_100), (1_000, 3_000),
               (680, 1_365)]


CLOCK = time.perf_counter  # --cpu-time: time.process_time


def best_ms(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    """Fastest of ``repeats`` calls of ``fn`` after one warm-up, in milliseconds."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = CLOCK()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(CLOCK() - start)
    return 1e3 * min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpu-time", action="store_true",
                        help="time by the process's CPU time (with --threads 1 on a loaded "
                             "machine: leaves out the time other jobs hold the core)")
    parser.add_argument("--skip-adjacency", action="store_true",
                        help="leave out the 15 M-edge adjacency build")
    args = parser.parse_args()
    global CLOCK
    if args.cpu_time:
        CLOCK = time.process_time
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    device = torch.device(args.device)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}")

    ratio_1e6 = float("nan")
    for n, b in TOPK_SHAPES:
        x = torch.rand(n, b, generator=gen, device=device)
        repeats = 3 if n * b > 5e7 else 10
        if not torch.equal(column_topk(x, 7)[0], torch.topk(x, 7, dim=0)[0]):
            raise AssertionError(f"column_topk values differ from torch.topk at {n} x {b}")
        plain = best_ms(lambda x=x: torch.topk(x, 7, dim=0), repeats, device)
        ours = best_ms(lambda x=x: column_topk(x, 7), repeats, device)
        print(f"top-7 of {n:>9,} x {b:>5,}: torch.topk {plain:8.1f} ms  column_topk {ours:8.1f} ms"
              f"  ({plain / ours:.1f}x)")
        if (n, b) == (1_000_000, 64):
            ratio_1e6 = plain / ours

    n, b = 1_300, 3_100
    ei = torch.randint(0, n, (2, 10 * n), generator=gen, device=device)
    adj = activation_adjacency(ei, torch.rand(10 * n, generator=gen, device=device), n)
    x = torch.rand(n, b, generator=gen, device=device)
    if not torch.equal(spmm_sum(adj, x), torch.sparse.mm(adj, x)):
        raise AssertionError("spmm_sum differs from torch.sparse.mm")
    plain = best_ms(lambda: torch.sparse.mm(adj, x), 20, device)
    ours = best_ms(lambda: spmm_sum(adj, x), 20, device)
    print(f"sparse product {n:,} x {b:,}: torch.sparse.mm {plain:.2f} ms  spmm_sum {ours:.2f} ms")

    if args.skip_adjacency:
        print(f"topk_speedup_at_1e6x64: {ratio_1e6:.1f} x")
        return
    n = 1_000_000
    src = torch.randint(0, n, (14 * n,), generator=gen, device=device)
    dst = torch.randint(0, n, (14 * n,), generator=gen, device=device)
    chain = torch.arange(n, device=device)
    ei = torch.cat([torch.stack([src, dst]), torch.stack([chain[:-1], chain[1:]])], dim=1)
    w = torch.rand(ei.size(1), generator=gen, device=device)

    def coalesced() -> torch.Tensor:
        wn = normalized_edge_weight(ei, w, n)
        return torch.sparse_coo_tensor(ei.flip(0), wn, (n, n),
                                       check_invariants=False).coalesce().to_sparse_csr()

    probe = torch.rand(n, 4, generator=gen, device=device)
    torch.testing.assert_close(torch.sparse.mm(activation_adjacency(ei, w, n), probe),
                               torch.sparse.mm(coalesced(), probe))
    plain = best_ms(coalesced, 3, device)
    ours = best_ms(lambda: activation_adjacency(ei, w, n), 3, device)
    print(f"adjacency of {ei.size(1):,} edges: coalesce + to_sparse_csr {plain / 1e3:.2f} s  "
          f"activation_adjacency {ours / 1e3:.2f} s")
    print(f"topk_speedup_at_1e6x64: {ratio_1e6:.1f} x")


if __name__ == "__main__":
    main()
