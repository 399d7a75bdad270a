"""LoCoMo-Plus stitching (issue 59) on hand-worked cases: dates from the gaps, speakers, the order
of sessions, the items per conversation under both variants, the readings of malformed cues and
vague gaps, errors naming file, item and field; and the real files beside the checkout (counts
the notes report, the manifest)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from synapse_pt.data import DataFormatError
from synapse_pt.data.locomo_plus import (
    format_date_time,
    load_locomo_plus,
    parse_cue,
    parse_time_gap,
)

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _turn(speaker: str, dia_id: str, text: str) -> dict:
    return {"speaker": speaker, "dia_id": dia_id, "text": text}


def base_fixture(path: Path) -> Path:
    """Two LoCoMo conversations: A (Ann, Bob; sessions on 1 Jan, 1 Mar, 1 Jun 2023) and B (Cat,
    Dan; 10 and 20 May 2022)."""
    convs = [
        {"sample_id": "conv-A", "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob",
            "session_1_date_time": "1:00 pm on 1 January, 2023",
            "session_1": [_turn("Ann", "D1:1", "hello"), _turn("Bob", "D1:2", "hi")],
            "session_2_date_time": "3:30 pm on 1 March, 2023",
            "session_2": [_turn("Ann", "D2:1", "spring"), _turn("Bob", "D2:2", "yes")],
            "session_3_date_time": "10:00 am on 1 June, 2023",
            "session_3": [_turn("Bob", "D3:1", "summer")]},
         "qa": [{"question": "q?", "answer": "a", "evidence": ["D1:1"], "category": 4}]},
        {"sample_id": "conv-B", "conversation": {
            "speaker_a": "Cat", "speaker_b": "Dan",
            "session_1_date_time": "9:15 am on 10 May, 2022",
            "session_1": [_turn("Cat", "D1:1", "may")],
            "session_2_date_time": "8:00 pm on 20 May, 2022",
            "session_2": [_turn("Dan", "D2:1", "later")]},
         "qa": []},
    ]
    path.write_text(json.dumps(convs))
    return path


def item(relation: str, cue: str, trigger: str, gap: str) -> dict:
    return {"relation_type": relation, "cue_dialogue": cue, "trigger_query": trigger,
            "time_gap": gap, "model_name": "m", "scores": {}, "ranks": {},
            "final_similarity_score": 0.0}


ITEMS = [
    # 0 -> conv-A (0 mod 2)
    item("causal", "A: I quit sugar.\nB: Good call.", "A: I feel sharper lately.",
         "two months later"),
    # 1 -> conv-B: an inline B marker
    item("value", "A: I value honesty. B: Good for you.", "A: I told my boss the truth.",
         "a week later"),
    # 2 -> conv-A: no count in the gap
    item("goal", "A: I want to run a marathon.\nB: Train slowly.", "A: My knees hurt.",
         "several months later"),
    # 3 -> conv-B: the trigger spoken by B; the cue a year before the query
    item("state", "A: I broke my arm.\nB: Ouch.", "B: Can you carry this box for me?",
         "one year later"),
    # 4 -> conv-A: a literal backslash-n; digits in the gap
    item("causal", "A: I moved near the sea.\\nB: Lovely.", "A: My hair is full of salt.",
         "about 6 weeks later"),
]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "locomo_plus"
    folder.mkdir()
    (folder / "locomo_plus.json").write_text(json.dumps(ITEMS))
    return folder, base_fixture(tmp_path / "locomo10.json")


@pytest.mark.parametrize(("gap", "authors", "read"), [
    ("two weeks later", 14, 14), ("about six weeks later", 42, 42), ("a year after", 365, 365),
    ("one month later", 30, 30), ("around one week after the birth", 7, 7),
    ("two months after the challenge ended", 60, 60), ("12 months later", 360, 360),
    ("an hour later", 0, 0), ("several months later", 0, 90), ("a couple of months later", 0, 60),
    ("a few weeks later", 0, 21), ("several years later", 0, 1095), ("Three Weeks later", 21, 21),
])
def test_time_gap_days(gap, authors, read):
    assert parse_time_gap(gap) == authors
    assert parse_time_gap(gap, "read") == read


def test_cue_readings():
    assert parse_cue("A: x\nB: y") == ([("A", "x"), ("B", "y")], [])
    assert parse_cue("A: x\\nB: y") == ([("A", "x"), ("B", "y")], ["literal_newline"])
    assert parse_cue("A: x. B: y") == ([("A", "x."), ("B", "y")], ["inline_role"])
    # a marker of the same speaker inside a line is text
    assert parse_cue("A: plan A: go") == ([("A", "plan A: go")], [])
    # the authors' parser: one A turn holding the rest; a line without a marker dropped
    assert parse_cue("A: x\\nB: y", "authors") == ([("A", "x\\nB: y")], [])
    assert parse_cue("A: x. B: y", "authors") == ([("A", "x. B: y")], [])
    assert parse_cue("A: x\nnote\nB: y", "authors") == ([("A", "x"), ("B", "y")], [])


def test_format_date_time():
    assert format_date_time(datetime(2023, 5, 8, 13, 56)) == "1:56 pm on 8 May, 2023"
    assert format_date_time(datetime(2023, 5, 8, 0, 5)) == "12:05 am on 8 May, 2023"
    assert format_date_time(datetime(2023, 5, 8, 12, 0)) == "12:00 pm on 8 May, 2023"


def test_faithful_stitching_by_hand(files):
    folder, base = files
    ds = load_locomo_plus(folder, base_path=base, variant="faithful")
    assert [c.sample_id for c in ds] == [f"conv-{'ABABA'[i]}-plus{i:03d}" for i in range(5)]
    assert ds.num_questions == 5 and all(len(c.questions) == 1 for c in ds)
    c0, c1, c2, c3, c4 = ds.conversations
    # item 0: query 8 Jun 2023 10:00 (7 days after 1 Jun), cue 60 days before: 9 Apr 10:00,
    # after session 2 (1 Mar), before session 3
    assert [s.index for s in c0.sessions] == [1, 2, 1000, 3]
    cue = c0.sessions[2]
    assert cue.date_time == datetime(2023, 4, 9, 10, 0)
    assert cue.date_time_raw == "10:00 am on 9 April, 2023"
    assert [(t.dia_id, t.speaker, t.text) for t in cue.turns] == [
        ("D1000:1", "Ann", "I quit sugar."), ("D1000:2", "Bob", "Good call.")]
    assert [t.timestamp for t in cue.turns] == [datetime(2023, 4, 9, 10, 0),
                                                datetime(2023, 4, 9, 10, 1)]
    assert all(t.sample_id == "conv-A-plus000" for t in c0.turns())
    # base turns keep their LoCoMo ids and times
    assert [t.dia_id for t in c0.turns()] == ["D1:1", "D1:2", "D2:1", "D2:2", "D1000:1",
                                              "D1000:2", "D3:1"]
    (q0,) = c0.questions
    assert (q0.qa_index, q0.question, q0.category, q0.answer) == (
        0, "Ann: I feel sharper lately.", 1, None)
    assert q0.evidence == ("D1000:1", "D1000:2") == q0.evidence_raw
    # item 1: query 27 May 2022 20:00, cue 20 May 20:00, the date of session 2: after it
    assert [s.index for s in c1.sessions] == [1, 2, 1001]
    assert [(t.speaker, t.text) for t in c1.sessions[2].turns] == [("Cat", "I value honesty."),
                                                                   ("Dan", "Good for you.")]
    assert c1.questions[0].category == 4
    # item 2: "several months" gives 0 days: the cue on the query's date, after every session
    assert [s.index for s in c2.sessions] == [1, 2, 3, 1002]
    assert c2.sessions[-1].date_time == datetime(2023, 6, 8, 10, 0)
    # item 3: a year before 27 May 2022: before the first session; the trigger is B's (Dan's)
    assert [s.index for s in c3.sessions] == [1003, 1, 2]
    assert c3.sessions[0].date_time == datetime(2021, 5, 27, 20, 0)
    assert c3.questions[0].question == "Dan: Can you carry this box for me?"
    # item 4: 42 days before 8 Jun: 27 Apr 2023 10:00; the literal \n read as a line break
    assert [s.index for s in c4.sessions] == [1, 2, 1004, 3]
    assert c4.sessions[2].date_time == datetime(2023, 4, 27, 10, 0)
    assert [t.text for t in c4.sessions[2].turns] == ["I moved near the sea.", "Lovely."]
    assert ds.answerable == (1, 2, 3, 4) and ds.unanswerable is None
    assert set(ds.f1_rules.values()) == {"none"} and set(ds.judge_categories.values()) == {
        "Cognitive"}
    notes = "\n".join(ds.notes)
    assert "1 cue(s) with a literal '\\n' and 1 with an inline speaker marker" in notes
    assert "1 gap(s) parse to 0 days ('several months later' x1)" in notes
    assert "cues dated before their conversation's first session: 1" in notes
    assert "conv-A 3, conv-B 2" in notes


def test_packed_stitching_by_hand(files):
    folder, base = files
    ds = load_locomo_plus(folder, base_path=base, variant="packed")
    a, b = ds.conversations
    assert (a.sample_id, b.sample_id) == ("conv-A", "conv-B")
    assert [q.qa_index for q in a.questions] == [0, 2, 4]
    assert [q.qa_index for q in b.questions] == [1, 3]
    # every cue at its own date: 9 Apr (0), 27 Apr (4), 1 Jun session 3, 8 Jun (2)
    assert [s.index for s in a.sessions] == [1, 2, 1000, 1004, 3, 1002]
    assert [s.index for s in b.sessions] == [1003, 1, 2, 1001]
    assert a.num_turns == 5 + 3 * 2 and b.num_turns == 2 + 2 * 2
    # the LoCoMo questions of the base are not asked
    assert all(q.answer is None for q in ds.questions())
    assert {q.qa_index: q.evidence for q in ds.questions()}[4] == ("D1004:1", "D1004:2")


def test_readings_change_only_what_they_name(files):
    folder, base = files
    authors = load_locomo_plus(folder, base_path=base, variant="packed", cue_reading="authors",
                               gap_reading="read")
    a, b = authors.conversations
    # item 1 read as one A turn; item 4's literal \n kept in its text
    (cue1,) = [s for s in b.sessions if s.index == 1001]
    assert [(t.speaker, t.text) for t in cue1.turns] == [("Cat", "I value honesty. B: Good for "
                                                                 "you.")]
    assert {q.qa_index: q.evidence for q in authors.questions()}[1] == ("D1001:1",)
    # "several months" read as 90 days: 10 Mar 2023 10:00, after session 2 (1 Mar)
    assert [s.index for s in a.sessions] == [1, 2, 1002, 1000, 1004, 3]
    assert [s for s in a.sessions if s.index == 1002][0].date_time == datetime(2023, 3, 10, 10)


@pytest.mark.parametrize(("index", "edit", "field"), [
    (1, lambda it: it.pop("cue_dialogue"), "cue_dialogue"),
    (2, lambda it: it.update(relation_type="moral"), "relation_type"),
    (3, lambda it: it.update(trigger_query="I forgot the marker"), "trigger_query"),
    (0, lambda it: it.update(cue_dialogue="no markers at all"), "cue_dialogue"),
])
def test_errors_name_file_item_and_field(files, index, edit, field):
    folder, base = files
    items = json.loads((folder / "locomo_plus.json").read_text())
    edit(items[index])
    (folder / "locomo_plus.json").write_text(json.dumps(items))
    with pytest.raises(DataFormatError) as err:
        load_locomo_plus(folder, base_path=base)
    assert f"locomo_plus.json: item {index}: {field}: " in str(err.value)


@pytest.mark.skipif(not (SHARED / "locomo_plus" / "locomo_plus.json").is_file(),
                    reason="the LoCoMo-Plus data is not beside the checkout")
def test_real_files_through_the_config():
    from test_configs import make_cfg

    from synapse_pt.data.resolve import build_dataset

    ds = build_dataset(make_cfg("dataset=locomo_plus_packed").dataset)
    assert ds.upstream == "identical"
    assert len(ds) == 10 and ds.num_questions == 401
    assert [len(c.questions) for c in ds] == [41] + [40] * 9
    assert ds.num_turns == 5882 + 2 * 401  # every cue two turns under the split reading
    notes = "\n".join(ds.notes)
    assert "31 cue(s) with a literal '\\n' and 13 with an inline speaker marker" in notes
    assert "15 gap(s) parse to 0 days ('several months later' x11" in notes
    assert "in one conversation: [[124, 134], [352, 362]]" in notes
    counts = {}
    for q in ds.questions():
        counts[q.category] = counts.get(q.category, 0) + 1
    assert counts == {1: 101, 2: 100, 3: 100, 4: 100}


def test_placebo_inserts_another_items_cue(files):
    folder, base = files
    ds = load_locomo_plus(folder, base_path=base, variant="placebo")
    c0, c1, c2, c3, c4 = ds.conversations
    # conv-A holds items 0, 2, 4: item 0's memory gets item 2's cue (at item 2's date: 8 Jun),
    # item 2's gets item 4's, item 4's gets item 0's; conv-B: items 1 and 3 swap
    assert [s.index for s in c0.sessions] == [1, 2, 3, 1002]
    assert c0.questions[0].question == "Ann: I feel sharper lately."
    assert c0.questions[0].evidence == ("D1002:1", "D1002:2")
    assert [s.index for s in c2.sessions] == [1, 2, 1004, 3]
    assert [s.index for s in c4.sessions] == [1, 2, 1000, 3]
    assert [s.index for s in c1.sessions] == [1003, 1, 2]
    assert [s.index for s in c3.sessions] == [1, 2, 1001]
    assert c3.questions[0].question == "Dan: Can you carry this box for me?"
