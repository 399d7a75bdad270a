"""The embedding cache: float32 vectors keyed by :func:`~synapse_pt.cache.store.content_key`
(model identity, text), in the table ``embeddings (key, dim, vec)``.

Reruns and other processes reuse every embedding already computed by the same model identity; a
different model, truncation length or dtype gives different keys, so stale vectors are never served.
A vector read back is whole and finite, or refused (:class:`CorruptVectorError`, one line naming
the cache file and the key): a NaN would score no similarity and give recall 0 silently.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .sqlite import CorruptCacheError
from .store import KeyValueStore, Table

CACHE_FILE = "embeddings.sqlite"  # the file's name inside an embedder's ``cache_dir``

EMBEDDINGS = Table(
    "embeddings",
    "CREATE TABLE IF NOT EXISTS embeddings (key TEXT PRIMARY KEY, dim INTEGER, vec BLOB)",
    written=("dim", "vec"))


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


class EmbeddingCache(KeyValueStore[torch.Tensor]):
    """Float32 embedding vectors on disk (1-D tensors), shared by threads and processes: a row is
    ``(key, dim, vec)``, ``vec`` the vector's float32 bytes (native byte order) and ``dim`` its
    length. :meth:`get_many` refuses a vector of another length than its ``dim``, or with a value
    that is not finite (:class:`CorruptVectorError`, naming the file and the key);
    :meth:`put_many` replaces an existing key."""

    table = EMBEDDINGS

    def encode(self, key: str, value: torch.Tensor) -> tuple[Any, ...]:
        arr = value.detach().to("cpu", torch.float32).contiguous().numpy()
        if arr.ndim != 1:
            raise ValueError(f"EmbeddingCache.put_many: vector for {key} has shape "
                             f"{tuple(arr.shape)}, expected 1-D")
        return int(arr.shape[0]), arr.tobytes()

    def decode(self, key: str, row: tuple[Any, ...]) -> torch.Tensor:
        dim, blob = row
        vec = np.frombuffer(blob, dtype=np.float32)
        if vec.shape[0] != dim:
            raise CorruptVectorError(self.path, key, f"has {vec.shape[0]} values, its row says "
                                     f"dim={dim}")
        finite = np.isfinite(vec)
        if not finite.all():
            raise CorruptVectorError(self.path, key, f"holds {int((~finite).sum())} of {dim} "
                                     "values that are not finite (NaN or infinite)")
        return torch.from_numpy(vec.copy())
