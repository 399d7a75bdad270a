"""Embed every LoCoMo-10 turn and question with the bundled all-MiniLM-L6-v2 and report throughput.

    .venv/bin/python experiments/embed_locomo.py  # first run: embeds 7,868 texts
    .venv/bin/python experiments/embed_locomo.py  # second run: all from the disk cache

The last line is ``embed_throughput: <value> texts/s`` (model loading excluded; cache lookups
included, so a rerun measures the cache).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from synapse_pt.data.locomo import load_locomo
from synapse_pt.data.source import default_locomo_path
from synapse_pt.models.embedder import HFEmbedder


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=default_locomo_path(),
                   help="LoCoMo JSON file (default: $SYNAPSE_DATA, else "
                        "../shared/data/locomo10.json)")
    p.add_argument("--cache-dir", default=".cache/embeddings",
                   help="embedding cache folder (default: .cache/embeddings)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--call-tokens", type=int, default=256,
                   help="token positions a fixed-shape call holds (default: 256)")
    p.add_argument("--model", default="bundled:all-MiniLM-L6-v2")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = Path(args.data)
    if not data.is_file():
        print(f"embed_locomo: data file {data} not found (set --data or SYNAPSE_DATA)",
              file=sys.stderr)
        return 2
    dataset = load_locomo(data)
    turns = [t.content for t in dataset.turns()]
    questions = [q.question for q in dataset.questions()]
    texts = turns + questions
    embedder = HFEmbedder(model=args.model, device=args.device, call_tokens=args.call_tokens,
                          cache_dir=args.cache_dir)
    assert embedder.cache is not None
    hits0, misses0 = embedder.cache.hits, embedder.cache.misses
    start = time.perf_counter()
    vectors = embedder.encode(texts)
    elapsed = time.perf_counter() - start
    hits, misses = embedder.cache.hits - hits0, embedder.cache.misses - misses0
    load = embedder.load_seconds  # the model loads lazily, inside the first encode that needs it
    seconds = elapsed - (load or 0.0)
    print(f"model: {embedder.name} on {args.device}, call_tokens {args.call_tokens}, "
          f"torch threads {torch.get_num_threads()}")
    print(f"texts: {len(texts)} ({len(turns)} turn contents + {len(questions)} questions), "
          f"{len(set(texts))} distinct; embeddings {tuple(vectors.shape)}")
    print(f"cache: {embedder.cache.path}: hits {hits}, misses {misses}")
    print(f"model load: {'not needed (all cached)' if load is None else f'{load:.2f} s'}")
    print(f"seconds: {seconds:.2f} (encode, excluding model load; {elapsed:.2f} with it)")
    print(f"embed_throughput: {len(texts) / seconds:.1f} texts/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
