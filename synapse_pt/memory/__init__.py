"""Memory systems behind one interface: SYNAPSE and the baselines (SPEC §1, §2).

:class:`SynapseMemory` (graph memory on PyTorch Geometric) is imported on first use, so runs of
the turn-level memories start without loading PyG.
"""

from importlib import import_module
from typing import Any

# the related systems' packages register their answer steps, judges and scorers (steps.py)
from . import gaama, membox  # noqa: F401
from .base import EPISODIC, SEMANTIC, MemorySystem, RetrievalResult, RetrievedItem
from .baselines import BM25Memory, FullContext, HybridRRF, VectorRAG

__all__ = [
    "BM25Memory", "EPISODIC", "FullContext", "HybridRRF", "MemorySystem", "RetrievalResult",
    "RetrievedItem", "SEMANTIC", "SynapseMemory", "VectorRAG",
]

_LAZY = {"SynapseMemory": ".synapse"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
