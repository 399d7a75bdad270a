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

For the roofline (experiments/limits.md) it also prints each set's real tokens, the positions
the fixed-shape calls compute, and each runtime's useful GFLOP/s (the FLOPs of the real tokens:
per sequence of :math:`n` tokens :math:`6 (n (8 d^2 + 4 d f) + 4 n^2 d)` with ``d = 384``,
``f = 1,536``) by the wall clock and per CPU-second of the process (what the cores did while
they ran it, a figure a loaded machine distorts less). ``--bf16`` adds ``embedder.dtype=
bfloat16`` (PyTorch) as a third runtime where the CPU has bfloat16 instructions, and prints the
refusal where it has not.
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

from synapse_pt.common.errors import ConfigError
from synapse_pt.data.beam import load_beam
from synapse_pt.data.locomo import load_locomo
from synapse_pt.data.source import default_locomo_path
from synapse_pt.models.embedder import HFEmbedder

D, FF, LAYERS = 384, 1536, 6


def sequence_flops(n: int) -> int:
    """FLOPs of the encoder's products for one sequence of ``n`` positions (all-MiniLM-L6-v2)."""
    return LAYERS * (n * (8 * D * D + 4 * D * FF) + 4 * n * n * D)


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
    parser.add_argument("--bf16", action="store_true",
                        help="also embedder.dtype=bfloat16 (where the CPU has bfloat16)")
    parser.add_argument("--no-onnx", action="store_true", help="PyTorch only")
    args = parser.parse_args()

    turns = distinct([t.text for c in load_locomo(args.locomo).conversations
                      for t in c.turns()], args.turns)
    beam = load_beam(args.beam).conversations[0]
    messages = distinct([t.text for t in beam.turns()], args.messages)
    sets = {"locomo turns": turns, "beam500k-1 messages": messages}
    onnx_dir = tempfile.mkdtemp(prefix="bench_encoder_onnx_")
    runtimes = {"torch": HFEmbedder(long_text="windows")}
    if not args.no_onnx:
        runtimes["onnx"] = HFEmbedder(long_text="windows", runtime="onnx", onnx_dir=onnx_dir)
    if args.bf16:
        try:
            runtimes["torch bf16"] = HFEmbedder(long_text="windows", dtype="bfloat16")
        except ConfigError as err:
            print(f"torch bf16: refused: {err}")
    for embedder in runtimes.values():
        embedder._embed(["warm up"])  # load (and export) outside the timings
    tokenizer = runtimes["torch"]._tokenizer
    shapes = runtimes["torch"].shapes
    work = {}
    for name, texts in sets.items():
        sizes = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=256,
                                                return_overflowing_tokens=True)["input_ids"]]
        useful = sum(sequence_flops(n) for n in sizes)
        computed = sum(shapes.rows(length) * sequence_flops(length)
                       for length, _ in shapes.plan(sizes))
        work[name] = useful
        print(f"{name}: {len(texts)} texts, {len(sizes)} token sequences of at most 256, "
              f"{sum(sizes)} tokens, {shapes.padded_tokens(sizes)} positions computed; "
              f"{useful / 1e9:.1f} GFLOP useful, {computed / 1e9:.1f} GFLOP computed")
    print(f"torch threads {torch.get_num_threads()}, load average before "
          f"{os.getloadavg()[0]:.2f}")

    ratios, vectors = [], {}
    for r in range(args.rounds):
        seconds = {rt: 0.0 for rt in runtimes}
        for name, texts in sets.items():
            for rt, embedder in runtimes.items():
                start, cpu = time.perf_counter(), time.process_time()
                vectors[rt, name] = embedder._embed(texts)
                took, cpu = time.perf_counter() - start, time.process_time() - cpu
                seconds[rt] += took
                print(f"round {r + 1} {name:20s} {rt:10s} {len(texts) / took:7.1f} texts/s, "
                      f"{work[name] / took / 1e9:6.1f} useful GFLOP/s, "
                      f"{work[name] / cpu / 1e9:6.1f} per CPU-second "
                      f"({took:.1f} s, load {os.getloadavg()[0]:.2f})", flush=True)
        others = ", ".join(f"{rt} {seconds[rt]:.1f} s" for rt in runtimes)
        if "onnx" in runtimes:
            ratios.append(seconds["torch"] / seconds["onnx"])
            others += f", torch/onnx {ratios[-1]:.2f}"
        if "torch bf16" in runtimes:
            others += f", torch/torch bf16 {seconds['torch'] / seconds['torch bf16']:.2f}"
        print(f"round {r + 1}: {others}")
    for rt in [rt for rt in runtimes if rt != "torch"]:
        for name in sets:
            a, b = vectors["torch", name], vectors[rt, name]
            print(f"{name}: max |{rt} - torch| {(a - b).abs().max().item():.2e}, "
                  f"min cosine {(a * b).sum(dim=1).min().item():.8f}, rows bit-equal "
                  f"{int((a == b).all(dim=1).sum())}/{len(a)}")
    if ratios:
        print(f"encoder_speedup_onnx_over_torch: {statistics.median(ratios):.2f} x")


if __name__ == "__main__":
    main()
