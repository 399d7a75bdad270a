"""synapse_pt: a GPU-accelerated research framework for SYNAPSE-style graph agent memory.

Layers, bottom up (each imports only those below it; ``tests/test_layering.py`` holds the same
list and checks every import against it)::

    run.py sweep.py study.py    ``python -m synapse_pt.<command>``: each hands over to commands/
    estimate.py
    commands/                   the entry points (study; run, sweep, estimate) and their plumbing
                                (build, hydra_app, preflight, study_key, tracking, run_log)
    eval/                       rooms by job, bottom up: qa/ (answering, scorers), reports/
                                (tables, plots), records/ (run folders), tuning/ (held out, studies)
    memory/                     MemorySystem: synapse.py, gaama/, membox/ (none imports another)
                                on the shared base, declare, episodic, gate; baselines, fused
    steps/                      the QA steps a memory's package registers and eval/ reads: answer
                                steps, judges, scorers, published rows
    retrieval/                  triggers (BM25, dense), spreading activation, scoring, gate; items
    graph/                      memory graph tensors, consolidation, extraction, PageRank
    nn/  models/  data/         activation layers; embedder, LLM backends; benchmarks
                                (data/benchmark.py: each declared beside its loader)
    cache/                      the on-disk caches: one SQLite key-value store, its codecs for
                                vectors and texts (LLM responses: models/llm/cache.py)
    common/                     what every layer may use: ConfigError, a long step's progress, the
                                shipped configs and studies, settings groups, CPU threads
"""

__version__ = "0.1.0"
