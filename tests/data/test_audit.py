"""The audited gold (synapse_pt/data/audit.py): the written rule on entries worked by hand, on the
real audit file (it changes exactly the listed questions), and its errors."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from synapse_pt.data import DataFormatError
from synapse_pt.data.audit import (
    ANSWERABLE,
    AUDIT_SHA256,
    UNANSWERABLE,
    answering_part,
    load_audit,
    unanswerable_reason,
)
from synapse_pt.data.source import sha256_file

AUDIT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo_audit_errors.json"


@pytest.mark.parametrize(("correct_answer", "answer"), [
    # commentary in parentheses goes; content in parentheses stays
    ("December 2022 (answer is correct, citation is wrong)", "December 2022"),
    ("stuffed toy pup (Tilly)", "stuffed toy pup (Tilly)"),
    ("Three (as stated by Joanna in D25:4: 'I know this is the third time it's happened').",
     "Three"),
    ("French (Tim took French in high school, per D27:7)", "French"),
    ("A pet (D2:14), 'The Lord of the Rings' movies (D9:12)",
     "A pet, 'The Lord of the Rings' movies"),
    # a comment after "; " or after the first sentence goes
    ("Most likely yes (defensible inference); the cited evidence supports loneliness",
     "Most likely yes"),
    ("PC (D27:15-17), Nintendo console (D27:23 - Xenoblade Chronicles). Other platforms cannot "
     "be determined from the transcript text alone.", "PC, Nintendo console"),
    ("Paintings; she has recently experimented with abstract art",
     "Paintings; she has recently experimented with abstract art"),
    # the audit says the golden answer stands: the official answer is kept (None)
    ("The golden answer is factually correct; only the citation D4:36 is invalid.", None),
])
def test_answering_part(correct_answer, answer):
    assert answering_part(correct_answer) == answer


@pytest.mark.parametrize(("correct_answer", "reason"), [
    ("Cannot be determined from transcript. Nate is passionate about turtles", "refusal"),
    ("Uncertain; although the trip started badly", "refusal"),
    ("art and self-expression (but this is Caroline's bowl, not Melanie's)", "premise"),
    ("John (not Tim) got a cooking book in Italy", "premise"),
    ("aerial yoga (answer is correct, but question says 2023 when it should say 2022)", "premise"),
    ("Aerosmith (but the festival was in March 2023, not April)", "premise"),
    ("2022 (but the book title 'Nothing is Impossible' is fabricated)", "premise"),
    ("The slow cooker meal is unspecified; honey garlic chicken is a separate dish",
     "undescribed"),
    ("five months", None),
    ("French (Tim took French in high school, per D27:7)", None),
    ("On hikes, the family explores nature. The roasting happens on camping trips, not on hikes.",
     None),
])
def test_unanswerable_as_asked(correct_answer, reason):
    assert unanswerable_reason(correct_answer) == reason


@pytest.fixture(scope="module")
def audit(locomo):
    if not AUDIT.is_file():
        pytest.skip("the audit file is not beside the checkout")
    return load_audit(AUDIT, locomo, sha256_file(AUDIT))


def test_the_shared_file_is_the_audits(audit):
    assert sha256_file(AUDIT) == AUDIT_SHA256
    assert len(audit.entries) == 156 and audit.outside == 0


def test_audited_changes_exactly_the_listed_questions(locomo, audit):
    raw = json.loads(AUDIT.read_text())
    listed = {}
    for e in raw:  # locomo_<conversation index in the file>_qa<index in its qa list>
        conv, qa = e["question_id"].removeprefix("locomo_").split("_qa")
        listed[f"{locomo.conversations[int(conv)].sample_id}/{qa}"] = e
    official = list(locomo.questions())
    audited = audit.questions(official)
    assert len(audited) == len(official)
    for before, after in zip(official, audited, strict=True):
        if before.key not in listed:
            assert after is before  # untouched: the very same record
            continue
        e = listed[before.key]
        assert after.evidence_raw == tuple(e["correct_evidence"])
        assert set(after.evidence) <= set(e["correct_evidence"])
        assert (after.question, after.category, after.sample_id, after.qa_index) == (
            before.question, before.category, before.sample_id, before.qa_index)
        entry = audit.entries[before.key]
        if entry.status == UNANSWERABLE:
            assert after.answer == before.answer  # kept, and left out by the scorers
        elif e["error_type"] == "WRONG_CITATION" and e["correct_answer"] == e["golden_answer"]:
            assert after.answer == before.answer
    statuses = Counter((e.error_type, e.status) for e in audit.entries.values())
    assert statuses[("WRONG_CITATION", ANSWERABLE)] == 57
    assert sum(n for (_, st), n in statuses.items() if st == UNANSWERABLE) == 40
    # examples of each kind, read by hand from the file
    assert audit.entries["conv-26/2"].answer == "Counseling or mental health"
    assert audit.entries["conv-26/26"].status == UNANSWERABLE  # the fabricated book title
    assert audit.entries["conv-26/1"].evidence == ("D1:14",)  # a wrong citation, corrected
    assert audit.entries["conv-26/1"].answer == "2022"


def _write(tmp_path, entries):
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(entries))
    return path


def _entry(question_id, question, **overrides):
    entry = {"question_id": question_id, "question": question, "golden_answer": "x",
             "category": 1, "error_type": "WRONG_CITATION", "cited_evidence": [],
             "correct_evidence": ["D1:1"], "reasoning": "", "correct_answer": "x"}
    return {**entry, **overrides}


def test_an_id_that_does_not_resolve_is_an_error_naming_it(tmp_path, sample_dataset):
    q = next(sample_dataset.questions())
    with pytest.raises(DataFormatError, match="locomo_7_qa0"):
        load_audit(_write(tmp_path, [_entry("locomo_7_qa0", q.question)]), sample_dataset, "h")
    with pytest.raises(DataFormatError, match="question_id"):
        load_audit(_write(tmp_path, [_entry("conv-26_qa0", q.question)]), sample_dataset, "h")
    with pytest.raises(DataFormatError, match="is not"):
        load_audit(_write(tmp_path, [_entry("locomo_0_qa0", "another question?")]),
                   sample_dataset, "h")
    with pytest.raises(DataFormatError, match="error_type"):
        load_audit(_write(tmp_path, [_entry("locomo_0_qa0", q.question, error_type="TYPO")]),
                   sample_dataset, "h")
    with pytest.raises(DataFormatError, match="locomo_0_qa999"):
        load_audit(_write(tmp_path, [_entry("locomo_0_qa999", "gone")]), sample_dataset, "h")
    subset = sample_dataset.subset(max_questions=2)
    audit = load_audit(_write(tmp_path, [_entry("locomo_0_qa0", q.question),
                                         _entry("locomo_0_qa5", "asked elsewhere")]), subset, "h")
    assert len(audit.entries) == 1 and audit.outside == 1  # a question the subset leaves out
