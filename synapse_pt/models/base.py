"""Small interfaces every model backend implements: memory systems never see which model runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class TextEncoder(Protocol):
    """Turns texts into L2-normalised embeddings.

    ``encode`` returns a float32 tensor of shape ``[len(texts), dim]`` on the CPU, each row of unit
    L2 norm (sentence-transformers semantics: mean pooling over the attention mask, then
    normalisation). ``name`` identifies the model in caches and result rows.
    """

    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> torch.Tensor: ...
