"""Memory systems behind one interface: SYNAPSE and the baselines (SPEC §1, §2)."""

from .base import EPISODIC, SEMANTIC, MemorySystem, RetrievalResult, RetrievedItem
from .baselines import BM25Memory, FullContext, HybridRRF, VectorRAG
from .synapse import SynapseMemory

__all__ = [
    "BM25Memory", "EPISODIC", "FullContext", "HybridRRF", "MemorySystem", "RetrievalResult",
    "RetrievedItem", "SEMANTIC", "SynapseMemory", "VectorRAG",
]
