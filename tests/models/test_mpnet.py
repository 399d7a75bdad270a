"""all-mpnet-base-v2 as assembled by ``make mpnet`` (opt-in, a real 438 MB model: marked slow and
skipped where it is not assembled in the cache, ``$SYNAPSE_CACHE/models`` or ``.cache/models``)."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from sample_texts import TEXTS  # tests/ is on sys.path (rootdir conftest)

from synapse_pt.models.assemble import MPNET, default_models_dir, is_assembled
from synapse_pt.models.embedder import HFEmbedder

FOLDER = default_models_dir() / MPNET.name

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not is_assembled(FOLDER, MPNET),
                       reason=f"all-mpnet-base-v2 not assembled at {FOLDER} (`make mpnet`)"),
]


@pytest.fixture(scope="module")
def embedder() -> HFEmbedder:
    return HFEmbedder(str(FOLDER), max_length=384)


def test_768_d_unit_norm_and_named(embedder):
    assert embedder.dim == 768 and embedder.name.startswith("all-mpnet-base-v2@")
    out = embedder.encode(TEXTS)
    assert out.shape == (len(TEXTS), 768) and out.dtype == torch.float32
    assert torch.allclose(out.norm(dim=1), torch.ones(len(TEXTS)), atol=1e-5)
    sim = out[:4] @ out[:4].T
    assert sim[0, 2] > sim[0, 1] + 0.3 and sim[0, 2] > sim[0, 3] + 0.3


@pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None,
                    reason="sentence-transformers not installed")
def test_matches_sentence_transformers(embedder):
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(FOLDER), device="cpu")
    assert reference.max_seq_length == embedder.max_length == 384
    long_text = "word " * 500  # past the 384-token truncation: both must cut at the same place
    texts = [*TEXTS, long_text]
    expected = torch.as_tensor(reference.encode(texts, convert_to_numpy=True))
    ours = embedder.encode(texts)
    gap = (ours - expected).abs().max().item()
    print(f"max |HFEmbedder - sentence-transformers| = {gap:.2e} over {len(texts)} texts")
    assert gap <= 1e-5
