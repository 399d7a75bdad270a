"""Membox's LLM-free build (synapse_pt/memory/membox/memory.py): the Topic Loom rule by hand, boxes
against the sessions, the Trace Weaver and the retrieval against plain loops on the sample."""

from __future__ import annotations

from datetime import datetime

import pytest
import torch

from synapse_pt.data import load_locomo, sample_path
from synapse_pt.eval.qa.pipeline import blind
from synapse_pt.graph.extraction import KeywordConceptExtractor
from synapse_pt.memory.membox.memory import MemboxMemory, topic_boundaries
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


def test_code_weaver_equals_a_plain_loop(conv, memory) -> None:
    """The code's weave, LLM-free: per event the trace holding its most similar event (ties:
    the older trace) is a candidate when >= 0.5; each candidate trace takes every event of the
    box whose best cosine to that trace is >= 0.5 (so an event may join several); the events
    that join none form one new trace (the stated rule for the code's LLM grouping)."""
    traces: list[list[tuple[int, int]]] = []
    emb_of: dict[tuple[int, int], torch.Tensor] = {}
    for b, box in enumerate(memory.boxes):
        if not box.events:
            continue
        emb = ENC.encode([e for e, _, _ in box.events])
        for ei in range(len(box.events)):
            emb_of[(b, ei)] = emb[ei]
        best_of = {t: [max(float(emb_of[k] @ emb[ei]) for k in keys)
                       for ei in range(len(box.events))] for t, keys in enumerate(traces)}
        selected = set()
        for ei in range(len(box.events)):
            if best_of:
                top = max(best_of, key=lambda t: (best_of[t][ei], -t))
                if best_of[top][ei] >= 0.5:
                    selected.add(top)
        matched = set()
        for t in sorted(selected):
            joins = [ei for ei in range(len(box.events)) if best_of[t][ei] >= 0.5]
            traces[t].extend((b, ei) for ei in joins)
            matched.update(joins)
        rest = [ei for ei in range(len(box.events)) if ei not in matched]
        if rest:
            traces.append([(b, ei) for ei in rest])
    assert memory.traces == traces


def test_unmatched_events_of_a_box_form_one_chain_by_hand() -> None:
    """Box 0's two events are unrelated (cos 0) and there is no trace yet: they form one trace.
    Box 1's event (cos 1 with "walk") then joins the trace holding "walk", the one chain."""
    from synapse_pt.memory.membox.memory import Box

    def events_box(texts):
        return Box("s", [], [], ["k"], "t", [(t, ("D1:1",), datetime(2023, 5, 8))
                                             for t in texts])

    class Fixed(HashingEncoder):
        """Unit vectors by hand: "walk" and "run" orthogonal."""

        def encode(self, texts):
            table = {"walk": [1.0, 0.0], "run": [0.0, 1.0], "walk more": [1.0, 0.0]}
            return torch.tensor([table[t] for t in texts])

    m = MemboxMemory(Fixed(2), KeywordConceptExtractor())
    m.boxes = [events_box(["walk", "run"]), events_box(["walk more"])]
    m._weave(0)
    assert m.traces == [[(0, 0), (0, 1), (1, 0)]]


def test_a_sweep_cannot_set_an_unknown_mode(memory) -> None:
    """configure_retrieval checks mode as the constructor does."""
    with pytest.raises(ValueError, match=r"memory.mode must be one of .*'traces'"):
        memory.configure_retrieval(mode="traces")
    assert memory.mode == "trace"


def test_retrieval_top_boxes_and_trace_mode(conv, memory) -> None:
    questions = [blind(q) for q in conv.questions[:6]]
    memory.configure_retrieval(mode="trace", k=3)
    trace = memory.retrieve(questions)
    memory.configure_retrieval(mode="compact", k=2)
    compact = memory.retrieve(questions)
    box_emb = ENC.encode([b.index_text() for b in memory.boxes])
    for j, q in enumerate(questions):
        cos = (box_emb @ ENC.encode([q.question])[0]).tolist()
        want = sorted(range(len(cos)), key=lambda b: (-cos[b], b))
        assert [it.node_id for it in compact.items[j]] == [f"B:{b}" for b in want[:2]]
        assert [it.covers for it in compact.items[j]] == [
            tuple(t.dia_id for t in memory.boxes[b].turns) for b in want[:2]]
        # the code's trace context: rank order, each box then its first trace; a box whose
        # trace was shown, or without one, left out
        expected, shown = [], set()
        for b in want[:3]:
            first = min((t for ei in range(len(memory.boxes[b].events))
                         for t in memory.event_traces[(b, ei)]), default=None)
            if first is None or first in shown:
                continue
            shown.add(first)
            expected += [f"B:{b}", f"T:{first}"]
        assert [it.node_id for it in trace.items[j]] == expected
        assert float(compact.c_ret[j]) == pytest.approx(cos[want[0]], abs=1e-5)


def test_index_text_carries_the_topic_phrase(memory) -> None:
    box = memory.boxes[0]
    assert box.index_text().endswith(f"{box.topic} {', '.join(box.keywords)}")


def test_bad_settings_are_named() -> None:
    with pytest.raises(ValueError, match="memory.mode"):
        MemboxMemory(ENC, KeywordConceptExtractor(), mode="verbose")
    with pytest.raises(ValueError, match="memory.k"):
        MemboxMemory(ENC, KeywordConceptExtractor(), k=0)
    # the LLM build's settings are checked by an LLM-free build too (issue 61)
    for key, value in (("box_parse", "loose"), ("chain_parse", "lenient"),
                       ("budget_param", "tokens"), ("seed", -1), ("temperature", "hot")):
        with pytest.raises(ValueError, match=f"memory.{key}"):
            MemboxMemory(ENC, KeywordConceptExtractor(), **{key: value})


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


def test_box_index_text_beyond_the_window_reaches_the_embedding_whole(conv) -> None:
    """Issue 44: the code embeds a box's whole index text (text-embedding-3-small, 8,191-token
    window): each box is embedded as an encoder configured with ``long_text="windows"`` does,
    unlike a plain one (its first window). With a 16-token window every box text here is
    longer, so the two differ."""
    from synapse_pt.models.embedder import HFEmbedder

    enc = HFEmbedder(max_length=16)
    whole = MemboxMemory(enc, KeywordConceptExtractor(), boundary_threshold=0.3)
    whole.ingest([conv])
    texts = [b.index_text() for b in whole.boxes]
    assert all(len(enc._tokenizer(t)["input_ids"]) > 16 for t in texts)
    expected = HFEmbedder(max_length=16, long_text="windows").encode(texts)
    torch.testing.assert_close(whole.box_emb, expected, atol=1e-5, rtol=0)
    assert not torch.allclose(whole.box_emb, enc.encode(texts), atol=1e-3)


def test_box_text_is_the_codes_start_header_and_dated_lines(conv) -> None:
    """Issue 44: membox.py's _get_content_str: "Start: <start time>" then "<time> <role>:
    <text>" per message, the session's date_time string as the data writes it, no caption; a
    trace event "<box start>: <event>" (_trace_events_for_box). Read from the sample's JSON."""
    import json

    conversation = json.loads(sample_path().read_text())[0]["conversation"]
    raw = {t["dia_id"]: (conversation[f"{key}_date_time"], t["speaker"], t["text"])
           for key, turns in conversation.items()
           if key.startswith("session_") and isinstance(turns, list) for t in turns}
    m = MemboxMemory(ENC, KeywordConceptExtractor(), boundary_threshold=0.2)
    m.ingest([conv])
    for box in m.boxes:
        first = raw[box.turns[0].dia_id][0]
        assert box.content.split("\n") == [f"Start: {first}"] + [
            f"{raw[t.dia_id][0]} {raw[t.dia_id][1]}: {raw[t.dia_id][2]}" for t in box.turns]
    assert "[shares an image:" not in "".join(b.content for b in m.boxes)
    trace = next(t for t in range(len(m.traces)) if m.traces[t])
    item = m._trace_item(trace, 1.0)
    assert item.text.split("\n") == [f"{m.boxes[bb].start}: {m.boxes[bb].events[ei][0]}"
                                     for bb, ei in m.traces[trace]]
    assert all(m.boxes[bb].start == raw[m.boxes[bb].turns[0].dia_id][0]
               for bb, _ in m.traces[trace])
