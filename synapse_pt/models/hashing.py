"""A model-free text encoder: hashed bag of words, L2-normalised.

Not a stand-in for a sentence encoder's quality: a cheap, deterministic encoder for unit tests of
the graph and retrieval layers, and a lexical baseline in its own right (named as such in results).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import torch

_TOKEN = re.compile(r"[a-z0-9]+")


class HashingEncoder:
    """Each lowercase word token adds 1 to bucket ``hash(token) mod dim``; rows are L2-normalised.

    An empty text maps to the zero vector (its cosine with anything is 0).
    """

    def __init__(self, dim: int = 256) -> None:
        if dim < 1:
            raise ValueError(f"HashingEncoder: dim must be >= 1, got {dim}")
        self.dim = dim
        self.name = f"hashing-bow-{dim}"

    def _bucket(self, token: str) -> int:
        digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") % self.dim

    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        out = torch.zeros(len(texts), self.dim)
        for row, text in enumerate(texts):
            for token in _TOKEN.findall(text.lower()):
                out[row, self._bucket(token)] += 1.0
        return torch.nn.functional.normalize(out, dim=1)
