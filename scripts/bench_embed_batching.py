"""Encoder batchings and their bits: the padded batches before issue 42, one sequence at a time
(issue 42 to 50) and the fixed-shape calls of ``HFEmbedder`` (issue 50), on LoCoMo turn texts.

    .venv/bin/python scripts/bench_embed_batching.py [--texts 600] [--rounds 2]
    .venv/bin/python scripts/bench_embed_batching.py --methods fixed --texts 300   # one per job

With the bundled all-MiniLM-L6-v2 on the CPU:

* bits: the first ``--probe`` texts embedded one at a time against the same texts inside two
  different batches of other texts; the rows that differ in any bit, and the largest difference,
  for each batching;
* padding: the token positions the fixed-shape calls compute for the sample, against its tokens;
* throughput: ``--texts`` distinct turn texts (shuffled with a fixed seed) embedded by each
  batching, alternating for ``--rounds`` rounds (interleaved, so a loaded machine slows all
  alike); texts per second of each round and the ratio of the medians.

``padded`` is ``HFEmbedder._embed`` as it stood at 4dc6122 (longest first, ``64`` texts a pass,
padded to the longest, PyTorch's intra-op threads); ``alone`` as it stood at 70f7a39 (each
sequence on its own, unpadded, intra-op threads); ``fixed`` is ``HFEmbedder._embed`` itself, with
``threads: auto`` (this process registered as a job, :mod:`synapse_pt.common.threads`); ``onnx``
the same calls on ONNX Runtime (``--methods padded,alone,fixed,onnx``). Start two
copies of the script with one method each to measure jobs that share the machine. The last line
is ``fixed/padded throughput: R`` with all three methods, else ``embed_throughput_<method>: N
texts/s``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import torch

from synapse_pt.common import threads
from synapse_pt.data.locomo import load_locomo
from synapse_pt.models.embedder import HFEmbedder, mean_pool

PADDED_BATCH = 64


@torch.inference_mode()
def padded_embed(embedder: HFEmbedder, texts: list[str]) -> torch.Tensor:
    """The 4dc6122 batching: longest first, padded batches of 64 texts."""
    tokenizer, model = embedder._tokenizer, embedder._model
    out = torch.empty(len(texts), embedder.dim)
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    for start in range(0, len(order), PADDED_BATCH):
        idx = order[start:start + PADDED_BATCH]
        enc = tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                        max_length=embedder.max_length, return_tensors="pt")
        hidden = model(**enc).last_hidden_state
        out[idx] = torch.nn.functional.normalize(
            mean_pool(hidden.float(), enc["attention_mask"]), dim=1)
    return out


@torch.inference_mode()
def alone_embed(embedder: HFEmbedder, texts: list[str]) -> torch.Tensor:
    """The 70f7a39 encoding: every sequence through the model on its own, unpadded."""
    tokenizer, model = embedder._tokenizer, embedder._model
    out = torch.empty(len(texts), embedder.dim)
    for i, text in enumerate(texts):
        enc = tokenizer([text], truncation=True, max_length=embedder.max_length,
                        return_tensors="pt")
        out[i] = torch.nn.functional.normalize(
            model(**enc).last_hidden_state[0].mean(dim=0), dim=0)
    return out


def fixed_embed(embedder: HFEmbedder, texts: list[str]) -> torch.Tensor:
    """Issue 50: ``HFEmbedder._embed``, fixed-shape calls on worker threads."""
    return embedder._embed(texts)


_ONNX: dict[str, HFEmbedder] = {}


def onnx_embed(embedder: HFEmbedder, texts: list[str]) -> torch.Tensor:
    """The same fixed-shape calls on ONNX Runtime (``embedder.runtime=onnx``), exported once into
    a temporary folder."""
    if "encoder" not in _ONNX:
        import tempfile

        _ONNX["encoder"] = HFEmbedder(runtime="onnx", onnx_dir=tempfile.mkdtemp())
        _ONNX["encoder"]._load()
    return _ONNX["encoder"]._embed(texts)


METHODS = {"padded": padded_embed, "alone": alone_embed, "fixed": fixed_embed,
           "onnx": onnx_embed}


def bits_report(name: str, embed, embedder: HFEmbedder, probe: list[str], mates_a: list[str],
                mates_b: list[str]) -> None:
    """Rows of ``probe`` whose vector in a batch differs from the vector alone."""
    alone = torch.cat([embed(embedder, [t]) for t in probe])
    for label, mates in (("batch A", mates_a), ("batch B", mates_b)):
        got = embed(embedder, probe + mates)[:len(probe)]
        rows = int((got != alone).any(dim=1).sum())
        print(f"{name:7s} {label}: {rows}/{len(probe)} rows differ from the text alone, "
              f"max |diff| {(got - alone).abs().max().item():.3g}")


def compare_call_tokens(sample: list[str], values: list[int], rounds: int) -> None:
    """The fixed-shape calls at each ``call_tokens`` value, interleaved: padding and texts/s."""
    encoders = {t: HFEmbedder(call_tokens=t) for t in values}
    for encoder in encoders.values():
        encoder._load()
    tokenizer = encoders[values[0]]._tokenizer
    sizes = [len(ids) for ids in tokenizer(sample, truncation=True, max_length=256)["input_ids"]]
    rates: dict[int, list[float]] = {t: [] for t in values}
    for _ in range(rounds):
        for t, encoder in encoders.items():
            start = time.perf_counter()
            encoder._embed(sample)
            rates[t].append(len(sample) / (time.perf_counter() - start))
    for t in values:
        waste = encoders[t].shapes.padded_tokens(sizes) / sum(sizes)
        print(f"call_tokens {t}: {statistics.median(rates[t]):.1f} texts/s, positions/tokens "
              f"{waste:.2f}")
    best = max(values, key=lambda t: statistics.median(rates[t]))
    print(f"best_call_tokens: {best} (of {len(sample)} texts)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.environ.get("SYNAPSE_DATA", "data/locomo10.json"))
    ap.add_argument("--texts", type=int, default=600)
    ap.add_argument("--probe", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--methods", default="padded,alone,fixed",
                    help=f"comma-separated, of {sorted(METHODS)}")
    ap.add_argument("--no-bits", action="store_true", help="skip the bits report")
    ap.add_argument("--call-tokens", default="",
                    help="comma-separated call sizes: the fixed-shape calls once per value "
                         "(methods fixed@T), padding and throughput only")
    args = ap.parse_args()
    methods = [m.strip() for m in args.methods.split(",")]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise SystemExit(f"--methods: unknown {unknown}; known: {sorted(METHODS)}")
    dataset = load_locomo(args.data)
    texts = list(dict.fromkeys(t.text for c in dataset.conversations for s in c.sessions
                               for t in s.turns))
    random.Random(0).shuffle(texts)
    pool_threads = torch.get_num_threads()  # PyTorch's default, what padded and alone ran with
    threads.configure("auto")
    embedder = HFEmbedder()  # no disk cache: every call computes
    embedder._load()
    print(f"torch {torch.__version__}; padded/alone: {pool_threads} intra-op threads; fixed: "
          f"{threads.threads_now()} worker threads now ({threads.live_jobs()} live jobs), "
          f"{embedder.shapes.identity}")

    if not args.no_bits:
        probe = texts[:args.probe]
        mates_a, mates_b = texts[100:144], texts[200:263]
        for name in methods:
            if name in ("padded", "alone"):
                torch.set_num_threads(pool_threads)
            bits_report(name, METHODS[name], embedder, probe, mates_a, mates_b)

    sample = texts[:args.texts]
    if args.call_tokens:
        compare_call_tokens(sample, [int(t) for t in args.call_tokens.split(",")], args.rounds)
        return
    sizes = [len(ids) for ids in embedder._tokenizer(sample, truncation=True,
                                                     max_length=embedder.max_length)["input_ids"]]
    computed = embedder.shapes.padded_tokens(sizes)
    print(f"padding: {sum(sizes)} tokens, {computed} positions computed by the fixed-shape calls "
          f"({computed / sum(sizes):.2f}x)")
    speed: dict[str, list[float]] = {name: [] for name in methods}
    for r in range(args.rounds):
        for name in methods:
            if name in ("padded", "alone"):
                torch.set_num_threads(pool_threads)
            start = time.perf_counter()
            METHODS[name](embedder, sample)
            rate = len(sample) / (time.perf_counter() - start)
            speed[name].append(rate)
            print(f"round {r + 1} {name:7s}: {rate:.1f} texts/s", flush=True)
    medians = {name: statistics.median(rates) for name, rates in speed.items()}
    for name, value in medians.items():
        print(f"embed_throughput_{name}: {value:.1f} texts/s")
    if {"padded", "fixed"} <= set(methods):
        if "alone" in methods:
            print(f"alone/padded throughput: {medians['alone'] / medians['padded']:.2f}")
        if "onnx" in methods:
            print(f"onnx/fixed throughput: {medians['onnx'] / medians['fixed']:.2f}")
        print(f"fixed/padded throughput: {medians['fixed'] / medians['padded']:.2f}")


if __name__ == "__main__":
    main()
