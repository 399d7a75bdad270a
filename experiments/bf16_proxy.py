"""bfloat16 vectors on a CPU without bfloat16 instructions, at float32 speed: a stand-in for
``embedder.dtype=bfloat16`` to measure recall with (issue 62; experiments/limits.md).

    python experiments/bf16_proxy.py validate [--texts 300]
    python experiments/bf16_proxy.py run -- memory=fused embedder.dtype=bfloat16 \\
        paths.cache_dir=/work/cache-bf16proxy hydra.run.dir=/work/runs/perf/bf16proxy/fused

On a CPU with bfloat16 instructions ``embedder.dtype=bfloat16`` runs oneDNN's bfloat16 products
(bfloat16 operands, float32 sums, bfloat16 results). Where the CPU lacks them the option is
refused, and PyTorch's emulated bfloat16 kernels (what ``torch.matmul`` does with bfloat16 tensors
here) run at a fraction of float32's speed, too slow for LoCoMo-10's ~60,000 texts on 2 shared
cores. This stand-in computes the same arithmetic in float32: the weights rounded to bfloat16
once, and the output of every leaf module (linear maps, embeddings, layer norms, GELU) and of
each attention block rounded to bfloat16, as are the residual sums entering each layer norm. A
product of two bfloat16 numbers is exact in float32, so a linear map here is a bfloat16 product
with float32 sums, differing from oneDNN's only in the order of the sums.

``validate`` embeds LoCoMo turns and a few 256-token texts three ways: float32, PyTorch's own
bfloat16 (the model loaded in bfloat16, the capability check told the CPU has it) and this
stand-in, and prints each one's texts per CPU-second and how close each pair is (cosines,
largest difference): two bfloat16 implementations differ from each other by about as much as
either differs from float32 (each rounds differently), so the stand-in measures the size of
bfloat16's effect on recall, not the question-by-question result of any one implementation.

``run`` runs ``python -m synapse_pt.run`` with the stand-in in place of the bfloat16 model and
the capability check told the CPU has bfloat16: pass ``embedder.dtype=bfloat16`` and a cache
folder of its own (``paths.cache_dir``). The vectors are cached under the bfloat16 identity with
``|proxy=float32-rounded`` added, so they are never served as real bfloat16 ones nor as float32
ones.
"""

from __future__ import annotations

import argparse
import os
import random
import runpy
import statistics
import sys
import time

import torch

PROXY_TAG = "|proxy=float32-rounded"


def to_bf16(x: torch.Tensor) -> torch.Tensor:
    """``x`` rounded to the nearest bfloat16 (ties to even), kept in its own dtype."""
    return x.to(torch.bfloat16).to(x.dtype)


def _round_output(_module, _inputs, output):
    if isinstance(output, torch.Tensor):
        return to_bf16(output)
    if isinstance(output, tuple) and output and isinstance(output[0], torch.Tensor):
        return (to_bf16(output[0]), *output[1:])
    return output


def _round_inputs(_module, inputs):
    return tuple(to_bf16(x) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                 for x in inputs)


def bf16_stand_in(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` (float32) turned into the stand-in, in place: weights rounded to bfloat16, every
    leaf module's and attention block's output rounded, layer norms' inputs rounded."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(to_bf16(p))
    for name, module in model.named_modules():
        leaf = not list(module.children())
        if leaf or name.endswith("attention.self"):
            module.register_forward_hook(_round_output)
        if isinstance(module, torch.nn.LayerNorm):
            module.register_forward_pre_hook(_round_inputs)
    return model


def install() -> None:
    """Make ``HFEmbedder(dtype="bfloat16")`` the stand-in in this process."""
    from synapse_pt.models import embedder as E

    E.cpu_features = lambda *args: ("told it has bfloat16 (bf16_proxy.py)",
                                    frozenset({"avx512_bf16"}))
    init, load = E.HFEmbedder.__init__, E.HFEmbedder._load

    def proxy_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if self.dtype == "bfloat16":
            self.identity += PROXY_TAG

    def proxy_load(self):
        if self.dtype != "bfloat16":
            return load(self)
        self._torch_dtype = torch.float32
        try:
            load(self)
        finally:
            self._torch_dtype = torch.bfloat16
        bf16_stand_in(self._model)
        return None

    E.HFEmbedder.__init__, E.HFEmbedder._load = proxy_init, proxy_load


def _cosines(a: torch.Tensor, b: torch.Tensor) -> str:
    cos = (a * b).sum(dim=1)
    return (f"cosine min {float(cos.min()):.6f}, median {statistics.median(cos.tolist()):.6f}; "
            f"largest |difference| {float((a - b).abs().max()):.2e}; rows bit-equal "
            f"{int((a == b).all(dim=1).sum())}/{len(a)}")


def validate(n: int, data: str) -> None:
    from synapse_pt.data.locomo import load_locomo
    from synapse_pt.models import embedder as E

    dataset = load_locomo(data)
    turns = list(dict.fromkeys(t.text for c in dataset.conversations for s in c.sessions
                               for t in s.turns))
    random.Random(0).shuffle(turns)
    texts = {"turns": turns[:n], "256-token texts": [" ".join(turns[i:i + 12])
                                                     for i in range(0, 12 * 8, 12)]}
    E.cpu_features = lambda *args: ("told it has bfloat16", frozenset({"avx512_bf16"}))
    f32, torch_bf16 = E.HFEmbedder(), E.HFEmbedder(dtype="bfloat16")
    f32._load()
    torch_bf16._load()  # loaded before the stand-in is installed: PyTorch's bfloat16 model
    assert next(torch_bf16._model.parameters()).dtype == torch.bfloat16
    install()
    proxy = E.HFEmbedder(dtype="bfloat16")
    proxy._load()
    assert next(proxy._model.parameters()).dtype == torch.float32
    for name, sample in texts.items():
        v = {}
        print(f"{name} ({len(sample)}):")
        for label, enc in (("float32", f32), ("torch bfloat16", torch_bf16),
                           ("stand-in", proxy)):
            cpu = time.process_time()
            v[label] = enc._embed(sample)
            print(f"  {label:14s}: {len(sample) / (time.process_time() - cpu):7.2f} texts per "
                  f"CPU-second", flush=True)
        for a, b in (("stand-in", "torch bfloat16"), ("float32", "torch bfloat16"),
                     ("float32", "stand-in")):
            print(f"  {a:8s} vs {b:14s}: {_cosines(v[a], v[b])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("validate", help="the stand-in against PyTorch's own bfloat16")
    check.add_argument("--texts", type=int, default=300)
    check.add_argument("--data", default=os.environ.get("SYNAPSE_DATA",
                                                        "../shared/data/locomo10.json"))
    run = sub.add_parser("run", help="python -m synapse_pt.run with the stand-in")
    run.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.command == "validate":
        validate(args.texts, args.data)
        return
    if "embedder.dtype=bfloat16" not in args.overrides:
        parser.error("run: pass embedder.dtype=bfloat16 (and a paths.cache_dir of its own)")
    install()
    sys.argv = ["synapse_pt.run", *args.overrides]
    runpy.run_module("synapse_pt.run", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
