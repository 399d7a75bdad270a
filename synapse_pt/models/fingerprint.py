"""Cheap, stable fingerprints of model files, so caches key on the weights, not on a path."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

_EDGE_BYTES = 1 << 20  # hash the first and last MiB of each weight file plus its size
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
_SNAPSHOT = re.compile(r"snapshots[\\/]([0-9a-f]{40})")


def file_fingerprint(path: Path, digest: hashlib._Hash | None = None) -> str:
    """sha256 over the size, first MiB and last MiB of ``path`` (a full hash of a multi-GB file
    would cost seconds at every start; a changed weight file changes these bytes or the size)."""
    h = digest if digest is not None else hashlib.sha256()
    size = path.stat().st_size
    h.update(f"{path.name}:{size}".encode())
    with path.open("rb") as f:
        h.update(f.read(_EDGE_BYTES))
        if size > 2 * _EDGE_BYTES:
            f.seek(size - _EDGE_BYTES)
            h.update(f.read(_EDGE_BYTES))
    return h.hexdigest()


def folder_fingerprint(folder: Path) -> str:
    """sha256 over the JSON configs and the weight-file fingerprints of a model folder.

    A folder inside the Hugging Face cache (``.../snapshots/<commit>/``) is identified by its
    commit hash instead: its files are symlinks whose content the commit already fixes.
    """
    match = _SNAPSHOT.search(str(folder))
    if match:
        return match.group(1)
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        rel = os.fspath(path.relative_to(folder))
        if path.suffix == ".json":
            h.update(rel.encode())
            h.update(path.read_bytes())
        elif path.suffix in _WEIGHT_SUFFIXES:
            file_fingerprint(path, h)
    return h.hexdigest()
