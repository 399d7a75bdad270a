"""GAAMA's LLM-free build (synapse_pt/memory/gaama/memory.py) on the shipped sample: the graph by
counting, the retrieval against a plain networkx computation, the pack by hand."""

from __future__ import annotations

import networkx as nx
import pytest
import torch

from synapse_pt.data import load_locomo, sample_path
from synapse_pt.eval.qa.pipeline import blind
from synapse_pt.graph.extraction import KeywordConceptExtractor
from synapse_pt.memory.gaama.graph import CONCEPT, EDGE_TYPES, EPISODE, FACT, concept_label
from synapse_pt.memory.gaama.graph import Block as _Block
from synapse_pt.memory.gaama.memory import GAAMAMemory
from synapse_pt.memory.gaama.retrieval import code_similarity, trim_code
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
    """Steps 1-4 for one question with networkx (seeds, ego graphs, pagerank) and lists, on the
    code's similarity scale with its candidate rule."""
    n = len(block.kind)
    # the cosines as the memory computes them (one float32 product; a float64 product ranks
    # near-tied hashed embeddings differently on some BLAS builds): the graph part is the test
    cos = cosine_scores(block.x, query_emb)[:, b].double().tolist()
    sim = [(1 + c) / 2 for c in cos]
    ranked = sorted(range(n), key=lambda i: -sim[i])
    seeds = ranked[: memory.retrieval.seeds]
    G = nx.DiGraph()
    G.add_nodes_from(range(n))
    G.add_edges_from(block.edge_index.T.tolist(), weight=memory.retrieval.edge_weight)
    hood = set()
    for s in seeds:
        hood |= set(nx.ego_graph(G, s, radius=memory.retrieval.depth).nodes)
    near = set(ranked[: memory.retrieval.k_nearest])
    cand = hood | near
    weights = {i: max(sim[i], 0.0) if i in seeds else 0.0 for i in hood}
    ppr = nx.pagerank(G.subgraph(hood), alpha=memory.retrieval.alpha, personalization=weights,
                      weight="weight", tol=1e-12, max_iter=1000)
    if memory.retrieval.graph_only_cosine == "zero":
        sim = [v if i in near else 0.0 for i, v in enumerate(sim)]
    max_sim = max(sim[i] for i in cand)
    max_ppr = max(ppr.values())
    return {i: sim[i] / max_sim + 0.1 * ppr.get(i, 0.0) / max_ppr for i in cand}


@pytest.mark.parametrize("knn", [20, None])
def test_scores_equal_a_plain_networkx_computation(conv, knn) -> None:
    memory = GAAMAMemory(ENC, KeywordConceptExtractor(), seeds=8, knn=knn)
    memory.ingest([conv])
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


def _tiny_block() -> tuple[_Block, torch.Tensor]:
    """Four episodes in 2-d: cosines to the question (1, 0) of 1, 0, -1 and 0.6; one NEXT edge
    0 <-> 1 (both directions); node 3 unconnected."""
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.6, 0.8]])
    edges = torch.tensor([[0, 1], [1, 0]])
    nxt = EDGE_TYPES.index("NEXT")
    block = _Block("s", [EPISODE] * 4, ["a", "b", "c", "d"], [("D1:1",), ("D1:2",), ("D1:3",),
                                                              ("D1:4",)],
                   [None] * 4, [None] * 4, edges, torch.tensor([nxt, nxt]), x)
    return block, torch.tensor([[1.0, 0.0]])


def test_similarity_scaled_score_by_hand() -> None:
    """One seed (node 0), depth 1, PageRank from node 0 on {0, 1} with restart 0.4: p0 = 0.4 +
    0.6 p1, p1 = 0.6 p0, so p0 = 0.625, p1 = 0.375 (p1 / p0 = 0.6).

    * code scale (1 + cos) / 2: sims 1, 0.5, 0, 0.8. Nearest knn=3 = {0, 3, 1}, plus the
      neighbourhood {0, 1}: candidates {0, 1, 3}. Scores: node 0 1/1 + 0.1 = 1.1; node 1
      0.5 + 0.1 * 0.6 = 0.56; node 3 (no PageRank) 0.8; node 2 not a candidate.
    * code scale with graph_only_cosine=zero and knn=1: node 1 is graph-only, its similarity 0:
      0.06; with knn=2 (nearest {0, 3}) still graph-only; with knn=3 it is in the nearest set.
    """
    block, q = _tiny_block()
    m = GAAMAMemory(ENC, KeywordConceptExtractor(), seeds=1, depth=1, knn=3)
    score, cand = m.scores(block, q)
    assert cand[:, 0].tolist() == [True, True, False, True]
    assert score[:, 0].tolist()[0] == pytest.approx(1.1)
    assert float(score[1, 0]) == pytest.approx(0.56)
    assert float(score[3, 0]) == pytest.approx(0.8)
    for knn, want in ((1, 0.06), (2, 0.06), (3, 0.56)):
        zero = GAAMAMemory(ENC, KeywordConceptExtractor(), seeds=1, depth=1, knn=knn,
                           graph_only_cosine="zero")
        assert float(zero.scores(block, q)[0][1, 0]) == pytest.approx(want)
    assert code_similarity(torch.tensor([-1.0, 0.0, 0.5])).tolist() == [0.0, 0.5, 0.75]
    # the code's nearest set: max(2 * (60 + 20 + 5 + 80), 2 * 40) = 330 nodes
    assert GAAMAMemory(ENC, KeywordConceptExtractor()).retrieval.k_nearest == 330


def test_knn_follows_a_sweep_of_the_budgets_under_the_code_rule() -> None:
    """``knn=null`` is the code's rule, max(2 * pack budgets, 2 * seeds), also when a sweep changes
    the budgets or seeds on an ingested memory; a given knn stays until set back to null. By
    hand: max_facts 10 -> 2 * (10 + 20 + 5 + 80) = 230; seeds 200 -> max(230, 400) = 400."""
    m = GAAMAMemory(ENC, KeywordConceptExtractor())
    m.configure_retrieval(max_facts=10)
    assert m.retrieval.k_nearest == 230
    m.configure_retrieval(seeds=200)
    assert m.retrieval.k_nearest == 400
    m.configure_retrieval(knn=50)
    m.configure_retrieval(max_facts=60, seeds=40)
    assert m.retrieval.k_nearest == 50
    m.configure_retrieval(knn=None)
    assert m.retrieval.k_nearest == 330
    with pytest.raises(ValueError, match=r"memory.knn must be an integer >= 1"):
        m.configure_retrieval(knn=0)
    m.configure_retrieval(max_facts=10)  # the refused knn=0 left the code's rule in place
    assert m.retrieval.k_nearest == 230
    with pytest.raises(ValueError, match=r"memory.max_skills must be an integer >= 0"):
        GAAMAMemory(ENC, KeywordConceptExtractor(), max_skills=-1)
    with pytest.raises(ValueError, match=r"memory.knn must be an integer >= 1"):
        GAAMAMemory(ENC, KeywordConceptExtractor(), knn=-3)


def test_graph_only_candidates_get_cosine_zero_as_in_the_code(conv) -> None:
    """The code gives nodes reached only through the graph (outside its nearest set) similarity
    0; the nearest set keeps its similarity."""
    m = GAAMAMemory(ENC, KeywordConceptExtractor(), seeds=4, knn=10, graph_only_cosine="zero")
    m.ingest([conv])
    block = m.blocks[conv.sample_id]
    q = ENC.encode([conv.questions[0].question])
    score, cand = m.scores(block, q)
    ref = GAAMAMemory(ENC, KeywordConceptExtractor(), seeds=4, knn=10, graph_only_cosine="real")
    ref.ingest([conv])
    real, _ = ref.scores(ref.blocks[conv.sample_id], q)
    cos = cosine_scores(block.x, q)[:, 0].double()
    near = set(cos.sort(descending=True, stable=True).indices[:10].tolist())
    graph_only = [i for i in cand[:, 0].nonzero().flatten().tolist() if i not in near]
    assert graph_only
    assert all(float(score[i, 0]) <= 0.1 + 1e-9 for i in graph_only)  # the PPR term only
    assert any(float(real[i, 0]) > 0.1 for i in graph_only)
    for i in near:  # the nearest set keeps its similarity under either
        assert float(score[i, 0]) == pytest.approx(float(real[i, 0]))


def test_trim_code_by_hand() -> None:
    """A pack over budget, GAAMA's proportional trim worked by hand. Budgets 60 / 20 / 5 / 80
    (total 165): target shares facts 60/165 = 0.364, episodes 80/165 = 0.485.

    Example 1: facts f1..f3 of 20 words (score order), episodes e1..e3 of 10 words; 60 words max.
      90 words: facts 60/90 / 0.364 = 1.83 > episodes 30/90 / 0.485 = 0.69 -> drop f3 (the last);
      70 words: facts 40/70 / 0.364 = 1.57 > episodes 0.88 -> drop f2; 50 words: done.
      Kept: f1 and every episode (the facts-first reading would keep f1-f3 and no episode).
    Example 2: one fact of 10 words, episodes e1..e4 of 20 words with scores 0.9, 0.2, 0.5, 0.7
      (time order); 50 words max.
      90: facts 10/90 / 0.364 = 0.31 < episodes 80/90 / 0.485 = 1.83 -> drop the lowest-scored
      episode e2; 70: facts 0.39 < episodes 1.77 -> drop e3 (0.5); 50: done. Kept f1, e1, e4.
    """
    budgets = {"facts": 60, "reflections": 20, "skills": 5, "episodes": 80}
    words = {1: 20, 2: 20, 3: 20, 11: 10, 12: 10, 13: 10}
    facts = [(1, 0.9), (2, 0.8), (3, 0.7)]
    episodes = [(11, 0.1), (12, 0.95), (13, 0.3)]
    out = trim_code({"facts": facts, "episodes": episodes}, words, budgets, 60)
    assert out == {"facts": [(1, 0.9)], "reflections": [], "skills": [], "episodes": episodes}

    words = {1: 10, 11: 20, 12: 20, 13: 20, 14: 20}
    episodes = [(11, 0.9), (12, 0.2), (13, 0.5), (14, 0.7)]
    out = trim_code({"facts": [(1, 0.3)], "episodes": episodes}, words, budgets, 50)
    assert out["facts"] == [(1, 0.3)] and out["episodes"] == [(11, 0.9), (14, 0.7)]
    # a pack under the limit is left alone
    assert trim_code({"facts": facts}, {1: 20, 2: 20, 3: 20}, budgets, 60)["facts"] == facts


def test_code_trim_keeps_episodes_by_score_not_by_time(conv) -> None:
    """60 facts and 80 episodes over 1,000 words: the code's trim keeps episodes from the whole
    conversation (the best-scored) beside the facts."""
    code = GAAMAMemory(ENC, KeywordConceptExtractor(), max_words=120)
    code.ingest([conv])
    q = [blind(conv.questions[0])]
    a = code.retrieve(q).items[0]
    assert sum(len(it.text.split()) for it in a) <= 120
    kinds_a = [it.kind for it in a]
    assert kinds_a.count("episodic") > 0 and kinds_a.count(FACT) > 0  # both types keep a share


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
    # the LLM build's settings (issue 61), checked by an LLM-free build too
    for key, value in (("replies", "loose"), ("budget_param", "tokens"), ("seed", -1),
                       ("temperature", "hot")):
        with pytest.raises(ValueError, match=f"memory.{key}"):
            GAAMAMemory(ENC, KeywordConceptExtractor(), **{key: value})
    with pytest.raises(ValueError, match="memory.replies=code"):
        GAAMAMemory(ENC, KeywordConceptExtractor(), replies="code", prompts="ours")


def test_a_sweep_cannot_set_an_unknown_rule() -> None:
    """configure_retrieval checks a rule's name as the constructor does, naming the key; a
    refused setting changes nothing (a typo in a sweep must not run another rule silently)."""
    m = GAAMAMemory(ENC, KeywordConceptExtractor())
    for key, bad in (("nearest", "all"), ("graph_only_cosine", "maybe"),
                     ("hub_dampening", "sometimes")):
        with pytest.raises(ValueError, match=rf"memory.{key} must be one of .*{bad!r}"):
            m.configure_retrieval(**{key: bad}, max_facts=10)
    r = m.retrieval
    assert (r.graph_only_cosine, r.hub_dampening, r.max_facts) == ("zero", "code", 60)
    m.configure_retrieval(graph_only_cosine="real", hub_dampening="effective")
    assert (m.retrieval.graph_only_cosine, m.retrieval.hub_dampening) == ("real", "effective")


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


def test_graph_only_cosine_defaults_to_the_code_rule() -> None:
    """Issue 44: a candidate reached only through the graph scores similarity 0 by default, as
    gaama's services/ltm_retriever.py 194-197 leave it (its compute_similarity does not exist);
    the class and the config agree, and the config names the file and lines."""
    from pathlib import Path

    import yaml

    assert GAAMAMemory(ENC, KeywordConceptExtractor()).retrieval.graph_only_cosine == "zero"
    path = Path(__file__).resolve().parents[2] / "configs" / "memory" / "gaama.yaml"
    assert yaml.safe_load(path.read_text())["graph_only_cosine"] == "zero"
    line = next(x for x in path.read_text().splitlines() if x.startswith("graph_only_cosine"))
    assert "services/ltm_retriever.py 194-197" in path.read_text().split(line)[1][:300] + line


def _raw_sample() -> dict[str, tuple[str, str, str]]:
    """``{dia_id: (session date string, speaker, text)}`` read from the sample's JSON directly."""
    import json

    conversation = json.loads(sample_path().read_text())[0]["conversation"]
    out = {}
    for key, turns in conversation.items():
        if key.startswith("session_") and isinstance(turns, list):
            for t in turns:
                out[t["dia_id"]] = (conversation[f"{key}_date_time"], t["speaker"], t["text"])
    return out


def test_episode_text_is_the_codes_dated_line_without_caption(conv) -> None:
    """Issue 44: gaama's run_create_ltm.py stores an episode as "[<session date string>]
    <speaker>: <text>", the image caption left out."""
    raw = _raw_sample()
    m = GAAMAMemory(ENC, KeywordConceptExtractor())
    m.ingest([conv])
    block = m.blocks[conv.sample_id]
    episodes = {block.covers[i][0]: block.text[i] for i in range(len(block.text))
                if block.kind[i] == EPISODE}
    assert episodes == {d: f"[{when}] {who}: {text}" for d, (when, who, text) in raw.items()}
    assert episodes["D1:13"] == ("[2:15 pm on 3 March, 2024] Nora: Here is Biscuit on her first "
                                 "walk with me.")


def test_chunk_tokens_count_speaker_and_the_dated_episode_text(conv) -> None:
    """services/orchestrator.py 134-137: words of actor + " " + content, the content carrying
    the date and the speaker. By hand: "Nora" + "[2:15 pm on 3 March, 2024] Nora: hi there" is
    1 + 9 = 10 words, so two such turns fit in 20 tokens and a third opens a chunk."""
    from synapse_pt.memory.gaama.llm_build import chunk_turns

    turns = list(conv.turns())[:3]
    texts = ["[2:15 pm on 3 March, 2024] Nora: hi there"] * 3
    assert [len(c) for c in chunk_turns(turns, 20, texts=texts)] == [2, 1]
    assert [len(c) for c in chunk_turns(turns, 19, texts=texts)] == [1, 1, 1]
