"""The memory graph layer: graph tensors, batching, concept extraction, consolidation, PageRank.

Names are resolved lazily (PEP 562) so that importing one submodule, e.g.
``synapse_pt.graph.pagerank``, does not pull in the extraction backends.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "EPISODIC": "types", "SEMANTIC": "types", "TEMPORAL": "types", "ABSTRACTION": "types",
    "ASSOCIATION": "types", "NODE_TYPE_NAMES": "types", "EDGE_TYPE_NAMES": "types",
    "MemoryGraph": "memory_graph",
    "GraphBatch": "batch",
    "ConceptExtractor": "extraction", "LLMConceptExtractor": "extraction",
    "KeywordConceptExtractor": "extraction", "ConceptExtractionError": "extraction",
    "NoConceptExtractor": "extraction",
    "GraphBuilder": "consolidation",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
