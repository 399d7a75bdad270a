"""A corrupt cache file (truncated, or overwritten) is named with its remedy (issue 31, defect 4),
for each of the three SQLite caches: embeddings, derived text values and LLM responses."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from synapse_pt.cache.sqlite import CorruptCacheError
from synapse_pt.cache.texts import TextValueCache
from synapse_pt.cache.vectors import EmbeddingCache
from synapse_pt.models.llm.base import ChatResponse
from synapse_pt.models.llm.cache import ResponseCache

N = 400  # rows: enough pages that a cut file loses table pages, not only its tail
KEYS = [f"key-{i:04d}" for i in range(N)]


def fill_embeddings(path: Path) -> Callable[[], object]:
    cache = EmbeddingCache(path)
    cache.put_many((k, torch.full((64,), float(i))) for i, k in enumerate(KEYS))
    cache.close()
    return lambda: EmbeddingCache(path).get_many(KEYS)


def fill_text(path: Path) -> Callable[[], object]:
    cache = TextValueCache(path)
    texts = [f"text number {i} " * 20 for i in range(N)]
    cache.map("len", texts, lambda ts: [len(t) for t in ts])
    cache.close()
    return lambda: TextValueCache(path).map("len", texts, lambda ts: [len(t) for t in ts])


def fill_responses(path: Path) -> Callable[[], object]:
    cache = ResponseCache(path)
    for k in KEYS:
        cache.put(k, "{}", ChatResponse("an answer " * 30, 10, 3, 0.1, "m"))
    cache.close()
    return lambda: ResponseCache(path).get_many(KEYS)


FILLS = {"embeddings.sqlite": fill_embeddings, "text.sqlite": fill_text,
         "llm_responses.sqlite": fill_responses}


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 5])


def overwrite_header(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[:100] = b"\x00" * 100
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name", list(FILLS))
@pytest.mark.parametrize("damage", [truncate, overwrite_header], ids=["truncated", "header"])
def test_a_corrupt_cache_names_its_file_and_the_remedy(tmp_path: Path, name: str,
                                                        damage: Callable[[Path], None]) -> None:
    path = tmp_path / name
    read_all = FILLS[name](path)
    read_all()  # intact: reads back
    for side in (path.with_name(name + "-wal"), path.with_name(name + "-shm")):
        side.unlink(missing_ok=True)  # closed cleanly: the WAL is checkpointed into the file
    damage(path)
    with pytest.raises(CorruptCacheError) as err:
        read_all()
    text = str(err.value)
    assert text.startswith(f"{path}: this cache file is corrupt (")
    assert f"delete it or move it aside (mv {path} {path}.corrupt)" in text
    assert isinstance(err.value, sqlite3.DatabaseError)  # callers catching SQLite errors still do
    # issue 58: the response cache holds money, not "only the time to recompute it"
    if name == "llm_responses.sqlite":
        assert "it holds money" in text and "only the time" not in text
    else:
        assert "only the time to recompute it is lost" in text
    # the remedy works: moved aside, the cache is rebuilt
    path.rename(path.with_name(name + ".corrupt"))
    FILLS[name](path)
    read_all()
