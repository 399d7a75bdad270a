"""GAAMA (swarna-kpaul/gaama; SPEC §2) in the harness: its graph build, retrieval and LLM build,
its answer step and its judge (registered in :mod:`synapse_pt.steps`)."""

from . import answer, judge, published
from .memory import GAAMAMemory

__all__ = ["GAAMAMemory", "answer", "judge", "published"]
