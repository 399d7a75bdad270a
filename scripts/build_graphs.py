"""Build the SYNAPSE memory graph of every LoCoMo conversation and print its size and build time.

    .venv/bin/python scripts/build_graphs.py --data ../shared/data/locomo10.json --encoder minilm
    .venv/bin/python scripts/build_graphs.py --encoder hashing          # no model needed

One row per conversation: turns, windows, episodic/semantic nodes, temporal/abstraction/association
edges, the largest in-degree; then the phase times of the build (embedding, extraction, concept
embedding, consolidation). The last line is ``build_graphs_total_s: <seconds>``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from synapse_pt.data.locomo import load_locomo
from synapse_pt.data.source import default_locomo_path
from synapse_pt.graph.batch import GraphBatch
from synapse_pt.graph.consolidation import ASSOCIATION_WEIGHTINGS, GraphBuilder
from synapse_pt.graph.extraction import KeywordConceptExtractor
from synapse_pt.models.hashing import HashingEncoder


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=default_locomo_path(),
                   help="LoCoMo JSON file (default: $SYNAPSE_DATA, else "
                        "../shared/data/locomo10.json)")
    p.add_argument("--encoder", choices=("hashing", "minilm"), default="minilm")
    p.add_argument("--extractor", choices=("keyword",), default="keyword",
                   help="concept extractor (LLM extraction needs an LLM backend: not here)")
    p.add_argument("--cache-dir", default=".cache/embeddings",
                   help="embedding cache folder for minilm ('' disables it)")
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--association-weighting", choices=ASSOCIATION_WEIGHTINGS,
                   default="cooccurrence")
    p.add_argument("--device", default="cpu", help="device of the graph tensors")
    p.add_argument("--embed-device", default=None,
                   help="device of the MiniLM forward passes (default: --device)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads (small per-window tensor ops can run faster on one "
                        "thread of a busy CPU)")
    return p.parse_args(argv)


def make_encoder(args: argparse.Namespace):
    if args.encoder == "hashing":
        return HashingEncoder(384)
    from synapse_pt.models.embedder import HFEmbedder

    return HFEmbedder(device=args.embed_device or args.device, cache_dir=args.cache_dir or None)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = Path(args.data)
    if not data.is_file():
        print(f"build_graphs: data file {data} not found (set --data or SYNAPSE_DATA)",
              file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    dataset = load_locomo(data)
    t0 = time.perf_counter()
    encoder = make_encoder(args)
    extractor = KeywordConceptExtractor(encoder)
    builder = GraphBuilder(encoder, extractor, window=args.window,
                           association_weighting=args.association_weighting, device=args.device)
    load_s = time.perf_counter() - t0
    graphs = builder.build_many(dataset.conversations)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    batch = GraphBatch(graphs)
    total_s = time.perf_counter() - t0

    print(f"data: {data} ({len(dataset)} conversations, {dataset.num_turns} turns)")
    print(f"encoder: {encoder.name}  extractor: {extractor.name}  window: {args.window}  "
          f"association: {args.association_weighting}  device: {args.device}  "
          f"threads: {torch.get_num_threads()}")
    header = (f"{'sample_id':<10}{'turns':>7}{'windows':>8}{'episodic':>9}{'semantic':>9}"
              f"{'temporal':>9}{'abstract':>9}{'assoc':>8}{'edges':>8}{'max_in':>7}")
    print(header)
    print("-" * len(header))
    totals = [0] * 9
    for conv, g in zip(dataset.conversations, graphs, strict=True):
        nodes, edges = g.num_nodes_by_type(), g.num_edges_by_type()
        row = [conv.num_turns, g.num_windows, nodes["episodic"], nodes["semantic"],
               edges["temporal"], edges["abstraction"], edges["association"], g.num_edges,
               int(g.in_degree().max())]
        totals = [a + b for a, b in zip(totals, row, strict=True)]
        print(f"{g.sample_id:<10}" + "".join(f"{v:>{w}}" for v, w in
                                             zip(row, (7, 8, 9, 9, 9, 9, 8, 8, 7), strict=True)))
    totals[-1] = max(int(g.in_degree().max()) for g in graphs)
    print("-" * len(header))
    print(f"{'total':<10}" + "".join(f"{v:>{w}}" for v, w in
                                     zip(totals, (7, 8, 9, 9, 9, 9, 8, 8, 7), strict=True)))
    print(f"batch: {batch}")
    timings = ", ".join(f"{k}={v:.2f}" for k, v in builder.last_timings.items())
    print(f"encoder setup: {load_s:.2f} s; build: {timings}")
    print(f"build_graphs_total_s: {total_s:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
