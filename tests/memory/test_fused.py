"""``memory=fused`` (synapse_pt/memory/fused.py): each signal against a plain computation, the
single-signal rankings against the baselines they stand for, and the fused ranking against
:func:`~synapse_pt.retrieval.combine.fuse` of those signals."""

from __future__ import annotations

import pytest
import torch
from rank_bm25 import BM25Okapi

from synapse_pt.data import load_locomo, sample_path
from synapse_pt.data.render import TurnRenderer, format_date
from synapse_pt.eval.qa.pipeline import blind
from synapse_pt.memory.baselines import VectorRAG
from synapse_pt.memory.fused import SIGNALS, FusedMemory
from synapse_pt.models.hashing import HashingEncoder
from synapse_pt.retrieval.dense import own_graph_mask
from synapse_pt.retrieval.text import (
    Analyzer,
    neutralise_speakers,
    resolve_pronouns,
    split_sentences,
)
from tests.two_conversations import write_two_conversations

ENC = HashingEncoder(64)


@pytest.fixture(scope="module")
def data():
    dataset = load_locomo(sample_path())
    conv = dataset.conversations[0]
    return conv, [blind(q) for q in conv.questions], list(conv.questions)


def build(conv, **kw) -> FusedMemory:
    memory = FusedMemory(ENC, **kw)
    memory.ingest([conv])
    return memory


def test_signals_equal_plain_computations(data) -> None:
    conv, questions, _ = data
    memory = build(conv, window=1)
    qg = memory.registry.graph_ids(questions, "cpu")
    sig = memory.signals(questions, qg)
    turns = list(conv.turns())
    speakers = [conv.speaker_a, conv.speaker_b]
    render = TurnRenderer("{speaker}: {text}{caption}")
    for b, q in enumerate(questions[:4]):
        neutral = ENC.encode([neutralise_speakers(q.question, speakers)])[0]
        named = ENC.encode([q.question])[0]
        for i, t in enumerate(turns[:12]):
            turn_emb = ENC.encode([render(t)])[0]
            assert float(sig["dense"][i, b]) == pytest.approx(float(turn_emb @ neutral), abs=1e-5)
            assert float(sig["dense_named"][i, b]) == pytest.approx(float(turn_emb @ named),
                                                                    abs=1e-5)
            best = max(float(e @ neutral) for e in ENC.encode(split_sentences(t.content)))
            assert float(sig["dense_sentence"][i, b]) == pytest.approx(best, abs=1e-5)
            listener = speakers[1 - speakers.index(t.speaker)]
            resolved = ENC.encode([resolve_pronouns(t.content, t.speaker, listener)])[0]
            assert float(sig["dense_resolved"][i, b]) == pytest.approx(
                float(resolved @ named), abs=1e-5)
            spoken_by = speakers.index(t.speaker)
            names = [s for s in speakers if s.lower() in q.question.lower()]
            expected = float(len(names) == 1 and names[0] == speakers[spoken_by])
            assert float(sig["speaker"][i, b]) == expected
    # BM25 signals equal rank_bm25 on the analysed turn texts and on the hand-built windows
    analyzer = Analyzer(stopwords=True, stem=True)
    okapi = BM25Okapi([analyzer(render(t)) for t in turns])
    session = [t.session_index for t in turns]
    windows = []
    for i, t in enumerate(turns):
        near = [turns[j] for j in (i - 1, i, i + 1)
                if 0 <= j < len(turns) and session[j] == session[i]]
        windows.append(f"{format_date(t)} " + " ".join(render(u) for u in near))
    okapi_w = BM25Okapi([analyzer(w) for w in windows])
    for b, q in enumerate(questions):
        torch.testing.assert_close(sig["bm25"][:, b].double(), torch.tensor(
            okapi.get_scores(analyzer(q.question)), dtype=torch.float64), atol=1e-6, rtol=0)
        torch.testing.assert_close(sig["bm25_window"][:, b].double(), torch.tensor(
            okapi_w.get_scores(analyzer(q.question)), dtype=torch.float64), atol=1e-6, rtol=0)


class RandomUnit:
    """A unit random vector per distinct text (seeded by its hash): no ties among cosines."""

    name, dim = "random-unit-32", 32

    def encode(self, texts):
        import hashlib

        rows = []
        for t in texts:
            seed = int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)
            rows.append(torch.randn(self.dim, generator=torch.Generator().manual_seed(seed)))
        out = torch.stack(rows) if rows else torch.empty(0, self.dim)
        return torch.nn.functional.normalize(out, dim=1)


@pytest.mark.parametrize(("docs", "beta"), [(1, 1.0), (5, 0.5), (500, 0.3)])
def test_dense_prf_equals_a_plain_rocchio_loop(data, docs, beta) -> None:
    conv, questions, _ = data
    enc = RandomUnit()
    memory = FusedMemory(enc, prf_docs=docs, prf_beta=beta)
    memory.ingest([conv])
    qg = memory.registry.graph_ids(questions, "cpu")
    got = memory.signals(questions, qg, ["dense_prf"])["dense_prf"]
    render = TurnRenderer("{speaker}: {text}{caption}")
    turn_emb = enc.encode([render(t) for t in conv.turns()])
    speakers = [conv.speaker_a, conv.speaker_b]
    for b, q in enumerate(questions):
        query = enc.encode([neutralise_speakers(q.question, speakers)])[0]
        first = sorted(range(len(turn_emb)), key=lambda i: -float(turn_emb[i] @ query))[:docs]
        moved = query + beta * torch.stack([turn_emb[i] for i in first]).mean(0)
        moved = moved / moved.norm()
        torch.testing.assert_close(got[:, b], turn_emb @ moved, atol=1e-5, rtol=0)


def test_dense_named_alone_ranks_as_vector_rag(data) -> None:
    conv, questions, _ = data
    fused = build(conv, weights={"dense_named": 1.0}, k=10).retrieve(questions)
    rag = VectorRAG(ENC, k=10)
    rag.ingest([conv])
    assert fused.node_ids() == rag.retrieve(questions).node_ids()


def test_fused_ranking_is_fuse_of_its_signals(data) -> None:
    conv, questions, _ = data
    weights = {"dense": 0.4, "dense_sentence": 0.3, "bm25": 0.8, "bm25_window": 0.5,
               "speaker": 0.2}
    memory = build(conv, weights=weights, rho=0.25, k=8)
    result = memory.retrieve(questions)
    qg = memory.registry.graph_ids(questions, "cpu")
    mask = own_graph_mask(memory.node_graph, qg)
    sig = memory.signals(questions, qg)
    # the fused score by hand: min-max per question, weighted sum, neighbour propagation
    fused = torch.zeros(mask.shape)
    for name, w in weights.items():
        s = sig[name].float()
        lo, hi = s.min(dim=0).values, s.max(dim=0).values
        fused += w * torch.where(hi > lo, (s - lo) / (hi - lo).clamp_min(1e-12), 0.0)
    pad = torch.cat([fused, torch.zeros(1, fused.shape[1])])
    prev = torch.where(memory.prev >= 0, memory.prev, len(fused))
    nxt = torch.where(memory.next >= 0, memory.next, len(fused))
    fused = fused + 0.25 * torch.maximum(pad[prev], pad[nxt])
    keys = [dia for _, dia in memory.keys]
    for b in range(len(questions)):
        top = fused[:, b].argsort(descending=True, stable=True)[:8].tolist()
        assert result.node_ids()[b] == [keys[i] for i in top]
        assert float(result.c_ret[b]) == pytest.approx(float(fused[top[0], b]), abs=1e-5)


def test_config_errors_name_the_key(data) -> None:
    with pytest.raises(ValueError, match="memory.weights: unknown signals"):
        FusedMemory(ENC, weights={"colour": 1.0})
    with pytest.raises(ValueError, match="memory.weights must be >= 0"):
        FusedMemory(ENC, weights={"dense": -1.0})
    with pytest.raises(ValueError, match="at least one signal"):
        FusedMemory(ENC, weights={"dense": 0.0})
    with pytest.raises(ValueError, match="memory.rho"):
        FusedMemory(ENC, rho=-0.1)
    with pytest.raises(ValueError, match="memory.bm25_b"):
        FusedMemory(ENC, bm25_b=1.5)
    with pytest.raises(ValueError, match="memory.sigma"):
        FusedMemory(ENC, sigma=-0.5)
    with pytest.raises(ValueError, match="memory.prf_docs"):
        FusedMemory(ENC, prf_docs=0)
    with pytest.raises(ValueError, match="memory.prf_beta"):
        FusedMemory(ENC, prf_beta=-1.0)


def test_evidence_index_rows_point_at_the_evidence_turns(data) -> None:
    conv, _, questions = data
    memory = build(conv)
    ev = memory.evidence_index(questions)
    for b, q in enumerate(questions):
        rows = [int(r) for r in ev[b] if r >= 0]
        assert [memory.keys[r][1] for r in rows] == list(q.evidence)


def test_session_ids_number_each_conversations_sessions_in_turn_order(data) -> None:
    conv, _, _ = data
    memory = build(conv)
    expected = {}
    ids = [expected.setdefault(t.session_index, len(expected)) for t in conv.turns()]
    assert memory.session_id.tolist() == ids and len(set(ids)) > 1


def test_prf_turns_tied_at_the_last_place_are_taken_lower_node_first() -> None:
    """Issue 42: the Rocchio centroid of ``prf_docs=2`` with the best turn (row 0) and nine turns
    tied second (rows 3-11): the second turn is row 3, the lowest tied node, whatever ``topk``
    returns among equal values. The expectation is the Rocchio formula on rows 0 and 3."""
    memory = FusedMemory(ENC, prf_docs=2, prf_beta=1.0)
    seeded = torch.Generator().manual_seed(0)
    x = torch.nn.functional.normalize(torch.randn(12, 8, generator=seeded), dim=1)
    memory.x, memory.node_graph = x, torch.zeros(12, dtype=torch.long)
    dense = torch.full((12, 1), 0.5)
    dense[0], dense[1], dense[2] = 0.9, 0.1, 0.2
    query = torch.nn.functional.normalize(torch.ones(1, 8), dim=1)
    got = memory._feedback_scores(dense, query, torch.zeros(1, dtype=torch.long))
    moved = torch.nn.functional.normalize(query[0] + (x[0] + x[3]) / 2, dim=0)
    torch.testing.assert_close(got[:, 0], x @ moved, atol=1e-6, rtol=0)


class Counting:
    """The hashing encoder, recording every text it is asked to embed."""

    def __init__(self) -> None:
        self.name, self.dim = ENC.name, ENC.dim
        self.texts: list[str] = []

    def encode(self, texts):
        self.texts.extend(texts)
        return ENC.encode(texts)


@pytest.mark.parametrize("gate", [None, {"signal": "ownership", "tau": 0.5}],
                         ids=["c_ret", "ownership"])
def test_ingestion_leaves_the_first_query_only_its_questions_to_embed(data, gate) -> None:
    """Issue 45: the pronoun-resolved turns (and the turn-signal gate's texts) are embedded at
    ingestion; the first query embeds what every query embeds, its questions (fused: neutral and
    as asked; the gate: neutral, as asked and with the speakers swapped), and ranks the same."""
    conv, questions, _ = data
    enc = Counting()
    memory = FusedMemory(enc, weights=dict.fromkeys(SIGNALS, 1.0), gate=gate)
    memory.ingest([conv])
    speakers = [conv.speaker_a, conv.speaker_b]
    resolved = {resolve_pronouns(t.content, t.speaker, speakers[1 - speakers.index(t.speaker)])
                for t in conv.turns()}
    assert resolved <= set(enc.texts)
    enc.texts.clear()
    first = memory.retrieve(questions)
    first_texts = list(enc.texts)
    enc.texts.clear()
    second = memory.retrieve(questions)
    assert first_texts == enc.texts
    assert len(first_texts) == (2 if gate is None else 5) * len(questions)
    assert first.node_ids() == second.node_ids()


def test_resolved_turns_embedded_per_ingestion_equal_one_pass(tmp_path) -> None:
    """Conversations ingested one call at a time embed only the new turns' resolved texts (as
    many texts in all as one call), and the rows equal one call's and those a memory whose
    weights leave ``dense_resolved`` out embeds on first use (not at ingestion)."""
    convs = load_locomo(write_two_conversations(tmp_path)).conversations
    memories, sent = {}, {}
    for name, weights, parts in (("whole", {"dense_resolved": 1.0}, [convs]),
                                 ("stepwise", {"dense_resolved": 1.0}, [convs[:1], convs[1:]]),
                                 ("lazy", {"dense": 1.0}, [convs])):
        enc = Counting()
        memories[name] = FusedMemory(enc, weights=weights)
        for part in parts:
            memories[name].ingest(part)
        sent[name] = len(enc.texts)
    n = len(memories["whole"].resolved)
    assert n == sum(c.num_turns for c in convs)
    assert sent["stepwise"] == sent["whole"] == sent["lazy"] + n
    for name in ("stepwise", "lazy"):
        assert torch.equal(memories[name].resolved_embeddings(),
                           memories["whole"].resolved_embeddings())
