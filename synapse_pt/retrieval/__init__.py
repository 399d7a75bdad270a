"""Retrieval: triggers (batched BM25, dense), initial energy, triple score, top-k and the gate."""

from .bm25 import BM25Index
from .synapse import RankedBatch, SynapseParams, synapse_retrieve
from .tokenize import tokenize

__all__ = ["BM25Index", "RankedBatch", "SynapseParams", "synapse_retrieve", "tokenize"]
