"""REALTALK and BEAM adapters: small fixtures written in each upstream format (records worked out
by hand), malformed input named, and the real files beside the checkout (counts, sha256 list)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from synapse_pt.build import build_dataset
from synapse_pt.data import DataFormatError
from synapse_pt.data.beam import load_beam
from synapse_pt.data.realtalk import load_realtalk, parse_realtalk_evidence

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _message(text, speaker, when, dia_id, caption=None):
    msg = {"clean_text": text, "speaker": speaker, "date_time": when, "img_file": [],
           "img_url": [], "dia_id": dia_id}
    if caption:
        msg["blip_caption"] = caption
    return msg


def realtalk_fixture(folder: Path) -> Path:
    """Two sessions; the day block D2 continues in session 3 (as in five upstream files); D2:2 was
    removed (a gap); one message carries an image; two messages share a time."""
    chat = {
        "name": {"speaker_1": "Ann", "speaker_2": "bob"},
        "session_1": [_message("hi", "Ann", "01.01.2024, 10:00:00", "D1:1"),
                      _message("hello", "bob", "01.01.2024, 10:00:00", "D1:2"),
                      _message("look", "Ann", "01.01.2024, 10:05:00", "D1:3", "a dog")],
        "session_1_date_time": "01.01.2024, 10:00:00",
        "events_session_1": {"agent_a": [{"sub-event": "x", "date": "", "id": "E"}]},
        "session_2": [_message("back", "bob", "02.01.2024, 09:00:00", "D2:1")],
        "session_2_date_time": "02.01.2024, 09:00:00",
        "session_3": [_message("again", "Ann", "03.01.2024, 08:00:00", "D2:3")],
        "session_3_date_time": "03.01.2024, 08:00:00",
        "qa": [
            {"question": "q0?", "answer": "a", "evidence": ["D1:1; D2:1", "D1:3."],
             "category": 1},
            {"question": "q1?", "answer": "b", "evidence": ["D1:1-D1:3", "D2:2", ""],
             "category": 2},
            {"question": "q2?", "answer": "c", "evidence": [], "category": 3},
        ],
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "Chat_1_Ann_bob.json"
    path.write_text(json.dumps(chat))
    return path


def test_realtalk_fixture(tmp_path):
    realtalk_fixture(tmp_path)
    ds = load_realtalk(tmp_path)
    (conv,) = ds.conversations
    assert (conv.sample_id, conv.speaker_a, conv.speaker_b) == ("Chat_1_Ann_bob", "Ann", "bob")
    assert [s.index for s in conv.sessions] == [1, 2, 3]
    turns = list(conv.turns())
    assert [t.dia_id for t in turns] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:3"]  # verbatim
    assert turns[3].session_index == 2 and turns[4].session_index == 3
    assert turns[0].timestamp == datetime(2024, 1, 1, 10, 0, 0)  # the message's own time
    assert turns[1].timestamp == datetime(2024, 1, 1, 10, 0, 0, 1)  # a tie kept in order
    assert turns[2].blip_caption == "a dog" and "a dog" in turns[2].content
    q0, q1, q2 = conv.questions
    assert q0.evidence == ("D1:1", "D2:1", "D1:3") and q0.evidence_unresolved == ()
    # the range takes the messages between its ends; D2:2 names no message; "" is kept
    assert q1.evidence == ("D1:1", "D1:2", "D1:3")
    assert q1.evidence_unresolved == ("D2:2", "")
    assert q2.evidence == () and q2.category == 3
    assert ds.answerable == (1, 2, 3) and ds.unanswerable is None
    assert ds.id_convention == "messages"


def test_realtalk_evidence_pieces():
    known = ["D13:45", "D20:19", "D1:2", "D1:3", "D1:4"]
    assert parse_realtalk_evidence(["D13:45:D20:19"], known) == (["D13:45", "D20:19"], [])
    assert parse_realtalk_evidence(["D1:2-D1:4"], known) == (["D1:2", "D1:3", "D1:4"], [])
    assert parse_realtalk_evidence(["D1:2. D1:4"], known) == (["D1:2", "D1:4"], [])
    assert parse_realtalk_evidence(["D58", "D:56"], known) == ([], ["D58", "D:56"])


@pytest.mark.parametrize(("edit", "field"), [
    (lambda c: c["session_1"][0].pop("clean_text"), "clean_text"),
    (lambda c: c["session_1"][1].update(date_time="1/1/2024"), "date_time"),
    (lambda c: c["qa"][0].update(category=5), "category"),
    (lambda c: c["session_2"][0].update(dia_id="D1:1"), "dia_id"),
])
def test_realtalk_errors_name_file_record_and_field(tmp_path, edit, field):
    path = realtalk_fixture(tmp_path)
    chat = json.loads(path.read_text())
    edit(chat)
    path.write_text(json.dumps(chat))
    with pytest.raises(DataFormatError, match=field) as err:
        load_realtalk(tmp_path)
    assert "Chat_1_Ann_bob" in str(err.value)


def _batch(number, messages, anchor):
    turns = [[m] for m in messages]
    turns[0][0]["time_anchor"] = anchor
    return {"batch_number": number, "time_anchor": None, "turns": turns}


def beam_fixture(root: Path, truncated: bool = False) -> Path:
    """One conversation of two batches; three questions whose evidence comes as a list, nested
    lists and a dict; an abstention question without evidence."""
    conv = root / "100K" / "1"
    (conv / "probing_questions").mkdir(parents=True, exist_ok=True)
    msgs = [{"role": r, "id": i, "content": f"m{i}"}
            for i, r in enumerate(["user", "assistant", "user", "assistant", "user", "assistant"])]
    chat = [_batch(1, msgs[:4], "March-15-2024"), _batch(2, msgs[4:], "April-01-2024")]
    (conv / "chat.json").write_text(json.dumps(chat))
    if truncated:
        (conv / "chat_trunecated.json").write_text(json.dumps(chat[:1]))
    probing = {
        "abstention": [{"question": "a?", "ideal_response": "no info", "rubric": ["say none"]}],
        "event_ordering": [{"question": "order?", "answer": "1, 2",
                            "rubric": ["first", "second"], "source_chat_ids": [0, [2, 3]]}],
        "knowledge_update": [{"question": "now?", "answer": "new",
                              "rubric": ["state: new"],
                              "source_chat_ids": {"original_info": [2], "updated_info": [4]}}],
    }
    (conv / "probing_questions" / "probing_questions.json").write_text(json.dumps(probing))
    return root / "100K"


def test_beam_fixture(tmp_path):
    ds = load_beam(beam_fixture(tmp_path))
    (conv,) = ds.conversations
    assert conv.sample_id == "beam100k-1" and (conv.speaker_a, conv.speaker_b) == (
        "user", "assistant")
    assert [s.date_time for s in conv.sessions] == [datetime(2024, 3, 15), datetime(2024, 4, 1)]
    turns = list(conv.turns())
    assert [t.dia_id for t in turns] == [f"M{i}" for i in range(6)]
    assert [t.speaker for t in turns[:2]] == ["user", "assistant"]  # both stored
    assert turns[1].timestamp == datetime(2024, 3, 15, 0, 1)  # a minute after its batch's date
    abst, order, update = conv.questions
    assert (abst.category, abst.evidence, abst.answer) == (1, (), "no info")
    assert order.category == 3 and order.evidence == ("M0", "M2", "M3")
    assert order.rubric == ("first", "second")
    assert update.category == 6 and update.evidence == ("M2", "M4")
    assert ds.answerable == tuple(range(2, 11)) and ds.unanswerable == 1
    assert any("1 question(s) carry no evidence" in n for n in ds.notes)


def test_beam_reads_the_truncated_chat_where_upstream_does(tmp_path):
    ds = load_beam(beam_fixture(tmp_path, truncated=True))
    assert ds.num_turns == 4  # the first batch only
    update = ds.conversations[0].questions[2]
    assert update.evidence == ("M2",) and update.evidence_unresolved == ("M4",)
    assert any("chat_trunecated.json read for 1" in n for n in ds.notes)


def test_beam_errors_name_the_field(tmp_path):
    folder = beam_fixture(tmp_path)
    chat_path = folder / "1" / "chat.json"
    chat = json.loads(chat_path.read_text())
    chat[1]["turns"][0][0]["time_anchor"] = "15/03/2024"
    chat_path.write_text(json.dumps(chat))
    with pytest.raises(DataFormatError, match="time_anchor"):
        load_beam(folder)
    chat[1]["turns"][0][0]["time_anchor"] = "April-01-2024"
    chat[1]["turns"][1][0]["id"] = 0
    chat_path.write_text(json.dumps(chat))
    with pytest.raises(DataFormatError, match="repeated message id 0"):
        load_beam(folder)


def _real(folder: str) -> Path:
    path = SHARED / folder
    if not path.is_dir():
        pytest.skip(f"{path} not beside the checkout")
    return path


def test_the_real_realtalk_files():
    ds = load_realtalk(_real("realtalk"))
    assert (len(ds), ds.num_turns, ds.num_questions) == (10, 8944, 728)
    cats = [q.category for q in ds.questions()]
    assert (cats.count(1), cats.count(2), cats.count(3)) == (301, 319, 108)
    built = build_dataset({"name": "realtalk", "format": "realtalk", "path": str(
        _real("realtalk"))})
    assert built.upstream == "identical"


@pytest.mark.parametrize(("scale", "counts"), [("100K", (20, 5094, 400, 355)),
                                               ("500K", (35, 38058, 700, 629))])
def test_the_real_beam_files(scale, counts):
    folder = _real(f"beam/{scale}")
    built = build_dataset({"name": f"beam_{scale.lower()}", "format": "beam",
                           "path": str(folder)})
    with_evidence = sum(bool(q.evidence) for q in built.questions())
    assert (len(built), built.num_turns, built.num_questions, with_evidence) == counts
    assert built.upstream == "identical"  # every file read against the data folder's SHA256SUMS
