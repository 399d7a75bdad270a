"""``HFEmbedder(runtime="onnx")``: the bundled all-MiniLM-L6-v2 exported once and run by ONNX
Runtime. The reference is the same class's PyTorch forward pass (itself checked against
sentence-transformers in test_hf_embedder.py); agreement is to float32 rounding, not bit for bit."""

from __future__ import annotations

import pytest
import torch
from sample_texts import TEXTS  # tests/ is on sys.path (rootdir conftest)

from synapse_pt.data import load_locomo, sample_path
from synapse_pt.models.embedder import HFEmbedder

pytestmark = pytest.mark.slow

#: the largest |onnx - torch| allowed in a unit vector's coordinate (measured: 2.5e-7 on 400
#: LoCoMo turns, experiments/bench_ingestion.md)
TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    conv = load_locomo(sample_path()).conversations[0]
    turns = [t.text for t in conv.turns()][:40]
    return [*TEXTS, *turns, " ".join(turns)]  # the last one is past 256 tokens


@pytest.mark.parametrize("long_text", ["truncate", "windows"])
def test_vectors_match_torch_within_tolerance(onnx_dir, texts, long_text):
    reference = HFEmbedder(long_text=long_text).encode(texts)
    onnx = HFEmbedder(long_text=long_text, runtime="onnx", onnx_dir=str(onnx_dir))
    got = onnx.encode(texts)
    assert got.shape == reference.shape and got.dtype == torch.float32
    assert (got - reference).abs().max().item() < TOLERANCE
    assert torch.allclose(got.norm(dim=1), torch.ones(len(texts)), atol=1e-5)
    # and not merely the torch vectors again: another runtime rounds differently somewhere
    assert not torch.equal(got, reference)


def test_a_vector_does_not_depend_on_its_batch(onnx_dir, texts):
    embedder = HFEmbedder(runtime="onnx", onnx_dir=str(onnx_dir))
    together = embedder.encode(texts)
    alone = torch.cat([embedder.encode([t]) for t in reversed(texts)]).flip(0)
    assert torch.equal(together, alone)


def test_exported_once_and_cached_apart_from_torch(tmp_path, texts):
    cache, graphs = tmp_path / "embeddings", tmp_path / "onnx"
    torch_vectors = HFEmbedder(cache_dir=str(cache)).encode(texts[:5])
    first = HFEmbedder(cache_dir=str(cache), runtime="onnx", onnx_dir=str(graphs))
    onnx_vectors = first.encode(texts[:5])
    (graph,) = graphs.glob("*.onnx")
    assert graph.name.startswith(first.weights.replace("@", "-"))
    stamp = graph.stat().st_mtime_ns
    again = HFEmbedder(cache_dir=str(cache), runtime="onnx", onnx_dir=str(graphs))
    assert torch.equal(again.encode(texts[:5]), onnx_vectors)  # from the cache
    assert torch.equal(again.encode(texts[5:8]), first._embed(texts[5:8]))  # a fresh forward
    assert graph.stat().st_mtime_ns == stamp  # loaded, not exported again
    assert first.identity == HFEmbedder().identity + "|onnx"
    assert first.name == HFEmbedder().name + "+onnx"  # the records tell the runtimes apart
    # the torch embedder on the same cache still gets its own vectors back
    assert torch.equal(HFEmbedder(cache_dir=str(cache)).encode(texts[:5]), torch_vectors)


def test_bad_runtime_settings_are_named():
    with pytest.raises(ValueError, match="runtime must be one of"):
        HFEmbedder(runtime="tensorflow")
    with pytest.raises(ValueError, match="runtime=onnx runs float32 on the CPU"):
        HFEmbedder(runtime="onnx", onnx_dir="x", device="cuda", dtype="float16")
    with pytest.raises(ValueError, match="needs onnx_dir"):
        HFEmbedder(runtime="onnx")
