"""Retrieval: triggers (batched BM25, dense), initial energy, triple score, top-k and the gate.

SYNAPSE's retrieval (``synapse_pt.retrieval.spreading``: ``synapse_retrieve``, ``SynapseParams``,
``RankedBatch``) is imported from its module: it needs PyTorch Geometric, which the LLM-free
retrievers never load.
"""

from .bm25 import BM25Index
from .tokenize import tokenize

__all__ = ["BM25Index", "tokenize"]
