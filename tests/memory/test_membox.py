"""Membox's LLM-free build (synapse_pt/memory/membox.py): the Topic Loom rule by hand, boxes
against the sessions, the Trace Weaver and the retrieval against plain loops on the sample."""

from __future__ import annotations

import pytest
import torch

from synapse_pt.data import load_locomo, sample_path
from synapse_pt.eval.pipeline import blind
from synapse_pt.graph.extraction import KeywordConceptExtractor
from synapse_pt.memory.membox import MemboxMemory, topic_boundaries
from synapse_pt.models.hashing import HashingEncoder

ENC = HashingEncoder(64)


@pytest.fixture(scope="module")
def conv():
    return load_locomo(sample_path()).conversations[0]


def unit(*rows):
    x = torch.tensor(rows, dtype=torch.float32)
    return x / x.norm(dim=1, keepdim=True)


def test_topic_loom_rule_by_hand() -> None:
    # turns 0, 1 about "a"; turn 2 joins (cos with mean(0, 1) = 1); turn 3 about "b" opens;
    # turn 4 joins its box without a test (second message); turn 5 compared with mean(3, 4)
    emb = unit([1, 0], [1, 0], [1, 0], [0, 1], [1, 0], [0.2, 1])
    assert topic_boundaries(emb, 0.5) == [True, False, False, True, False, False]
    # cos(turn 5, mean(3, 4)) = (0.2 + 1) / (|(0.2, 1)| |(1, 1)|) ~ 0.83: joins at 0.8, opens at 0.9
    assert topic_boundaries(emb, 0.9)[5] is True


@pytest.fixture(scope="module")
def memory(conv):
    m = MemboxMemory(ENC, KeywordConceptExtractor(), boundary_threshold=0.2)
    m.ingest([conv])
    return m


def test_boxes_cover_every_turn_once_and_never_straddle_a_session(conv, memory) -> None:
    covered = [t.dia_id for box in memory.boxes for t in box.turns]
    assert covered == [t.dia_id for t in conv.turns()]
    for box in memory.boxes:
        assert len({t.session_index for t in box.turns}) == 1
        assert 1 <= len(box.keywords) <= 8 and box.topic == box.keywords[0]
        assert box.lines[0].endswith(f"{box.turns[0].speaker}: {box.turns[0].content}")
    sessions = {t.session_index for t in conv.turns()}
    assert len(memory.boxes) >= len(sessions)  # a new session always closes the box


def test_trace_weaver_equals_a_plain_loop(conv, memory) -> None:
    stored: list[tuple[torch.Tensor, int]] = []  # (event embedding, trace)
    traces = 0
    expected = {}
    for b, box in enumerate(memory.boxes):
        emb = ENC.encode([e for e, _, _ in box.events])
        new = []
        for ei in range(len(box.events)):
            sims = [float(v @ emb[ei]) for v, _ in stored]
            if sims and max(sims) >= 0.5:
                trace = stored[sims.index(max(sims))][1]
            else:
                trace, traces = traces, traces + 1
            expected[(b, ei)] = trace
            new.append((emb[ei], trace))
        stored.extend(new)  # a box's events join the store after the box is woven
    assert memory.event_trace == expected


def test_retrieval_top_boxes_and_trace_mode(conv, memory) -> None:
    questions = [blind(q) for q in conv.questions[:6]]
    memory.configure_retrieval(mode="trace", k=2)
    trace = memory.retrieve(questions)
    memory.configure_retrieval(mode="compact")
    compact = memory.retrieve(questions)
    box_emb = ENC.encode([b.index_text() for b in memory.boxes])
    for j, q in enumerate(questions):
        cos = (box_emb @ ENC.encode([q.question])[0]).tolist()
        want = sorted(range(len(cos)), key=lambda b: (-cos[b], b))[:2]
        assert [it.node_id for it in compact.items[j]] == [f"B:{b}" for b in want]
        assert [it.covers for it in compact.items[j]] == [
            tuple(t.dia_id for t in memory.boxes[b].turns) for b in want]
        kinds = [it.kind for it in trace.items[j]]
        assert kinds[0] == "box" and set(kinds) <= {"box", "trace"}
        assert [it.node_id for it in trace.items[j] if it.kind == "box"] == [
            f"B:{b}" for b in want]
        assert float(compact.c_ret[j]) == pytest.approx(cos[want[0]], abs=1e-5)


def test_bad_settings_are_named() -> None:
    with pytest.raises(ValueError, match="memory.mode"):
        MemboxMemory(ENC, KeywordConceptExtractor(), mode="verbose")
    with pytest.raises(ValueError, match="memory.k"):
        MemboxMemory(ENC, KeywordConceptExtractor(), k=0)


def test_fused_ranking_scores_a_box_by_its_best_turn(conv) -> None:
    from synapse_pt.memory.fused import FusedMemory

    args = {"weights": {"dense": 1.0, "bm25": 1.0}, "rho": 0.0}
    m = MemboxMemory(ENC, KeywordConceptExtractor(), mode="compact", k=3, fused_ranking=args)
    m.ingest([conv])
    ref = FusedMemory(ENC, **args)
    ref.ingest([conv])
    questions = [blind(q) for q in conv.questions[:4]]
    fused, row = ref.normalised_scores(questions), ref.row_of()
    result = m.retrieve(questions)
    for j in range(len(questions)):
        box_score = [max(float(fused[row[(conv.sample_id, t.dia_id)], j]) for t in b.turns)
                     for b in m.boxes]
        want = sorted(range(len(box_score)), key=lambda b: (-box_score[b], b))[:3]
        assert [it.node_id for it in result.items[j]] == [f"B:{b}" for b in want]
