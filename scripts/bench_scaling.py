"""How retrieval and ingestion grow with the memory: synthetic memories shaped like LoCoMo's.

    python scripts/bench_scaling.py [--nodes 1e3 1e4 1e5 1e6] [--batches 1 16 64 256 1024]
                                    [--turns 1e3 3e3 1e4 3e4 1e5] [--threads 1] [--plot PNG]
                                    [--device cuda]

Retrieval. A synthetic memory of ``N`` nodes as the graph builder makes them: 80 % episodic nodes
on a temporal chain, windows of 5 episodes, each window linked both ways (abstraction) to 3
concept nodes drawn from a skewed (squared-uniform) distribution over the concept pool so popular
concepts recur, the window's concepts joined pairwise (association), weights in [0, 1), then at
most 15 in-edges per node (:func:`synapse_pt.graph.maintenance.in_edge_keep_mask`, the builder's
cap). ``B`` queries with energy on 20 random nodes each. Timed: one call of
:class:`synapse_pt.nn.ActivationDynamics` (T = 3, default hyperparameters and firing
rule; edge list in, dense ``[N, B]`` out, the fan normalisation included), on the frontier path
(``auto``) and, where ``N x B`` is small enough, the dense one; best of ``--repeats`` calls after
a warm-up. Each size runs in a fresh child process, so its peak resident memory
(``ru_maxrss``) is its own; the figure printed is the peak minus the resident memory before the
call (the inputs: edge list and ``a0``).

Ingestion. A synthetic conversation of ``turns`` turns (sessions of 20 turns a day apart, two
speakers, sentences from a Zipf vocabulary with capitalised names) through
:class:`~synapse_pt.graph.consolidation.GraphBuilder` with the LLM-free keyword extractor and
random unit embeddings (one fixed random vector per distinct text, made before timing, so no
encoder cost is timed): seconds per 1,000 turns, with the builder's defaults (``--collect-to``
sets the low-water mark of a collection; 1.0 collects every window at the cap).

It prints both tables and the growth exponents fitted by least squares on log-log axes (retrieval
time against ``E x B``, and against ``N`` at the largest batch run at every size; ingestion total
time against turns: 1.0 is linear), writes a log-log plot, and ends with
``ingest_s_per_1000_turns_growth: <max / min> x``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
EPISODIC_SHARE, WINDOW, CONCEPTS_PER_WINDOW, MAX_IN_EDGES, ANCHORS = 0.8, 5, 3, 15, 20


# ----------------------------------------------------------------------------- retrieval
def synthetic_memory(num_nodes: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(edge_index, edge_weight)`` of a memory shaped like the builder's (module docstring)."""
    from synapse_pt.graph.maintenance import in_edge_keep_mask

    g = torch.Generator().manual_seed(seed)
    n_ep = max(2, int(EPISODIC_SHARE * num_nodes))
    n_c = max(1, num_nodes - n_ep)
    ep = torch.arange(n_ep)
    chain = torch.stack([ep[:-1], ep[1:]])
    n_win = math.ceil(n_ep / WINDOW)
    concept = n_ep + (n_c * torch.rand(n_win, CONCEPTS_PER_WINDOW, generator=g) ** 2).long()
    window_of = ep // WINDOW  # [n_ep]
    ep_rep = ep.repeat_interleave(CONCEPTS_PER_WINDOW)
    c_rep = concept[window_of].reshape(-1)
    iu = torch.triu_indices(CONCEPTS_PER_WINDOW, CONCEPTS_PER_WINDOW, offset=1)
    a, b = concept[:, iu[0]].reshape(-1), concept[:, iu[1]].reshape(-1)
    src = torch.cat([chain[0], ep_rep, c_rep, a, b])
    dst = torch.cat([chain[1], c_rep, ep_rep, b, a])
    edge_index = torch.stack([src, dst])
    weight = torch.rand(edge_index.size(1), generator=g)
    keep = in_edge_keep_mask(edge_index, weight, num_nodes, MAX_IN_EDGES)
    return edge_index[:, keep], weight[keep]


def one_retrieval(num_nodes: int, batch: int, paths: list[str], repeats: int, seed: int,
                  device: str = "cpu") -> dict:
    """Time one size in this process (run as a child: its peak memory is its own). On CUDA the
    calls are synchronised and the peak is the device's (``max_memory_allocated``)."""
    from synapse_pt.nn import Hyperparams
    from synapse_pt.retrieval.settings import STORAGE, SynapseParams
    from synapse_pt.retrieval.spreading import activation_layer

    edge_index, edge_weight = synthetic_memory(num_nodes, seed)
    g = torch.Generator().manual_seed(seed + 1)
    a0 = torch.zeros(num_nodes, batch)
    rows = torch.randint(0, num_nodes, (batch, ANCHORS), generator=g)
    a0[rows, torch.arange(batch)[:, None]] = torch.rand(batch, ANCHORS, generator=g) + 0.1
    edge_index, edge_weight, a0 = edge_index.to(device), edge_weight.to(device), a0.to(device)
    cuda = device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    def peak_gib() -> float:
        if cuda:
            return torch.cuda.max_memory_allocated(device) / 2**30
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20

    out: dict = {"N": num_nodes, "E": int(edge_index.size(1)), "B": batch, "device": device}
    for path in paths:
        p = SynapseParams()  # the config's values
        hyper = Hyperparams(p.S, p.delta, p.beta, p.gamma, p.theta)
        layer = activation_layer(p, **dict(STORAGE, frontier=path))
        layer(a0, edge_index, edge_weight, hyper=hyper)  # warm-up
        sync()
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device) / 2**30 if cuda else peak_gib()
        best = math.inf
        for _ in range(repeats):
            start = time.perf_counter()
            act = layer(a0, edge_index, edge_weight, hyper=hyper)
            sync()
            best = min(best, time.perf_counter() - start)
        peak = peak_gib()
        out[path] = {"s": best, "peak_gib": peak, "peak_over_inputs_gib": peak - before,
                     "active_per_column": float((act > 0).sum(0).float().mean())}
        del act
    return out


# ----------------------------------------------------------------------------- ingestion
class FixedRandomEncoder:
    """Unit random vectors, one per distinct text, made ahead by :meth:`prepare` (no encoder
    cost in the timed region); an unseen text is an error."""

    def __init__(self, dim: int = 384, seed: int = 0) -> None:
        self.dim, self.name, self.seed = dim, f"fixed-random-{dim}", seed
        self.table: dict[str, torch.Tensor] = {}

    def prepare(self, texts: list[str]) -> None:
        new = [t for t in dict.fromkeys(texts) if t not in self.table]
        g = torch.Generator().manual_seed(self.seed + len(self.table))
        emb = torch.nn.functional.normalize(torch.randn(len(new), self.dim, generator=g), dim=1)
        self.table.update(zip(new, emb, strict=True))

    def encode(self, texts: list[str]) -> torch.Tensor:
        if not texts:
            return torch.zeros(0, self.dim)
        return torch.stack([self.table[t] for t in texts])


def synthetic_dialogue(num_turns: int, seed: int = 0):
    """A two-speaker conversation of ``num_turns`` turns (sessions of 20 turns, a day apart)."""
    import random

    from synapse_pt.data.schema import Dialogue, Session, Turn

    rng = random.Random(seed)
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]  # 70 letter-only syllables
    words = list(dict.fromkeys("".join(rng.choices(syllables, k=rng.randint(2, 3)))
                               for _ in range(3500)))[:3000]
    zipf = [1.0 / (k + 1) for k in range(len(words))]
    names = [w.capitalize() for w in words[-400:]]
    speakers = ("Alice", "Bob")
    sessions, start = [], datetime(2023, 1, 1, 10, 0)
    for s in range(math.ceil(num_turns / 20)):
        date = start + timedelta(days=s)
        turns = []
        for k in range(min(20, num_turns - 20 * s)):
            body = rng.choices(words, weights=zipf, k=12)
            body[rng.randrange(12)] = rng.choice(names)
            text = " ".join(body).capitalize() + "."
            turns.append(Turn("syn", f"D{s + 1}:{k + 1}", speakers[k % 2], text, s, k,
                              date + timedelta(minutes=k)))
        sessions.append(Session(s, date, date.isoformat(), tuple(turns)))
    return Dialogue("syn", speakers[0], speakers[1], tuple(sessions))


def one_ingestion(num_turns: int, seed: int, collect_to: float | None = None) -> dict:
    from synapse_pt.graph.consolidation import GraphBuilder, windows_of
    from synapse_pt.graph.extraction import KeywordConceptExtractor, clean_concepts

    dialogue = synthetic_dialogue(num_turns, seed)
    encoder = FixedRandomEncoder(seed=seed)
    extractor = KeywordConceptExtractor()
    builder = GraphBuilder(encoder, extractor,
                           **({} if collect_to is None else {"collect_to": collect_to}))
    turns = list(dialogue.turns())
    encoder.prepare([builder.renderer(t) for t in turns])
    concepts = extractor.extract(windows_of(turns, builder.consolidation.window))
    encoder.prepare([c for cs in concepts for c in clean_concepts(cs)])
    start = time.perf_counter()
    graph = builder.build(dialogue)
    total = time.perf_counter() - start
    return {"turns": num_turns, "s": total, "s_per_1000_turns": 1000 * total / num_turns,
            "nodes": graph.num_nodes, "active_nodes": int(graph.active.sum()),
            "edges": graph.num_edges, "collect_to": builder.maintenance.collect_to,
            **{k: round(v, 3) for k, v in builder.last_timings.items()}}


# ----------------------------------------------------------------------------- driver
def _child(args: list[str], threads: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TQDM_DISABLE": "1"}
    cmd = [sys.executable, __file__, "--threads", str(threads), *args]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def fit_exponent(xs: list[float], ys: list[float]) -> float:
    """Slope of log y on log x (least squares)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    den = sum((x - mx) ** 2 for x in lx)
    return sum((x - mx) * (y - my) for x, y in zip(lx, ly, strict=True)) / den if den else math.nan


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=float, nargs="*", default=[1e3, 1e4, 1e5, 1e6])
    p.add_argument("--batches", type=int, nargs="*", default=[1, 16, 64, 256, 1024])
    p.add_argument("--turns", type=float, nargs="*", default=[1e3, 3e3, 1e4, 3e4, 1e5])
    p.add_argument("--max-cells", type=float, default=2.6e8,
                   help="largest N x B run (the dense [N, B] input alone is 4 bytes a cell)")
    p.add_argument("--max-dense-cells", type=float, default=6.4e7,
                   help="largest N x B also run on the dense path")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: stable figures "
                   "on a shared 2-core machine)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="where retrieval runs (cuda: device peak "
                   "memory; ingestion stays on the CPU)")
    p.add_argument("--plot", type=Path, default=REPO / "experiments" / "figures" /
                   "bench_scaling.png")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    p.add_argument("--one-retrieval", type=int, nargs=2, metavar=("N", "B"), help=argparse.SUPPRESS)
    p.add_argument("--paths", nargs="*", default=["auto"], help=argparse.SUPPRESS)
    p.add_argument("--collect-to", type=float, default=None,
                   help="the builder's low-water mark of a collection, a share of max_nodes "
                        "(default: the builder's, 0.95; 1.0 = collect only the excess, every "
                        "window at the cap)")
    p.add_argument("--one-ingestion", type=int, metavar="TURNS", help=argparse.SUPPRESS)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.one_retrieval:
        n, b = args.one_retrieval
        print(json.dumps(one_retrieval(n, b, args.paths, args.repeats, args.seed, args.device)))
        return
    if args.one_ingestion:
        print(json.dumps(one_ingestion(args.one_ingestion, args.seed, args.collect_to)))
        return

    gpu = (f", {torch.cuda.get_device_name(args.device)}" if args.device.startswith("cuda")
           else "")
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cpus{gpu}, torch "
          f"{torch.__version__}, {args.threads} thread(s), load {os.getloadavg()[0]:.2f}, "
          f"retrieval on {args.device}")
    retrieval = []
    for n in (int(x) for x in args.nodes):
        for b in args.batches:
            if n * b > args.max_cells:
                continue
            paths = ["auto"] + (["dense"] if n * b <= args.max_dense_cells else [])
            row = _child(["--one-retrieval", str(n), str(b), "--paths", *paths,
                          "--repeats", str(args.repeats), "--seed", str(args.seed),
                          "--device", args.device], args.threads)
            retrieval.append(row)
            dense = row.get("dense")
            print(f"retrieval N={n:>9,} E={row['E']:>11,} B={b:>5}: frontier "
                  f"{row['auto']['s']:8.3f} s, +{row['auto']['peak_over_inputs_gib']:.2f} GiB"
                  + (f" | dense {dense['s']:8.3f} s, +{dense['peak_over_inputs_gib']:.2f} GiB"
                     if dense else "") + f" | active/column {row['auto']['active_per_column']:.1f}",
                  flush=True)
    ingestion = []
    for t in (int(x) for x in args.turns):
        row = _child(["--one-ingestion", str(t), "--seed", str(args.seed),
                      *([] if args.collect_to is None else ["--collect-to", str(args.collect_to)])],
                     args.threads)
        ingestion.append(row)
        print(f"ingestion {t:>7,} turns: {row['s']:8.2f} s, {row['s_per_1000_turns']:.2f} s per "
              f"1,000 turns ({row['active_nodes']:,} active of {row['nodes']:,} nodes, "
              f"{row['edges']:,} edges)", flush=True)

    exps = {}
    for path in ("auto", "dense"):
        rows = [r for r in retrieval if path in r]
        if len({r["E"] * r["B"] for r in rows}) > 1:
            exps[f"retrieval_{path}_vs_ExB"] = fit_exponent(
                [r["E"] * r["B"] for r in rows], [r[path]["s"] for r in rows])
        common = [b for b in args.batches
                  if sum(1 for r in rows if r["B"] == b) == len({r["N"] for r in rows}) > 1]
        if common:
            sel = [r for r in rows if r["B"] == max(common)]
            exps[f"retrieval_{path}_vs_N_at_B{max(common)}"] = fit_exponent(
                [r["N"] for r in sel], [r[path]["s"] for r in sel])
    if len(ingestion) > 1:
        exps["ingestion_total_vs_turns"] = fit_exponent(
            [r["turns"] for r in ingestion], [r["s"] for r in ingestion])
    for k, v in exps.items():
        print(f"exponent {k}: {v:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"retrieval": retrieval, "ingestion": ingestion,
                                         "exponents": exps}, indent=1))
    if str(args.plot) not in ("", ".") and (retrieval or ingestion):
        from synapse_pt.eval.reports.plots import scaling_plot

        args.plot.parent.mkdir(parents=True, exist_ok=True)
        written = scaling_plot(retrieval, ingestion, exps, args.plot)
        print("plot: " + ", ".join(str(p) for p in written))
    if ingestion:
        per = [r["s_per_1000_turns"] for r in ingestion]
        print(f"ingest_s_per_1000_turns_growth: {max(per) / min(per):.2f} x")
    elif retrieval:  # retrieval only (``--turns`` with no sizes, e.g. on a GPU)
        largest = max(retrieval, key=lambda r: r["E"] * r["B"])
        print(f"retrieval_frontier_s_at_N{largest['N']}_B{largest['B']}: "
              f"{largest['auto']['s']:.4f} s")


if __name__ == "__main__":
    main()
