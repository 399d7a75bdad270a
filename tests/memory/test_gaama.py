"""GAAMA's LLM-free build (synapse_pt/memory/gaama.py) on the shipped sample: the graph by
counting, the retrieval against a plain networkx computation, the pack by hand."""

from __future__ import annotations

import networkx as nx
import pytest
import torch

from synapse_pt.data import load_locomo, sample_path
from synapse_pt.eval.pipeline import blind
from synapse_pt.graph.extraction import KeywordConceptExtractor
from synapse_pt.memory.gaama import CONCEPT, EPISODE, FACT, GAAMAMemory, concept_label
from synapse_pt.models.hashing import HashingEncoder
from synapse_pt.retrieval.dense import cosine_scores
from synapse_pt.retrieval.text import split_sentences

ENC = HashingEncoder(64)


@pytest.fixture(scope="module")
def conv():
    return load_locomo(sample_path()).conversations[0]


@pytest.fixture(scope="module")
def memory(conv):
    m = GAAMAMemory(ENC, KeywordConceptExtractor(), seeds=8)
    m.ingest([conv])
    return m


def test_graph_nodes_and_edges_by_counting(conv, memory) -> None:
    block = memory.blocks[conv.sample_id]
    turns = list(conv.turns())
    assert block.kind.count(EPISODE) == len(turns)
    assert block.kind.count(FACT) == sum(len(split_sentences(t.content)) for t in turns)
    assert block.kind.count(CONCEPT) > 0
    counts = memory.edge_counts(conv.sample_id)
    assert counts["NEXT"] == 2 * (len(turns) - 1)
    assert counts["DERIVED_FROM"] == 2 * block.kind.count(FACT)
    assert counts["DERIVED_FROM_FACT"] == 0  # no reflections LLM-free
    pairs = set(map(tuple, block.edge_index.T.tolist()))
    assert all((b, a) in pairs for a, b in pairs)  # every edge stored both ways
    labels = [t for k, t in zip(block.kind, block.text, strict=True) if k == CONCEPT]
    assert len(labels) == len(set(labels))  # one node per label
    assert not {conv.speaker_a.lower(), conv.speaker_b.lower()} & set(labels)


def test_concept_labels_are_snake_case() -> None:
    assert concept_label("Pottery class!") == "pottery_class"
    assert concept_label("  LGBTQ+ support group ") == "lgbtq_support_group"


def plain_scores(memory, block, query_emb, b):
    """Steps 1-4 for one question with networkx (seeds, ego graphs, pagerank) and lists."""
    n = len(block.kind)
    # the cosines as the memory computes them (one float32 product; a float64 product ranks
    # near-tied hashed embeddings differently on some BLAS builds): the graph part is the test
    cos = cosine_scores(block.x, query_emb)[:, b].double().tolist()
    seeds = sorted(range(n), key=lambda i: -cos[i])[: memory.seeds]
    G = nx.DiGraph()
    G.add_nodes_from(range(n))
    G.add_edges_from(block.edge_index.T.tolist(), weight=memory.edge_weight)
    cand = set()
    for s in seeds:
        cand |= set(nx.ego_graph(G, s, radius=memory.depth).nodes)
    weights = {i: max(cos[i], 0.0) if i in seeds else 0.0 for i in cand}
    ppr = nx.pagerank(G.subgraph(cand), alpha=memory.alpha, personalization=weights,
                      weight="weight", tol=1e-12, max_iter=1000)
    max_cos = max(cos[i] for i in cand)
    max_ppr = max(ppr.values())
    return {i: cos[i] / max_cos + 0.1 * ppr[i] / max_ppr for i in cand}


def test_scores_equal_a_plain_networkx_computation(conv, memory) -> None:
    block = memory.blocks[conv.sample_id]
    questions = [blind(q) for q in conv.questions[:5]]
    query_emb = ENC.encode([q.question for q in questions])
    score, cand = memory.scores(block, query_emb)
    for b in range(len(questions)):
        want = plain_scores(memory, block, query_emb, b)
        assert set(cand[:, b].nonzero().flatten().tolist()) == set(want)
        for i, v in want.items():
            assert float(score[i, b]) == pytest.approx(v, abs=1e-6)
        assert bool(torch.isinf(score[~cand[:, b], b]).all())


def test_graph_only_candidates_get_cosine_zero_as_in_the_code(conv) -> None:
    m = GAAMAMemory(ENC, KeywordConceptExtractor(), seeds=4, graph_only_cosine="zero")
    m.ingest([conv])
    block = m.blocks[conv.sample_id]
    q = ENC.encode([conv.questions[0].question])
    score, cand = m.scores(block, q)
    ref = GAAMAMemory(ENC, KeywordConceptExtractor(), seeds=4)
    ref.ingest([conv])
    real, _ = ref.scores(ref.blocks[conv.sample_id], q)
    cos = (block.x @ q[0]).double()
    seeds = set(cos.sort(descending=True, stable=True).indices[:4].tolist())
    graph_only = [i for i in cand[:, 0].nonzero().flatten().tolist() if i not in seeds]
    assert graph_only
    assert all(float(score[i, 0]) <= 0.1 + 1e-9 for i in graph_only)  # the PPR term only
    assert any(float(real[i, 0]) > 0.1 for i in graph_only)


def test_pack_budgets_and_word_trim(conv) -> None:
    m = GAAMAMemory(ENC, KeywordConceptExtractor(), seeds=40, max_facts=3, max_episodes=2,
                    max_words=60)
    m.ingest([conv])
    result = m.retrieve([blind(q) for q in conv.questions[:6]])
    block = m.blocks[conv.sample_id]
    for row in result.items:
        kinds = [it.kind for it in row]
        assert kinds.count(FACT) <= 3 and kinds.count("episodic") <= 2
        assert CONCEPT not in kinds  # concepts never enter the prompt
        assert sum(len(it.text.split()) for it in row) <= 60
        assert [it.score for it in row] == sorted((it.score for it in row), reverse=True)
        for it in row:  # a fact covers the turn it came from
            assert len(it.covers) == 1
            if it.kind == FACT:
                assert block.covers[int(it.node_id[2:])] == it.covers


def test_bad_settings_are_named() -> None:
    class NoModel(KeywordConceptExtractor):  # claims to need an LLM but has none
        llm_free = False

    with pytest.raises(ValueError, match="an LLM build needs an LLM extractor"):
        GAAMAMemory(ENC, NoModel())
    with pytest.raises(ValueError, match="memory.hub_dampening"):
        GAAMAMemory(ENC, KeywordConceptExtractor(), hub_dampening="sometimes")
    with pytest.raises(ValueError, match="memory.graph_only_cosine"):
        GAAMAMemory(ENC, KeywordConceptExtractor(), graph_only_cosine="maybe")


def test_fused_seeds_replace_the_cosine_of_turn_nodes(conv) -> None:
    from synapse_pt.memory.fused import FusedMemory

    args = {"weights": {"dense": 1.0, "bm25": 1.0}, "rho": 0.0}
    m = GAAMAMemory(ENC, KeywordConceptExtractor(), fused_seeds=args)
    m.ingest([conv])
    ref = FusedMemory(ENC, **args)
    ref.ingest([conv])
    questions = [blind(q) for q in conv.questions[:4]]
    fused = ref.normalised_scores(questions)  # [turns, B], best turn = 1
    row = ref.row_of()
    block = m.blocks[conv.sample_id]
    q = ENC.encode([x.question for x in questions])
    sim = m.fused_similarity(block, q, fused)
    for i, (kind, covers) in enumerate(zip(block.kind, block.covers, strict=True)):
        for b in range(len(questions)):
            if kind == CONCEPT:
                assert float(sim[i, b]) == pytest.approx(float(block.x[i] @ q[b]), abs=1e-6)
            else:
                want = max(float(fused[row[(conv.sample_id, t)], b]) for t in covers)
                assert float(sim[i, b]) == pytest.approx(want, abs=1e-6)
    assert m.retrieve(questions).items[0]
    with pytest.raises(ValueError, match="fused_seeds.k"):
        GAAMAMemory(ENC, KeywordConceptExtractor(), fused_seeds={"k": 3})
