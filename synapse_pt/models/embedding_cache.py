"""A disk cache of text embeddings: SQLite (WAL), float32 blobs keyed by sha256(model, text).

Reruns and other processes reuse every embedding already computed by the same model identity; a
different model, truncation length or dtype gives different keys, so stale vectors are never served.
A vector read back is whole and finite, or refused (:class:`CorruptVectorError`, one line naming
the cache file and the key): a NaN would score no similarity and give recall 0 silently.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

from .sqlite_store import CorruptCacheError, open_wal

CACHE_FILE = "embeddings.sqlite"  # the file's name inside an embedder's ``cache_dir``
_SCHEMA = "CREATE TABLE IF NOT EXISTS embeddings (key TEXT PRIMARY KEY, dim INTEGER, vec BLOB)"
_CHUNK = 500  # keys per SELECT ... IN (...): well under SQLite's variable limit


class CorruptVectorError(CorruptCacheError):
    """A vector of the embedding cache that cannot be an embedding: another length than its row
    says, or values that are not finite (NaN, infinite)."""

    def __init__(self, path: str | Path, key: str, problem: str) -> None:
        self.path = str(path)
        self.key = key
        sqlite3.DatabaseError.__init__(
            self, f"{path}: embedding {key} {problem}: the cache is corrupt; delete it or move it "
            f"aside (mv {path} {path}.corrupt) and rerun: its vectors are computed again (only "
            "the time to recompute them is lost)")


def embedding_key(model_identity: str, text: str) -> str:
    """sha256 of the model identity and the text, separated by a NUL byte (neither contains one
    in practice; the separator keeps ``("ab", "c")`` and ``("a", "bc")`` apart)."""
    return hashlib.sha256(f"{model_identity}\x00{text}".encode()).hexdigest()


def stack_rows(found: dict[str, torch.Tensor], keys: Sequence[str], dim: int,
               source: str) -> torch.Tensor:
    """``[len(keys), dim]`` float32: ``found[key]`` for each key, in order; a vector of another
    width is an error naming its row and ``source`` (the encoder or cache it came from)."""
    out = torch.empty(len(keys), dim, dtype=torch.float32)
    for row, key in enumerate(keys):
        vec = found[key]
        if vec.shape[0] != dim:
            raise ValueError(f"{source}: vector for texts[{row}] has {vec.shape[0]} values, "
                             f"expected dim={dim}")
        out[row] = vec
    return out


class EmbeddingCache:
    """Float32 embedding vectors on disk, shared by threads and processes.

    Args:
        path: the SQLite file (its folder is created). Counters ``hits`` and ``misses`` count keys
            looked up by :meth:`get_many` in this process.

    Attributes:
        seen: ``None``, or a set that collects every key looked up or stored (set it to ``set()``
            to record what a run embeds, then :meth:`export` those rows).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.hits = 0
        self.misses = 0
        self.seen: set[str] | None = None
        self._lock = threading.Lock()
        self._conn = open_wal(self.path, _SCHEMA)

    def get_many(self, keys: Sequence[str]) -> dict[str, torch.Tensor]:
        """The cached vectors among ``keys`` (float32, 1-D); absent keys are left out. A vector of
        another length than its row's ``dim``, or with a value that is not finite, is a
        :class:`CorruptVectorError` naming the file and the key."""
        wanted = list(dict.fromkeys(keys))
        if self.seen is not None:
            self.seen.update(wanted)
        found: dict[str, torch.Tensor] = {}
        with self._lock:
            for start in range(0, len(wanted), _CHUNK):
                chunk = wanted[start:start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = self._conn.execute(
                    f"SELECT key, dim, vec FROM embeddings WHERE key IN ({marks})", chunk)
                for key, dim, blob in rows:
                    vec = np.frombuffer(blob, dtype=np.float32)
                    if vec.shape[0] != dim:
                        raise CorruptVectorError(self.path, key, f"has {vec.shape[0]} values, "
                                                 f"its row says dim={dim}")
                    finite = np.isfinite(vec)
                    if not finite.all():
                        raise CorruptVectorError(
                            self.path, key, f"holds {int((~finite).sum())} of {dim} values that "
                            "are not finite (NaN or infinite)")
                    found[key] = torch.from_numpy(vec.copy())
            self.hits += len(found)
            self.misses += len(wanted) - len(found)
        return found

    def put_many(self, items: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Store ``(key, vector)`` pairs in one transaction (existing keys are overwritten)."""
        rows = []
        for key, vec in items:
            arr = vec.detach().to("cpu", torch.float32).contiguous().numpy()
            if arr.ndim != 1:
                raise ValueError(f"EmbeddingCache.put_many: vector for {key} has shape "
                                 f"{tuple(arr.shape)}, expected 1-D")
            rows.append((key, int(arr.shape[0]), arr.tobytes()))
        if self.seen is not None:
            self.seen.update(key for key, _, _ in rows)
        with self._lock:
            self._conn.executemany(
                "INSERT OR REPLACE INTO embeddings (key, dim, vec) VALUES (?, ?, ?)", rows)
            self._conn.commit()

    def export(self, keys: Iterable[str], path: str | Path) -> int:
        """Copy the rows of ``keys`` into a new cache file at ``path`` (which must not exist);
        returns the rows written. A key this cache does not hold is an error."""
        path = Path(path)
        if path.exists():
            raise FileExistsError(f"{path}: exists; export writes a new cache file")
        keys = sorted(set(keys))
        rows = []
        with self._lock:
            for start in range(0, len(keys), _CHUNK):
                chunk = keys[start:start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                rows += self._conn.execute(
                    f"SELECT key, dim, vec FROM embeddings WHERE key IN ({marks})",
                    chunk).fetchall()
        if len(rows) != len(keys):
            missing = sorted(set(keys) - {r[0] for r in rows})
            raise KeyError(f"{self.path}: {len(missing)} of {len(keys)} keys to export are not "
                           f"cached (first: {missing[:3]})")
        target = EmbeddingCache(path)
        with target._lock:
            target._conn.executemany(
                "INSERT INTO embeddings (key, dim, vec) VALUES (?, ?, ?)", rows)
            target._conn.commit()
        target.close()
        return len(rows)

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()
