"""Membox (SPEC §2) in the harness: its boxes, traces, retrieval and LLM build (Topic Loom), its
answer step and its F1 (registered in :mod:`synapse_pt.steps`)."""

from . import answer, published, score
from .memory import MemboxMemory

__all__ = ["MemboxMemory", "answer", "published", "score"]
