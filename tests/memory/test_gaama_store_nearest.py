"""GAAMA's nearest set as its vector store returns it (``memory.nearest=store``, issue 53): the
``max(2 knn, 20)`` nearest over every ingested conversation, then the question's, at most
``knn`` (gaama ``adapters/sqlite_vector.py`` 178-238). By hand on tiny blocks, and against a
plain list-and-networkx computation on two conversations."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import networkx as nx
import pytest
import torch

from synapse_pt.data import load_locomo, sample_path
from synapse_pt.eval.qa.pipeline import blind
from synapse_pt.graph.extraction import KeywordConceptExtractor
from synapse_pt.memory.gaama.graph import EDGE_TYPES, EPISODE
from synapse_pt.memory.gaama.graph import Block as _Block
from synapse_pt.memory.gaama.memory import GAAMAMemory
from synapse_pt.models.hashing import HashingEncoder
from synapse_pt.retrieval.dense import cosine_scores

ENC = HashingEncoder(64)


def _block(name: str, x: list[list[float]], edges: list[list[int]]) -> _Block:
    n = len(x)
    nxt = EDGE_TYPES.index("NEXT")
    return _Block(name, [EPISODE] * n, [f"{name}{i}" for i in range(n)],
                  [(f"D1:{i + 1}",) for i in range(n)], [None] * n, [None] * n,
                  torch.tensor(edges, dtype=torch.long).view(2, -1),
                  torch.full((len(edges[0]) if edges else 0,), nxt), torch.tensor(x))


def _two_blocks(far: int) -> tuple[GAAMAMemory, GAAMAMemory, torch.Tensor]:
    """Conversation ``s`` (ingested first): cosines 0.8, 0, -1, 0.6 to the question (1, 0), one
    NEXT edge 0 <-> 1; conversation ``far``: ``far`` unconnected nodes of cosine 1. Seeds 2,
    depth 1, knn 3 (the store's k: max(2 * 3, 20) = 20). The memories under either rule."""
    s = _block("s", [[0.8, 0.6], [0.0, 1.0], [-1.0, 0.0], [0.6, 0.8]], [[0, 1], [1, 0]])
    other = _block("far", [[1.0, 0.0]] * far, [])
    out = []
    for nearest in ("store", "conversation"):
        m = GAAMAMemory(ENC, KeywordConceptExtractor(), seeds=2, depth=1, knn=3,
                        nearest=nearest)
        m.blocks = {"s": s, "far": other}
        out.append(m)
    return out[0], out[1], torch.tensor([[1.0, 0.0]])


def test_store_nearest_by_hand() -> None:
    """19 nodes of the other conversation fill 19 of the store's 20: conversation ``s`` keeps its
    node 0 alone, the only seed (seeds=2 asks for two) and the whole nearest set. Candidates: it
    and its neighbour 1. PageRank from node 0 on {0, 1}, restart 0.4: p0 = 0.625, p1 = 0.375.
    Scores on the code's scale ((1 + cos) / 2: node 0 0.9): node 0 0.9 / 0.9 + 0.1 = 1.1; node 1
    is graph-only, similarity 0: 0.1 * 0.6 = 0.06. Under ``conversation`` the seeds are {0, 3}
    and the nearest set {0, 3, 1}: node 3 is a candidate there."""
    store, conversation, q = _two_blocks(far=19)
    returned = store.store_returns(q, ["s"])
    assert returned["s"][:, 0].tolist() == [True, False, False, False]
    score, cand = store.scores(store.blocks["s"], q, returned=returned["s"])
    assert cand[:, 0].tolist() == [True, True, False, False]
    assert float(score[0, 0]) == pytest.approx(1.1)
    assert float(score[1, 0]) == pytest.approx(0.06)
    _, cand = conversation.scores(conversation.blocks["s"], q)
    assert cand[:, 0].tolist() == [True, True, False, True]


def test_store_returns_none_of_the_conversation() -> None:
    """20 nodes of the other conversation fill the store's 20: nothing of ``s`` is returned, so
    no seed and no candidate (the code returns an empty pack)."""
    store, _, q = _two_blocks(far=20)
    returned = store.store_returns(q, ["s", "far"])
    assert not bool(returned["s"].any())
    assert int(returned["far"].sum()) == 20
    _, cand = store.scores(store.blocks["s"], q, returned=returned["s"])
    assert not bool(cand.any())
    with pytest.raises(ValueError, match=r"memory.nearest must be one of"):
        GAAMAMemory(ENC, KeywordConceptExtractor(), nearest="global")


def _two_conversations(folder: Path) -> Path:
    """The sample and a second conversation made from it (another id, every turn without its
    first word, so no node is the twin of another)."""
    (sample,) = json.loads(sample_path().read_text())
    other = copy.deepcopy(sample)
    other["sample_id"] = "sample-other"
    for key, turns in other["conversation"].items():
        if key.startswith("session_") and isinstance(turns, list):
            for t in turns:
                t["text"] = " ".join(t["text"].split()[1:]) or t["text"]
    path = folder / "two.json"
    path.write_text(json.dumps([sample, other]))
    return path


def plain_store_scores(m: GAAMAMemory, blocks: list[_Block], own: int, q: torch.Tensor
                       ) -> dict[int, float]:
    """One question's scores with lists and networkx: every node of every conversation ranked by
    cosine (ties: the earlier conversation, then the lower node), the first max(2 knn, 20) kept,
    of those the question's conversation's, in rank order: its first ``seeds`` are the seeds, its
    first ``knn`` the nearest set."""
    pool = []
    for c, block in enumerate(blocks):
        cos = cosine_scores(block.x, q)[:, 0].double().tolist()
        pool.extend((-v, c, i) for i, v in enumerate(cos))
    pool.sort()
    mine = [i for _, c, i in pool[:max(2 * m.retrieval.k_nearest, 20)] if c == own]
    block = blocks[own]
    sim = [(1 + v) / 2 for v in cosine_scores(block.x, q)[:, 0].double().tolist()]
    seeds, near = mine[:m.retrieval.seeds], set(mine[:m.retrieval.k_nearest])
    G = nx.DiGraph()
    G.add_nodes_from(range(len(block.kind)))
    G.add_edges_from(block.edge_index.T.tolist())
    hood = set()
    for s in seeds:
        hood |= set(nx.ego_graph(G, s, radius=m.retrieval.depth).nodes)
    cand = hood | near
    weights = {i: sim[i] if i in seeds else 0.0 for i in hood}
    ppr = nx.pagerank(G.subgraph(hood), alpha=m.retrieval.alpha, personalization=weights, tol=1e-12,
                      max_iter=1000) if hood else {}
    sim = [v if i in near else 0.0 for i, v in enumerate(sim)]
    max_sim = max(sim[i] for i in cand)
    max_ppr = max(ppr.values())
    return {i: sim[i] / max_sim + 0.1 * ppr.get(i, 0.0) / max_ppr for i in cand}


def test_store_nearest_equals_a_plain_computation(tmp_path) -> None:
    """Two conversations, knn 12 (the store's 24 nearest shared between them), seeds 8: each
    question's candidates and scores equal the plain computation, at least one question sees
    fewer than knn of its own conversation's nodes, and the packs that :meth:`retrieve` returns
    for questions of both conversations in one batch are those of the plain scores."""
    data = load_locomo(_two_conversations(tmp_path))
    m = GAAMAMemory(ENC, KeywordConceptExtractor(), seeds=8, knn=12, nearest="store")
    m.ingest(data.conversations)
    blocks = [m.blocks[c.sample_id] for c in data.conversations]
    questions = [blind(q) for c in data.conversations for q in c.questions[:6]]
    result = m.retrieve(questions)
    fewer = 0
    for b, question in enumerate(questions):
        own = 0 if question.sample_id == data.conversations[0].sample_id else 1
        q = ENC.encode([question.question])
        returned = m.store_returns(q, [question.sample_id])[question.sample_id]
        fewer += int(returned.sum()) < m.retrieval.k_nearest
        want = plain_store_scores(m, blocks, own, q)
        score, cand = m.scores(blocks[own], q, returned=returned)
        assert set(cand[:, 0].nonzero().flatten().tolist()) == set(want)
        for i, v in want.items():
            assert float(score[i, 0]) == pytest.approx(v, abs=1e-6)
        ranked = sorted(want.items(), key=lambda iv: (-iv[1], iv[0]))
        packed = m._pack(blocks[own], ranked)
        assert [it.node_id for it in result.items[b]] == [it.node_id for it in packed]
    assert fewer > 0
    counts = m.describe()["store_nearest"]  # the run's record of what the store returned
    assert (counts["questions"], counts["below_knn"]) == (len(questions), fewer)


def test_the_default_is_the_codes_in_the_class_and_the_config() -> None:
    """GAAMA's settings default to its code's behaviour, its store's defect included
    (experiments/comparison.md, issue 53): the class and the config agree on ``store``, and the
    config names the code's file."""
    import yaml

    assert GAAMAMemory(ENC, KeywordConceptExtractor()).retrieval.nearest == "store"
    path = Path(__file__).resolve().parents[2] / "configs" / "memory" / "gaama.yaml"
    assert yaml.safe_load(path.read_text())["nearest"] == "store"
    after = path.read_text().split("\nnearest:")[1][:600]
    assert "adapters/sqlite_vector.py 178-238" in after and "store" in after
