"""synapse_pt: a GPU-accelerated research framework for SYNAPSE-style graph agent memory.

Layers, bottom up (each imports only those below it)::

    run.py                      entry point: compose config, call plain functions, write outputs
    eval/                       QA pipeline, scorers, tables
    memory/                     MemorySystem implementations (synapse, baselines)
    retrieval/                  triggers (BM25, dense), scoring, gate
    graph/                      memory graph tensors, consolidation, extraction, PageRank
    nn/  models/  data/         activation layers; embedder, LLM backends, caches; LoCoMo
"""

__version__ = "0.1.0"
