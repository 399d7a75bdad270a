"""Serving vectors from an exported embedding cache without a model: the export keeps exactly the
recorded rows, the cache-only encoder returns the exporting encoder's vectors under its name, and a
text that was not exported is an error, never a computed or default vector."""

from __future__ import annotations

import pytest
import torch

from synapse_pt.cache.exported import CacheOnlyEncoder, write_encoder_file
from synapse_pt.cache.store import content_key
from synapse_pt.cache.vectors import CACHE_FILE, EmbeddingCache
from synapse_pt.models.hashing import HashingEncoder

TEXTS = ["Caroline went to a support group.", "Melanie paints sunrises.", "", "ok"]


def _source(tmp_path):
    """A cache holding the hashing encoder's vectors of TEXTS under an identity."""
    encoder = HashingEncoder(dim=16)
    cache = EmbeddingCache(tmp_path / "source" / CACHE_FILE)
    vectors = encoder.encode(TEXTS)
    cache.put_many((content_key("hash16|v1", t), v) for t, v in zip(TEXTS, vectors,
                                                                      strict=True))
    return cache, vectors


def test_export_copies_only_the_recorded_rows_and_the_encoder_serves_them(tmp_path) -> None:
    cache, vectors = _source(tmp_path)
    cache.seen = set()
    cache.get_many([content_key("hash16|v1", t) for t in TEXTS[:2]])  # what a run looked up
    assert len(cache.seen) == 2
    folder = tmp_path / "export"
    folder.mkdir()
    assert cache.export(cache.seen, folder / CACHE_FILE) == 2
    write_encoder_file(folder, identity="hash16|v1", name="hashing-bow-16", dim=16)

    served = CacheOnlyEncoder(folder)
    assert served.name == "hashing-bow-16" and served.dim == 16
    assert torch.equal(served.encode(TEXTS[:2]), vectors[:2])
    assert torch.equal(served.encode([TEXTS[1], TEXTS[0], TEXTS[1]]),
                       vectors[[1, 0, 1]])
    assert served.encode([]).shape == (0, 16)
    with pytest.raises(KeyError, match=r"1 of 2 texts are not in the exported cache of "
                                       r"hashing-bow-16 \(first: ''\)"):
        served.encode([TEXTS[0], TEXTS[2]])


def test_export_refuses_unknown_keys_and_an_existing_file(tmp_path) -> None:
    cache, _ = _source(tmp_path)
    with pytest.raises(KeyError, match="1 of 2 keys to export are not cached"):
        cache.export([content_key("hash16|v1", TEXTS[0]), "0" * 64], tmp_path / "a.sqlite")
    cache.export([content_key("hash16|v1", TEXTS[0])], tmp_path / "b.sqlite")
    with pytest.raises(FileExistsError, match="b.sqlite: exists"):
        cache.export([content_key("hash16|v1", TEXTS[0])], tmp_path / "b.sqlite")


def test_a_folder_without_its_encoder_file_or_vectors_is_named(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="encoder.json: missing; embedder=cached"):
        CacheOnlyEncoder(tmp_path)
    write_encoder_file(tmp_path, identity="x", name="y", dim=4)
    with pytest.raises(FileNotFoundError, match="embeddings.sqlite: missing"):
        CacheOnlyEncoder(tmp_path)


class _Recording:
    """The hashing encoder, storing every vector it makes in a cache (as HFEmbedder does)."""

    def __init__(self, cache: EmbeddingCache) -> None:
        self.inner, self.cache = HashingEncoder(dim=32), cache
        self.name, self.dim = self.inner.name, 32

    def encode(self, texts):
        out = self.inner.encode(texts)
        self.cache.put_many((content_key("hash32|v1", t), v)
                            for t, v in zip(texts, out, strict=True))
        return out


def test_a_memory_on_the_exported_cache_retrieves_exactly_as_on_the_model(tmp_path) -> None:
    """``embedder=cached`` (its config instantiated as a run does) in a memory over the shipped
    sample: the same items and scores as the encoder that filled the cache."""
    import hydra

    from synapse_pt.data.locomo import load_locomo
    from synapse_pt.data.source import sample_path
    from synapse_pt.eval.qa.pipeline import blind
    from synapse_pt.memory.baselines import VectorRAG
    from tests.test_configs import make_cfg

    dataset = load_locomo(sample_path())
    questions = [blind(q) for q in dataset.questions()]
    cache = EmbeddingCache(tmp_path / "fill.sqlite")
    cache.seen = set()
    original = VectorRAG(_Recording(cache), k=5)
    original.ingest(dataset.conversations)
    expected = original.retrieve(questions)
    assert sum(len(row) for row in expected.items) == 5 * len(questions)
    folder = tmp_path / "cache" / "embeddings"
    folder.mkdir(parents=True)
    cache.export(cache.seen, folder / CACHE_FILE)
    write_encoder_file(folder, identity="hash32|v1", name="hashing-bow-32", dim=32)

    cfg = make_cfg("embedder=cached", f"paths.cache_dir={tmp_path / 'cache'}")
    served = hydra.utils.instantiate(cfg.embedder, _convert_="all")
    assert isinstance(served, CacheOnlyEncoder) and served.name == "hashing-bow-32"
    again = VectorRAG(served, k=5)
    again.ingest(dataset.conversations)
    got = again.retrieve(questions)
    assert [[(i.node_id, i.score) for i in row] for row in got.items] == \
        [[(i.node_id, i.score) for i in row] for row in expected.items]
