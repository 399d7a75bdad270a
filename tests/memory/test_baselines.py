"""The turn-level baselines (SPEC §2) and the RetrievalResult container.

Two conversations: the shipped sample and a renamed copy whose turns carry a marker word and dates
a year later, so a retrieved item shows which conversation it came from.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest
import torch

from synapse_pt.data import load_locomo, sample_path
from synapse_pt.data.schema import Conversation, Dataset, Question
from synapse_pt.memory.base import RetrievalResult
from synapse_pt.memory.baselines import (
    BM25Memory,
    FullContext,
    HybridRRF,
    VectorRAG,
    descending_rank,
)
from synapse_pt.models.hashing import HashingEncoder
from synapse_pt.retrieval.items import EPISODIC, RetrievedItem
from synapse_pt.retrieval.tokenize import tokenize

MARK = "zanzibar"
COPY_ID = "sample-copy"


def renamed_copy(conv: Conversation, sample_id: str = COPY_ID) -> Conversation:
    """The same conversation under another id, every turn marked with :data:`MARK` and dated a
    year (366 days) later."""
    shift = timedelta(days=366)
    sessions = tuple(
        dataclasses.replace(
            s, date_time=s.date_time + shift,
            turns=tuple(dataclasses.replace(t, sample_id=sample_id, text=f"{t.text} {MARK}",
                                            timestamp=t.timestamp + shift) for t in s.turns))
        for s in conv.sessions)
    questions = tuple(dataclasses.replace(q, sample_id=sample_id) for q in conv.questions)
    return dataclasses.replace(conv, sample_id=sample_id, sessions=sessions, questions=questions)


@pytest.fixture(scope="module")
def two() -> Dataset:
    ds = load_locomo(sample_path(), name="sample")
    conv = ds.conversations[0]
    return Dataset([conv, renamed_copy(conv)], ds.path, "two")


def ask(sample_id: str, text: str, index: int = 0) -> Question:
    return Question(sample_id, index, text, None, 0, (), ())


def make(kind: str, **kw):
    enc = HashingEncoder(256)
    return {"vector_rag": lambda: VectorRAG(enc, **kw), "bm25": lambda: BM25Memory(**kw),
            "hybrid": lambda: HybridRRF(enc, **kw), "full": lambda: FullContext(**kw)}[kind]()


KINDS = ["vector_rag", "bm25", "hybrid", "full"]


@pytest.mark.parametrize("kind", KINDS)
def test_shapes_and_item_fields(two: Dataset, kind: str) -> None:
    memory = make(kind) if kind == "full" else make(kind, k=7)
    memory.ingest(two.conversations)
    questions = list(two.questions())
    result = memory.retrieve(questions)
    b = len(questions)
    assert len(result.items) == b
    assert result.c_ret.shape == (b,) and result.c_ret.dtype == torch.float32
    assert result.gated.shape == (b,) and result.gated.dtype == torch.bool
    assert not result.gated.any()  # no tau_gate: the baselines answer everything
    n_turns = two.conversations[0].num_turns
    for row in result.items:
        assert len(row) == (n_turns if kind == "full" else 7)
        assert all(it.kind == EPISODIC and it.timestamp is not None and it.speaker for it in row)
        assert len({it.node_id for it in row}) == len(row)
    if kind != "full":
        # items come best first; c_ret is the top item's score
        for row, c in zip(result.items, result.c_ret.tolist(), strict=True):
            scores = [it.score for it in row]
            assert scores == sorted(scores, reverse=True)
            assert c == pytest.approx(scores[0])
    assert memory.describe()["memory"] == memory.name


@pytest.mark.parametrize("kind", KINDS)
def test_each_question_only_retrieves_its_own_conversation(two: Dataset, kind: str) -> None:
    memory = make(kind) if kind == "full" else make(kind, k=30)
    memory.ingest(two.conversations)
    # the marker word in the query pulls lexical and dense scores towards the copy's turns
    questions = [ask("sample-1", f"{MARK} pottery class {MARK}"), ask(COPY_ID, "pottery class"),
                 *two.questions()]
    result = memory.retrieve(questions)
    for q, row in zip(questions, result.items, strict=True):
        assert row
        from_copy = [MARK in it.text for it in row]
        assert all(from_copy) if q.sample_id == COPY_ID else not any(from_copy)
        year = 2025 if q.sample_id == COPY_ID else 2024
        assert all(it.timestamp.year == year for it in row)


def test_bm25_ranks_the_turn_with_the_rare_query_word_first(two: Dataset) -> None:
    memory = BM25Memory(k=5)
    memory.ingest(two.conversations)
    turns = list(two.conversations[0].turns())
    words = [set(tokenize(t.content)) for t in turns]
    rare = sorted(w for w in set().union(*words)
                  if len(w) >= 6 and sum(w in ws for ws in words) == 1)
    assert len(rare) >= 5
    for word in rare[::max(1, len(rare) // 5)]:  # a handful spread over the alphabet
        holders = [t.dia_id for t, ws in zip(turns, words, strict=True) if word in ws]
        result = memory.retrieve([ask("sample-1", f"the {word}"), ask(COPY_ID, word)])
        assert [row[0].node_id for row in result.items] == holders * 2
        assert result.items[0][0].score > result.items[0][1].score


def test_vector_rag_finds_a_turn_by_its_own_text(two: Dataset) -> None:
    memory = VectorRAG(HashingEncoder(512), k=3)
    memory.ingest(two.conversations)
    turn = list(two.conversations[0].turns())[9]
    result = memory.retrieve([ask("sample-1", f"{turn.speaker}: {turn.content}")])
    assert result.items[0][0].node_id == turn.dia_id
    assert result.c_ret[0].item() == pytest.approx(1.0, abs=1e-5)


def test_gate_threshold_on_c_ret(two: Dataset) -> None:
    memory = VectorRAG(HashingEncoder(256), k=5, tau_gate=0.5)
    memory.ingest(two.conversations)
    turn = list(two.conversations[0].turns())[3]
    result = memory.retrieve([ask("sample-1", turn.content), ask("sample-1", "quantum xylophone")])
    assert result.gated.tolist() == [False, True]
    assert (result.gated == (result.c_ret < 0.5)).all()


def test_rrf_formula_on_a_hand_made_case(monkeypatch: pytest.MonkeyPatch) -> None:
    # 4 nodes, 2 queries; node 3 belongs to another conversation for query 1
    dense = torch.tensor([[0.9, 0.1], [0.5, 0.8], [0.7, 0.3], [0.1, 0.95]])
    lexical = torch.tensor([[0.0, 2.0], [3.0, 1.0], [1.0, 0.5], [2.0, 4.0]])
    mask = torch.tensor([[True, True], [True, True], [True, True], [True, False]])
    # 1-based descending ranks within each column; masked rows rank last
    assert descending_rank(dense, mask).tolist() == [[1, 3], [3, 1], [2, 2], [4, 4]]
    assert descending_rank(lexical, mask).tolist() == [[4, 1], [1, 2], [3, 3], [2, 4]]

    memory = HybridRRF(HashingEncoder(8), k_rrf=60)
    monkeypatch.setattr(memory, "_dense", lambda qs: dense)
    monkeypatch.setattr(memory, "_lexical", lambda qs, g: lexical)
    got = memory.score([ask("a", "x"), ask("a", "y")], mask, torch.zeros(2, dtype=torch.long))

    def rrf(r_dense: int, r_lex: int, k: int = 60) -> float:
        return 1 / (k + r_dense) + 1 / (k + r_lex)

    expected = torch.tensor([[rrf(1, 4), rrf(3, 1)], [rrf(3, 1), rrf(1, 2)],
                             [rrf(2, 3), rrf(2, 3)], [rrf(4, 2), rrf(4, 4)]])
    torch.testing.assert_close(got.float(), expected)
    # query 0: node 1 (ranks 3 and 1) beats node 0 (ranks 1 and 4): 1/63 + 1/61 > 1/61 + 1/64
    assert got[:, 0].argmax().item() == 1


def test_hybrid_fuses_both_rankings(two: Dataset) -> None:
    """On real data: the order equals RRF over the dense and BM25 rankings (ties by turn order)."""
    memory = HybridRRF(HashingEncoder(256), k=40, k_rrf=60)
    memory.ingest(two.conversations[:1])
    q = [ask("sample-1", "Who taught the pottery class?")]
    hybrid = [it.node_id for it in memory.retrieve(q).items[0]]
    ids = [dia for _, dia in memory.keys]

    def ranks(scores: list[float]) -> dict[str, int]:
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        return {ids[i]: r for r, i in enumerate(order, 1)}

    d_rank = ranks(memory._dense(q)[:, 0].tolist())
    l_rank = ranks(memory._lexical(q, torch.zeros(1, dtype=torch.long))[:, 0].tolist())
    assert l_rank != d_rank
    scores = {n: 1 / (60 + d_rank[n]) + 1 / (60 + l_rank[n]) for n in ids}
    assert [scores[n] for n in hybrid] == sorted(scores.values(), reverse=True)
    assert [it.score for it in memory.retrieve(q).items[0]] == pytest.approx(
        sorted(scores.values(), reverse=True), rel=1e-6)


def test_full_context_returns_every_turn_in_order(two: Dataset) -> None:
    memory = FullContext()
    memory.ingest(two.conversations)
    result = memory.retrieve([ask(COPY_ID, "anything"), ask("sample-1", "anything")])
    for row, conv in zip(result.items, reversed(two.conversations), strict=True):
        assert [it.node_id for it in row] == [t.dia_id for t in conv.turns()]
        assert [it.text for it in row] == [f"{t.speaker}: {t.content}" for t in conv.turns()]
        stamps = [it.timestamp for it in row]
        assert stamps == sorted(stamps)
    assert result.c_ret.tolist() == [1.0, 1.0] and not result.gated.any()


def test_errors_name_the_problem(two: Dataset) -> None:
    memory = BM25Memory(k=3)
    with pytest.raises(RuntimeError, match="before ingest"):
        memory.retrieve([ask("sample-1", "x")])
    memory.ingest(two.conversations[:1])
    with pytest.raises(ValueError, match="already ingested"):
        memory.ingest(two.conversations[:1])
    with pytest.raises(KeyError, match="not ingested"):
        memory.retrieve([ask("nowhere", "x")])
    with pytest.raises(ValueError, match="needs an encoder"):
        VectorRAG(None)


def test_a_later_ingest_adds_a_conversation(two: Dataset) -> None:
    memory = BM25Memory(k=3)
    memory.ingest(two.conversations[:1])
    memory.ingest(two.conversations[1:])
    result = memory.retrieve([ask(COPY_ID, "greyhound"), ask("sample-1", "greyhound")])
    assert MARK in result.items[0][0].text and MARK not in result.items[1][0].text


def test_retrieval_result_checks_shapes_and_lists_ids() -> None:
    items = [[RetrievedItem("D1:2", "a", EPISODIC, 0.9, datetime(2024, 1, 1)),
              RetrievedItem("S:3", "b", "semantic", 0.5)], []]
    result = RetrievalResult(items, torch.tensor([0.9, 0.0]), torch.tensor([False, True]))
    assert result.node_ids() == [["D1:2", "S:3"], []]
    assert torch.equal(result.gate_score, result.c_ret)  # the paper's gate thresholds C_ret
    with pytest.raises(ValueError, match=r"'c_ret': \(1,\).*must all be \[2\]"):
        RetrievalResult(items, torch.tensor([0.9]), torch.tensor([False, True]))
    with pytest.raises(ValueError, match=r"'gated': \(1, 2\)"):
        RetrievalResult(items, torch.tensor([0.9, 0.1]), torch.tensor([[False, True]]))
    with pytest.raises(ValueError, match=r"gate_signals\['ownership'\]"):
        RetrievalResult(items, torch.tensor([0.9, 0.1]), torch.tensor([False, True]),
                        gate_signals={"ownership": torch.ones(3)})


@pytest.mark.parametrize("k", [0, -3, 2.5, True])
def test_k_must_be_a_positive_integer(k) -> None:
    # memory=bm25 memory.k=-3 used to return all but 3 turns (Python slicing)
    with pytest.raises(ValueError, match="memory.k must be an integer >= 1"):
        BM25Memory(k=k)
