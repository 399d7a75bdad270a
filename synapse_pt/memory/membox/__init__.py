"""Membox (SPEC §2) in the harness: its boxes, traces, retrieval and LLM build (Topic Loom)."""

from .memory import MemboxMemory

__all__ = ["MemboxMemory"]
