"""GAAMA (swarna-kpaul/gaama; SPEC §2) in the harness: its graph build, retrieval and LLM build."""

from .memory import GAAMAMemory

__all__ = ["GAAMAMemory"]
