"""Node and edge type codes of the SYNAPSE memory graph (SPEC §1.1).

Stored as integers in ``MemoryGraph.node_type`` and ``MemoryGraph.edge_type``; the name tuples map a
code back to the paper's word for result tables and debugging.
"""

from __future__ import annotations

EPISODIC: int = 0
"""A dialogue turn (text, embedding, timestamp)."""
SEMANTIC: int = 1
"""An abstract concept (entity, person, place, preference, event, topic) extracted from a window."""

TEMPORAL: int = 0
"""Episode ``t`` -> episode ``t + 1``, weight :math:`\\exp(-\\rho\\,|\\Delta\\tau|)`."""
ABSTRACTION: int = 1
"""Episode <-> concept of the same consolidation window, weight :math:`\\max(0, \\cos)`."""
ASSOCIATION: int = 2
"""Concept <-> concept co-occurring in a window (co-occurrence or similarity weighting)."""

NODE_TYPE_NAMES: tuple[str, ...] = ("episodic", "semantic")
EDGE_TYPE_NAMES: tuple[str, ...] = ("temporal", "abstraction", "association")
