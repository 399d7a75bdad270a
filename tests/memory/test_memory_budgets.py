"""Negative budgets and counts are refused with the config key named (issue 31, defect 5), both
when a memory is built and when a sweep changes an ingested memory's retrieval settings."""

from __future__ import annotations

import pytest

from synapse_pt.data import load_locomo, sample_path
from synapse_pt.graph.extraction import KeywordConceptExtractor
from synapse_pt.memory.baselines import BM25Memory, HybridRRF
from synapse_pt.memory.gaama.memory import GAAMAMemory
from synapse_pt.memory.membox.memory import MemboxMemory
from synapse_pt.models.hashing import HashingEncoder

ENC = HashingEncoder(32)


@pytest.mark.parametrize("key", ["max_facts", "max_reflections", "max_episodes", "depth",
                                 "max_iter", "hub_degree", "chunk_tokens",
                                 "reflections_per_group", "max_tokens"])
def test_gaama_refuses_a_negative_budget_naming_the_key(key: str) -> None:
    with pytest.raises(ValueError, match=rf"^memory\.{key} must be an integer >= [01], got -1$"):
        GAAMAMemory(ENC, KeywordConceptExtractor(), **{key: -1})


def test_gaama_zero_pack_budgets_are_allowed_and_a_float_is_not() -> None:
    m = GAAMAMemory(ENC, KeywordConceptExtractor(), max_facts=0, max_reflections=0,
                    max_episodes=0)
    r = m.retrieval
    assert (r.max_facts, r.max_reflections, r.max_episodes) == (0, 0, 0)
    with pytest.raises(ValueError, match=r"memory\.max_facts must be an integer >= 0, got 2\.5"):
        GAAMAMemory(ENC, KeywordConceptExtractor(), max_facts=2.5)


def test_a_sweep_cannot_set_a_negative_budget_on_an_ingested_memory() -> None:
    conv = load_locomo(sample_path()).conversations[0]
    m = GAAMAMemory(ENC, KeywordConceptExtractor(), seeds=4)
    m.ingest([conv])
    with pytest.raises(ValueError, match=r"memory\.max_facts must be an integer >= 0, got -1"):
        m.configure_retrieval(max_facts=-1, max_episodes=5)
    assert (m.retrieval.max_facts, m.retrieval.max_episodes) == (60, 80)  # nothing half-applied
    m.configure_retrieval(max_facts=3)
    assert m.retrieval.max_facts == 3
    bm25 = BM25Memory(ENC, k=5)
    with pytest.raises(ValueError, match=r"memory\.k must be an integer >= 1, got 0"):
        bm25.configure_retrieval(k=0)
    assert bm25.k == 5


@pytest.mark.parametrize(("key", "low"), [("k", 1), ("min_event_words", 0), ("max_tokens", 1),
                                        ("loom_max_tokens", 1)])
def test_membox_refuses_negative_counts(key: str, low: int) -> None:
    with pytest.raises(ValueError, match=rf"^memory\.{key} must be an integer >= {low}, got -1$"):
        MemboxMemory(ENC, KeywordConceptExtractor(), **{key: -1})


def test_hybrid_refuses_a_negative_rrf_constant() -> None:
    with pytest.raises(ValueError, match=r"^memory\.k_rrf must be an integer >= 0, got -60$"):
        HybridRRF(ENC, k_rrf=-60)
