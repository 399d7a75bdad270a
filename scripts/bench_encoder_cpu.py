"""The encoder's throughput on the CPU: PyTorch against ONNX Runtime (``embedder.runtime``), on
short LoCoMo turns and on long BEAM-500K messages (windowed), with how far the vectors differ.

    .venv/bin/python scripts/bench_encoder_cpu.py [--turns 600] [--messages 60] [--rounds 2]

Both runtimes are :class:`~synapse_pt.models.embedder.HFEmbedder` with the bundled
all-MiniLM-L6-v2, no disk cache, each text encoded alone (its production path, ``_embed``); the
two alternate, set by set, for ``--rounds`` rounds (interleaved, so a loaded machine slows both
alike). Texts: ``--turns`` distinct LoCoMo-10 turn texts and the first ``--messages`` distinct
messages of BEAM-500K conversation 1, each shuffled with seed 0. Prints texts/s and token
sequences/s per runtime and round, the largest coordinate difference and the smallest cosine
between the two runtimes' unit vectors; the last line is the median over rounds of torch's
seconds over ONNX Runtime's, both sets together.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from synapse_pt.data.beam import load_beam
from synapse_pt.data.locomo import load_locomo
from synapse_pt.data.source import default_locomo_path
from synapse_pt.models.embedder import HFEmbedder


def distinct(texts: list[str], n: int) -> list[str]:
    """``n`` distinct texts, shuffled with seed 0."""
    unique = list(dict.fromkeys(texts))
    random.Random(0).shuffle(unique)
    return unique[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--locomo", default=default_locomo_path())
    parser.add_argument("--beam", default=os.environ.get(
        "SYNAPSE_BEAM_500K", Path(default_locomo_path()).parent / "beam" / "500K"))
    parser.add_argument("--turns", type=int, default=600)
    parser.add_argument("--messages", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    turns = distinct([t.text for c in load_locomo(args.locomo).conversations
                      for t in c.turns()], args.turns)
    beam = load_beam(args.beam).conversations[0]
    messages = distinct([t.text for t in beam.turns()], args.messages)
    sets = {"locomo turns": turns, "beam500k-1 messages": messages}
    onnx_dir = tempfile.mkdtemp(prefix="bench_encoder_onnx_")
    runtimes = {"torch": HFEmbedder(long_text="windows"),
                "onnx": HFEmbedder(long_text="windows", runtime="onnx", onnx_dir=onnx_dir)}
    for embedder in runtimes.values():
        embedder._embed(["warm up"])  # load (and export) outside the timings
    tokenizer = runtimes["torch"]._tokenizer
    for name, texts in sets.items():
        seqs = len(tokenizer(texts, truncation=True, max_length=256,
                             return_overflowing_tokens=True)["input_ids"])
        print(f"{name}: {len(texts)} texts, {seqs} token sequences of at most 256")
    print(f"torch threads {torch.get_num_threads()}, load average before "
          f"{os.getloadavg()[0]:.2f}")

    ratios, vectors = [], {}
    for r in range(args.rounds):
        seconds = {rt: 0.0 for rt in runtimes}
        for name, texts in sets.items():
            for rt, embedder in runtimes.items():
                start = time.perf_counter()
                vectors[rt, name] = embedder._embed(texts)
                took = time.perf_counter() - start
                seconds[rt] += took
                print(f"round {r + 1} {name:20s} {rt:5s} {len(texts) / took:7.1f} texts/s "
                      f"({took:.1f} s, load {os.getloadavg()[0]:.2f})")
        ratios.append(seconds["torch"] / seconds["onnx"])
        print(f"round {r + 1}: torch {seconds['torch']:.1f} s, onnx {seconds['onnx']:.1f} s, "
              f"ratio {ratios[-1]:.2f}")
    for name in sets:
        a, b = vectors["torch", name], vectors["onnx", name]
        print(f"{name}: max |onnx - torch| {(a - b).abs().max().item():.2e}, "
              f"min cosine {(a * b).sum(dim=1).min().item():.8f}, rows bit-equal "
              f"{int((a == b).all(dim=1).sum())}/{len(a)}")
    print(f"encoder_speedup_onnx_over_torch: {statistics.median(ratios):.2f} x")


if __name__ == "__main__":
    main()
