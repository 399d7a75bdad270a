"""``embedder.dtype``: float32 the default, bfloat16 on CPUs with bfloat16 instructions (issue 62)
and a one-line refusal on the others, its vectors batch-invariant and cached apart."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from synapse_pt.common.errors import ConfigError
from synapse_pt.models import embedder as embedder_module
from synapse_pt.models.embedder import HFEmbedder, cpu_features


def cpu_with(monkeypatch, *flags: str) -> None:
    """Pretend the CPU is ``a test CPU`` with these feature flags."""
    monkeypatch.setattr(embedder_module, "cpu_features",
                        lambda *args: ("a test CPU", frozenset(flags)))


def test_cpu_features_read_x86_flags_and_arm_features(tmp_path: Path) -> None:
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu avx2 "
                   "avx512f avx512_bf16\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 9R14\n"
                   "flags\t\t: fpu avx2\n")
    assert cpu_features(x86) == ("AMD EPYC 9R14", frozenset({"fpu", "avx2", "avx512f",
                                                             "avx512_bf16"}))
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\nCPU part\t: 0xd4f\n")
    assert cpu_features(arm) == ("unknown", frozenset({"fp", "asimd", "bf16", "i8mm"}))
    assert cpu_features(tmp_path / "absent") == ("unknown", frozenset())


def test_bfloat16_on_a_cpu_without_bf16_instructions_is_refused_in_one_line(monkeypatch):
    cpu_with(monkeypatch, "avx2", "fma", "avx512f")
    with pytest.raises(ConfigError) as info:
        HFEmbedder(dtype="bfloat16")
    assert str(info.value) == (
        "embedder.dtype=bfloat16 on the CPU needs bfloat16 instructions (avx512_bf16, amx_bf16, "
        "bf16), which this CPU (a test CPU) lacks: use embedder.dtype=float32")
    with pytest.raises(ConfigError, match="embedder.dtype=float16 is allowed on CUDA only"):
        HFEmbedder(dtype="float16")  # half precision stays CUDA-only, bf16 CPU or not
    cpu_with(monkeypatch, "avx512_bf16")
    with pytest.raises(ConfigError, match="embedder.dtype=fp16 is allowed on CUDA only"):
        HFEmbedder(dtype="fp16")


@pytest.mark.parametrize("flag", ["avx512_bf16", "amx_bf16", "bf16"])
def test_bfloat16_is_allowed_where_the_cpu_has_it_and_named_in_the_identity(monkeypatch, flag):
    cpu_with(monkeypatch, "avx2", flag)
    f32, bf16 = HFEmbedder(), HFEmbedder(dtype="bfloat16")
    assert f32.dtype == "float32" and bf16.dtype == "bfloat16"
    assert "|float32|" in f32.identity and "|bfloat16|" in bf16.identity
    assert bf16.identity == f32.identity.replace("|float32|", "|bfloat16|")
    assert HFEmbedder(dtype="bf16").identity == bf16.identity  # an alias: the same vectors
    assert bf16.name == f32.name + "+bfloat16"  # records name the weights and the dtype


@pytest.mark.slow
def test_bfloat16_vectors_are_batch_invariant_and_cached_apart(monkeypatch, tmp_path):
    """On a CPU with bfloat16 instructions the real kernels run; elsewhere (flags pretended)
    PyTorch's emulated bfloat16 ones: either way a probe's vector is the same bits alone, third
    of 7 texts and beside other texts on 1 or 2 worker threads (the fixed-shape calls, one
    intra-op thread each, as for float32), differs from float32's in the last bits only
    (cosine > 0.999), and neither is served for the other from one cache folder."""
    from synapse_pt.common import threads

    if not cpu_features()[1] & set(embedder_module.BF16_CPU_FLAGS):
        cpu_with(monkeypatch, "avx512_bf16")
    # small calls: PyTorch's emulated bfloat16 products are slow
    f32 = HFEmbedder(call_tokens=32, cache_dir=str(tmp_path))
    bf16 = HFEmbedder(dtype="bfloat16", call_tokens=32, cache_dir=str(tmp_path))
    probes = ["Caroline went to the LGBTQ support group on Tuesday.", "Did you paint that?"]
    mates = ["I love hiking in the mountains.", "What a lovely day it was.",
             "The cat sat on the mat.", "We should meet again soon.",
             "My sister moved to Boston last year with her two dogs."]
    alone = torch.cat([bf16._embed([p]) for p in probes])
    seven = [*mates[:2], probes[0], *mates[2:5], probes[1]]
    assert torch.equal(bf16._embed(seven)[[2, 6]], alone)
    monkeypatch.setattr(threads, "threads_now", lambda: 2)
    assert torch.equal(bf16._embed([*mates, *probes])[-2:], alone)
    monkeypatch.setattr(threads, "threads_now", lambda: 1)
    assert torch.equal(bf16._embed([*probes, *mates[::-1]])[:2], alone)
    reference = f32.encode(probes)  # into the cache under float32's identity
    got = bf16.encode(probes)
    assert bf16.cache.misses == 2 and torch.equal(got, alone)
    assert not torch.equal(got, reference)
    assert float((got * reference).sum(dim=1).min()) > 0.999
    assert torch.equal(f32.encode(probes), reference) and f32.cache.hits == 2


@pytest.mark.slow
def test_a_locomo_run_with_bfloat16(monkeypatch, tmp_path):
    """SYNAPSE on the shipped LoCoMo sample with the real MiniLM in bfloat16 (the CPU's own
    bfloat16 kernels where it has them, PyTorch's emulated ones elsewhere) and in float32: both
    runs finish; the record names the bfloat16 vectors; the two rankings are the same lists for
    most questions (bfloat16 moves a vector by about 1e-3) and neither run is served the other's
    vectors from the shared cache folder."""
    import pandas as pd
    from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)

    from synapse_pt.commands.run import run

    if not cpu_features()[1] & set(embedder_module.BF16_CPU_FLAGS):
        cpu_with(monkeypatch, "avx512_bf16")
    cache = tmp_path / "cache"
    out = {}
    for dtype in ("float32", "bfloat16"):
        metrics = run(make_cfg("dataset=sample", "experiment=paper_main", "logger=none",
                               "device=cpu", f"embedder.dtype={dtype}",
                               f"paths.cache_dir={cache}", output_dir=str(tmp_path / dtype)))
        out[dtype] = (metrics, pd.read_parquet(tmp_path / dtype / "predictions.parquet"))
    (m32, p32), (m16, p16) = out["float32"], out["bfloat16"]
    assert m16["identity"]["embedder"] == m32["identity"]["embedder"] + "+bfloat16"
    assert len(p16) == len(p32) == m32["identity"]["dataset"]["questions"] > 0
    same = sum(list(a[:10]) == list(b[:10])
               for a, b in zip(p32["retrieved"], p16["retrieved"], strict=True))
    assert same >= 0.7 * len(p32)
    assert not p32["c_ret"].equals(p16["c_ret"])  # scores from other vectors: not the cache's
