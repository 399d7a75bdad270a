"""synapse_pt: a GPU-accelerated research framework for SYNAPSE-style graph agent memory.

Layers, bottom up (each imports only those below it; ``tests/test_layering.py`` holds the same
list and checks every import against it)::

    study.py                    run every variant of a study file (studies/) through run()
    run.py sweep.py estimate.py entry points: one run; the batched sweep; a run's cost beforehand
    build.py cli.py             builders from the composed config; the Hydra callbacks
    preflight.py                the checks a run makes before ingesting
    study_key.py tracking.py    names of resumable studies; W&B or nothing
    run_records.py              Hydra's records and the log, written once a run claims its folder
    eval/                       rooms by job, bottom up: qa/ (answering, scorers), reports/
                                (tables, plots), records/ (run folders), tuning/ (held out, studies)
    memory/                     MemorySystem: synapse.py, gaama/, membox/ (none imports another)
                                on the shared base, declare, episodic, gate; baselines, fused
    retrieval/                  triggers (BM25, dense), scoring, gate
    graph/                      memory graph tensors, consolidation, extraction, PageRank
    nn/  models/  data/         activation layers; embedder, LLM backends; benchmarks
                                (data/benchmark.py: each declared beside its loader)
    cache/                      the on-disk caches: one SQLite key-value store, its codecs for
                                vectors and texts (LLM responses: models/llm/cache.py)
    errors.py progress.py       what every layer may use: ConfigError; a long step's progress;
    resources.py groups.py      the configs and studies it ships, its checkout, its version;
                                frozen settings groups from a constructor's flat keys
"""

__version__ = "0.1.0"
