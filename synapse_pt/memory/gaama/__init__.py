"""GAAMA (swarna-kpaul/gaama; SPEC §2) in the harness: its graph build, retrieval and LLM build,
its answer step and its judge (registered in :mod:`synapse_pt.memory.steps`)."""

from . import answer, judge, published
from .memory import GAAMAMemory

__all__ = ["GAAMAMemory", "answer", "judge", "published"]
