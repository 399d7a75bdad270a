"""A disk cache of values derived from texts: token counts, analyser tokens, sentence splits.

SQLite (WAL), JSON values keyed by sha256(function identity, text), like the embedding cache. A
function's identity names it and the library versions behind it (``"sentences/punkt/nltk=3.9.1"``),
so a changed tokenizer or stemmer gets new keys and a stale value is never served. A warm run then
needs neither the libraries (nltk, scikit-learn, transformers take seconds to import) nor the work.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

from .embedding_cache import embedding_key
from .sqlite_store import open_wal

__all__ = ["TextValueCache", "cached_map", "library_versions"]

_SCHEMA = "CREATE TABLE IF NOT EXISTS derived (key TEXT PRIMARY KEY, value TEXT)"
_CHUNK = 500  # keys per SELECT ... IN (...)


def library_versions(*packages: str) -> str:
    """``"nltk=3.9.1,scikit-learn=1.5.2"``: the installed versions, for a function's identity."""
    return ",".join(f"{p}={version(p)}" for p in packages)


class TextValueCache:
    """JSON-serialisable values of deterministic functions of a text, shared by processes.

    Args:
        path: the SQLite file (its folder is created). ``hits`` and ``misses`` count the distinct
            texts looked up by :meth:`map` in this process.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._conn = open_wal(self.path, _SCHEMA)

    def map(self, identity: str, texts: Sequence[str],
            compute: Callable[[list[str]], Sequence[Any]]) -> list[Any]:
        """``compute(texts)`` through the cache: each distinct text is looked up once, the misses
        are computed in one call of ``compute`` (which returns one value per text, in order) and
        stored, and the values come back in the order of ``texts``."""
        unique = list(dict.fromkeys(texts))
        keys = {t: embedding_key(identity, t) for t in unique}
        found: dict[str, Any] = {}
        wanted = list(keys.values())
        with self._lock:
            for start in range(0, len(wanted), _CHUNK):
                chunk = wanted[start:start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                for key, value in self._conn.execute(
                        f"SELECT key, value FROM derived WHERE key IN ({marks})", chunk):
                    found[key] = json.loads(value)
        missing = [t for t in unique if keys[t] not in found]
        if missing:
            values = list(compute(missing))
            if len(values) != len(missing):
                raise ValueError(f"{identity}: compute returned {len(values)} values for "
                                 f"{len(missing)} texts")
            rows = [(keys[t], json.dumps(v)) for t, v in zip(missing, values, strict=True)]
            with self._lock:
                self._conn.executemany(
                    "INSERT OR REPLACE INTO derived (key, value) VALUES (?, ?)", rows)
                self._conn.commit()
            found.update((keys[t], v) for t, v in zip(missing, values, strict=True))
        self.hits += len(unique) - len(missing)
        self.misses += len(missing)
        return [found[keys[t]] for t in texts]

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM derived").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def cached_map(cache: TextValueCache | None, identity: str, texts: Sequence[str],
               compute: Callable[[list[str]], Sequence[Any]]) -> list[Any]:
    """:meth:`TextValueCache.map`, or ``compute`` on the distinct texts when ``cache`` is None."""
    if cache is not None:
        return cache.map(identity, texts, compute)
    unique = list(dict.fromkeys(texts))
    values = dict(zip(unique, compute(unique), strict=True))
    return [values[t] for t in texts]
