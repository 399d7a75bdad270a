"""Memory systems behind one interface: SYNAPSE and the baselines (SPEC §1, §2).

:class:`~synapse_pt.memory.synapse.SynapseMemory` (graph memory on PyTorch Geometric) is imported
from ``synapse_pt.memory.synapse``, GAAMA's and Membox's from their packages, so runs of the
turn-level memories start without loading PyG.
"""

# the related systems' packages register their answer steps, judges and scorers (steps.py)
from synapse_pt.retrieval.items import EPISODIC, SEMANTIC, RetrievedItem

from . import gaama, membox  # noqa: F401
from .base import MemorySystem, RetrievalResult
from .baselines import BM25Memory, FullContext, HybridRRF, VectorRAG

__all__ = [
    "BM25Memory", "EPISODIC", "FullContext", "HybridRRF", "MemorySystem", "RetrievalResult",
    "RetrievedItem", "SEMANTIC", "VectorRAG",
]
