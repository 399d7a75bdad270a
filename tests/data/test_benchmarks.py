"""REALTALK and BEAM adapters: small fixtures written in each upstream format (records worked out
by hand), malformed input named, and the real files beside the checkout (counts, sha256 list)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from benchmark_fixtures import beam_fixture, realtalk_fixture

from synapse_pt.data import DataFormatError
from synapse_pt.data.beam import load_beam
from synapse_pt.data.realtalk import load_realtalk, parse_realtalk_evidence
from synapse_pt.data.resolve import build_dataset

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


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


def test_the_registry_reads_each_declaration():
    """Each benchmark is found by its ``dataset.format`` alone (synapse_pt/data/benchmark.py)."""
    from synapse_pt.common.errors import ConfigError
    from synapse_pt.data.benchmark import benchmarks
    from synapse_pt.data.categories import BEAM, OFFICIAL, REALTALK
    from synapse_pt.data.resolve import build_audit, dataset_categories

    found = benchmarks()
    assert sorted(found) == ["beam", "locomo", "locomo_plus", "realtalk"]
    assert (found["beam"].folder, found["realtalk"].folder, found["locomo"].folder) == (
        True, True, False)
    assert [f for f, b in found.items() if b.audit is not None] == ["locomo"]
    assert dataset_categories({"format": "beam"}) == BEAM
    assert dataset_categories({"format": "realtalk"}) == REALTALK
    assert dataset_categories({"format": "locomo_plus"}) == {1: "causal", 2: "state", 3: "goal",
                                                             4: "value"}
    assert found["locomo_plus"].folder and found["locomo_plus"].options is not None
    assert dataset_categories({}) == OFFICIAL
    with pytest.raises(ConfigError, match=r"dataset.format must be one of \['beam', 'locomo', "
                                          r"'locomo_plus', 'realtalk'\].*got 'nope'"):
        build_dataset({"format": "nope"})
    with pytest.raises(ConfigError, match=r"only dataset.format=\['locomo'\] has an audited gold; "
                                          "realtalk takes dataset.gold=official"):
        build_audit({"format": "realtalk", "name": "realtalk", "gold": "audited"}, None)
