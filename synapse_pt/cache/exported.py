"""An exported embedding cache, and the text encoder with no model that serves it.

For a machine that has the cache but not the weights (a GPU node without the model files or a
network, a reviewer rerunning a study from its exported cache). ``scripts/device_inputs.py``
exports the rows a set of runs embeds into a folder with ``encoder.json`` (the exporting
encoder's identity, name and width); :class:`CacheOnlyEncoder` serves them under the same name,
so its runs record the same embedder. A text that is not in the cache is an error naming it:
nothing is computed and nothing falls back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch

from .store import content_key
from .vectors import CACHE_FILE, EmbeddingCache, stack_rows

__all__ = ["ENCODER_FILE", "CacheOnlyEncoder", "write_encoder_file"]

ENCODER_FILE = "encoder.json"


def write_encoder_file(folder: str | Path, *, identity: str, name: str, dim: int) -> Path:
    """``folder/encoder.json``: what :class:`CacheOnlyEncoder` needs to serve the cache there."""
    path = Path(folder) / ENCODER_FILE
    path.write_text(json.dumps({"identity": identity, "name": name, "dim": dim}, indent=2))
    return path


class CacheOnlyEncoder:
    """A :class:`~synapse_pt.models.base.TextEncoder` that only reads an embedding cache.

    Args:
        cache_dir: a folder holding ``embeddings.sqlite`` and ``encoder.json`` (written by
            :func:`write_encoder_file`).
    """

    def __init__(self, cache_dir: str | Path) -> None:
        folder = Path(cache_dir)
        spec_path = folder / ENCODER_FILE
        if not spec_path.is_file():
            raise FileNotFoundError(f"{spec_path}: missing; embedder=cached needs a cache folder "
                                    "exported with its encoder (scripts/device_inputs.py)")
        spec = json.loads(spec_path.read_text())
        missing = sorted({"identity", "name", "dim"} - set(spec))
        if missing:
            raise ValueError(f"{spec_path}: no {missing}")
        if not (folder / CACHE_FILE).is_file():
            raise FileNotFoundError(f"{folder / CACHE_FILE}: missing (the exported vectors)")
        self.identity: str = spec["identity"]
        self.name: str = spec["name"]
        self.dim: int = int(spec["dim"])
        self.cache = EmbeddingCache(folder / CACHE_FILE)

    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        """The cached vectors of ``texts`` (float32 ``[len(texts), dim]``); a text not in the
        cache raises ``KeyError`` naming how many are missing and the first of them."""
        texts = list(texts)
        if not texts:
            return torch.empty(0, self.dim, dtype=torch.float32)
        keys = [content_key(self.identity, t) for t in texts]
        found = self.cache.get_many(keys)
        absent = [t for t, k in zip(texts, keys, strict=True) if k not in found]
        if absent:
            raise KeyError(f"{self.cache.path}: {len(absent)} of {len(texts)} texts are not in "
                           f"the exported cache of {self.name} (first: {absent[0][:80]!r}); "
                           "export them with scripts/device_inputs.py for this configuration")
        return stack_rows(found, keys, self.dim, f"{self.cache.path} (dim from encoder.json)")

    def __repr__(self) -> str:
        return f"CacheOnlyEncoder(name={self.name!r}, cache={str(self.cache.path)!r})"
