"""EmbeddingCache and mean pooling, without a model."""

from __future__ import annotations

import pytest
import torch

from synapse_pt.models.embedder import mean_pool
from synapse_pt.models.embedding_cache import EmbeddingCache, embedding_key


def test_put_get_counts_and_reopen(tmp_path):
    cache = EmbeddingCache(tmp_path / "e.sqlite")
    k1, k2, k3 = (embedding_key("m", t) for t in ("a", "b", "c"))
    cache.put_many([(k1, torch.tensor([1.0, 2.0])), (k2, torch.tensor([3.0, 4.0]))])
    found = cache.get_many([k1, k3, k2, k1])
    assert set(found) == {k1, k2}
    assert torch.equal(found[k2], torch.tensor([3.0, 4.0])) and found[k2].dtype == torch.float32
    assert (cache.hits, cache.misses) == (2, 1)  # k1 asked twice counts once
    cache.close()
    again = EmbeddingCache(tmp_path / "e.sqlite")
    assert len(again) == 2 and torch.equal(again.get_many([k1])[k1], torch.tensor([1.0, 2.0]))


def test_key_depends_on_model_and_text():
    assert embedding_key("m", "ab") != embedding_key("m2", "ab")
    assert embedding_key("ma", "b") != embedding_key("m", "ab")
    assert embedding_key("m", "ab") == embedding_key("m", "ab")


def test_put_rejects_matrices(tmp_path):
    with pytest.raises(ValueError, match="expected 1-D"):
        EmbeddingCache(tmp_path / "e.sqlite").put_many([("k", torch.zeros(2, 2))])


def test_many_keys_cross_the_chunk_size(tmp_path):
    cache = EmbeddingCache(tmp_path / "e.sqlite")
    items = [(embedding_key("m", str(i)), torch.full((3,), float(i))) for i in range(1200)]
    cache.put_many(items)
    found = cache.get_many([k for k, _ in items])
    assert len(found) == 1200 and found[items[1100][0]][0].item() == 1100.0


def test_mean_pool_ignores_padding():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]],
                           [[5.0, 6.0], [0.0, 0.0], [0.0, 0.0]]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert torch.equal(mean_pool(hidden, mask), torch.tensor([[2.0, 3.0], [5.0, 6.0]]))
