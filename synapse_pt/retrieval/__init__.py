"""Retrieval: triggers (batched BM25, dense), initial energy, triple score, top-k and the gate.

SYNAPSE's retrieval (:mod:`.synapse`, which needs PyTorch Geometric for its message-passing layer)
is imported on first use, so the LLM-free retrievers start without loading PyG.
"""

from importlib import import_module
from typing import Any

from .bm25 import BM25Index
from .tokenize import tokenize

__all__ = ["BM25Index", "RankedBatch", "SynapseParams", "synapse_retrieve", "tokenize"]

_LAZY = {"RankedBatch": ".synapse", "SynapseParams": ".synapse", "synapse_retrieve": ".synapse"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
