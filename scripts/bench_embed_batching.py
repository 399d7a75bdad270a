"""Batch composition and embedding bits: the padded batching HFEmbedder used before issue 42
against encoding each sequence alone (its batching since), on LoCoMo turn texts.

    .venv/bin/python scripts/bench_embed_batching.py [--texts 2000] [--rounds 2]

Two measurements with the bundled all-MiniLM-L6-v2 on the CPU:

* bits: the first ``--probe`` texts embedded one at a time (no padding, nothing else in the pass)
  against the same texts inside two different batches of other texts; the rows that differ in
  any bit, and the largest difference, for each batching;
* throughput: ``--texts`` distinct turn texts (shuffled with a fixed seed) embedded by each
  batching, the two alternating for ``--rounds`` rounds (interleaved, so a loaded machine slows
  both alike); texts per second of each round and the ratio of the medians.

The padded batching is written here as it stood in ``HFEmbedder._embed`` at 4dc6122: longest
first, ``batch_size`` texts per pass, padded to the longest in the batch, mean-pooled over the
mask. The one-at-a-time encoding is ``HFEmbedder._embed`` itself.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import torch

from synapse_pt.data.locomo import load_locomo
from synapse_pt.models.embedder import HFEmbedder, mean_pool


@torch.inference_mode()
def padded_embed(embedder: HFEmbedder, texts: list[str]) -> torch.Tensor:
    """The 4dc6122 batching: longest first, padded batches of ``batch_size`` texts."""
    tokenizer, model = embedder._tokenizer, embedder._model
    out = torch.empty(len(texts), embedder.dim)
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    for start in range(0, len(order), embedder.batch_size):
        idx = order[start:start + embedder.batch_size]
        enc = tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                        max_length=embedder.max_length, return_tensors="pt")
        hidden = model(**enc).last_hidden_state
        out[idx] = torch.nn.functional.normalize(
            mean_pool(hidden.float(), enc["attention_mask"]), dim=1)
    return out


def bits_report(name: str, embed, embedder: HFEmbedder, probe: list[str], mates_a: list[str],
                mates_b: list[str]) -> None:
    """Rows of ``probe`` whose vector in a batch differs from the vector alone."""
    alone = torch.cat([embed(embedder, [t]) for t in probe])
    for label, mates in (("batch A", mates_a), ("batch B", mates_b)):
        got = embed(embedder, probe + mates)[:len(probe)]
        rows = int((got != alone).any(dim=1).sum())
        print(f"{name:9s} {label}: {rows}/{len(probe)} rows differ from the text alone, "
              f"max |diff| {(got - alone).abs().max().item():.3g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.environ.get("SYNAPSE_DATA", "data/locomo10.json"))
    ap.add_argument("--texts", type=int, default=2000)
    ap.add_argument("--probe", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    dataset = load_locomo(args.data)
    texts = list(dict.fromkeys(t.text for c in dataset.conversations for s in c.sessions
                               for t in s.turns))
    random.Random(0).shuffle(texts)
    embedder = HFEmbedder()  # no disk cache: every call computes
    embedder._load()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"batch_size {embedder.batch_size}")

    def one_at_a_time(e: HFEmbedder, batch: list[str]) -> torch.Tensor:
        return e._embed(batch)

    probe = texts[:args.probe]
    mates_a, mates_b = texts[100:144], texts[200:263]
    bits_report("padded", padded_embed, embedder, probe, mates_a, mates_b)
    bits_report("alone", one_at_a_time, embedder, probe, mates_a, mates_b)

    sample = texts[:args.texts]
    speed: dict[str, list[float]] = {"padded": [], "alone": []}
    for r in range(args.rounds):
        for name, embed in (("padded", padded_embed), ("alone", one_at_a_time)):
            start = time.perf_counter()
            embed(embedder, sample)
            rate = len(sample) / (time.perf_counter() - start)
            speed[name].append(rate)
            print(f"round {r + 1} {name:9s}: {rate:.1f} texts/s")
    ratio = statistics.median(speed["alone"]) / statistics.median(speed["padded"])
    print(f"alone/padded throughput (median of {args.rounds} rounds): {ratio:.2f}")


if __name__ == "__main__":
    main()
