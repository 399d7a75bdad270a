"""The memory graph layer: graph tensors (:mod:`.memory_graph`, :mod:`.batch`), concept extraction
(:mod:`.extraction`), consolidation (:mod:`.consolidation`), PageRank (:mod:`.pagerank`,
:mod:`.ppr`) and upkeep (:mod:`.maintenance`).

Import a name from its module: the graph tensors need PyTorch Geometric, which a run of a
turn-level memory never loads (``tests/test_imports.py``); only the type codes are re-exported.
"""

from .types import (
    ABSTRACTION,
    ASSOCIATION,
    EDGE_TYPE_NAMES,
    EPISODIC,
    NODE_TYPE_NAMES,
    SEMANTIC,
    TEMPORAL,
)

__all__ = ["ABSTRACTION", "ASSOCIATION", "EDGE_TYPE_NAMES", "EPISODIC", "NODE_TYPE_NAMES",
           "SEMANTIC", "TEMPORAL"]
