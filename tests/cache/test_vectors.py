"""EmbeddingCache and mean pooling, without a model."""

from __future__ import annotations

import pytest
import torch

from synapse_pt.cache.store import content_key
from synapse_pt.cache.vectors import EmbeddingCache
from synapse_pt.models.embedder import mean_pool


def test_put_get_counts_and_reopen(tmp_path):
    cache = EmbeddingCache(tmp_path / "e.sqlite")
    k1, k2, k3 = (content_key("m", t) for t in ("a", "b", "c"))
    cache.put_many([(k1, torch.tensor([1.0, 2.0])), (k2, torch.tensor([3.0, 4.0]))])
    found = cache.get_many([k1, k3, k2, k1])
    assert set(found) == {k1, k2}
    assert torch.equal(found[k2], torch.tensor([3.0, 4.0])) and found[k2].dtype == torch.float32
    assert (cache.hits, cache.misses) == (2, 1)  # k1 asked twice counts once
    cache.close()
    again = EmbeddingCache(tmp_path / "e.sqlite")
    assert len(again) == 2 and torch.equal(again.get_many([k1])[k1], torch.tensor([1.0, 2.0]))


def test_key_depends_on_model_and_text():
    assert content_key("m", "ab") != content_key("m2", "ab")
    assert content_key("ma", "b") != content_key("m", "ab")
    assert content_key("m", "ab") == content_key("m", "ab")


def test_put_rejects_matrices_and_writes_nothing_of_the_batch(tmp_path):
    cache = EmbeddingCache(tmp_path / "e.sqlite")
    with pytest.raises(ValueError, match="vector for k has shape \\(2, 2\\), expected 1-D"):
        cache.put_many([("j", torch.zeros(2)), ("k", torch.zeros(2, 2))])
    assert len(cache) == 0


def test_many_keys_cross_the_chunk_size(tmp_path):
    cache = EmbeddingCache(tmp_path / "e.sqlite")
    items = [(content_key("m", str(i)), torch.full((3,), float(i))) for i in range(1200)]
    cache.put_many(items)
    found = cache.get_many([k for k, _ in items])
    assert len(found) == 1200 and found[items[1100][0]][0].item() == 1100.0


def test_mean_pool_ignores_padding():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]],
                           [[5.0, 6.0], [0.0, 0.0], [0.0, 0.0]]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert torch.equal(mean_pool(hidden, mask), torch.tensor([[2.0, 3.0], [5.0, 6.0]]))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_vector_that_is_not_finite_is_refused_naming_the_cache_and_key(tmp_path, bad):
    """Issue 58: a NaN (or infinite) value read back is a corrupt cache, one line naming the file
    and the key; on main it was served, and every similarity with it was NaN (recall 0)."""
    from synapse_pt.cache.sqlite import CorruptCacheError
    from synapse_pt.cache.vectors import CorruptVectorError

    path = tmp_path / "e.sqlite"
    cache = EmbeddingCache(path)
    good, broken = content_key("m", "a"), content_key("m", "b")
    cache.put_many([(good, torch.tensor([1.0, 2.0, 3.0])), (broken, torch.tensor([1.0, bad, 0.0]))])
    assert torch.equal(cache.get_many([good])[good], torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(CorruptVectorError) as err:
        cache.get_many([good, broken])
    assert isinstance(err.value, CorruptCacheError)  # a user-facing error: one line in the CLI
    assert str(err.value).startswith(
        f"{path}: embedding {broken} holds 1 of 3 values that are not finite (NaN or infinite): "
        "the cache is corrupt; delete it or move it aside")
    assert "\n" not in str(err.value)


def test_a_vector_of_another_length_than_its_row_is_refused(tmp_path):
    import sqlite3

    from synapse_pt.cache.vectors import CorruptVectorError

    path = tmp_path / "e.sqlite"
    cache = EmbeddingCache(path)
    key = content_key("m", "a")
    cache.put_many([(key, torch.tensor([1.0, 2.0]))])
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE embeddings SET dim = 3")
    with pytest.raises(CorruptVectorError, match=f"embedding {key} has 2 values, its row says "
                       "dim=3: the cache is corrupt"):
        cache.get_many([key])
