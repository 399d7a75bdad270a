"""Dataset notes describe the subset that runs, not the whole folder (issue 42, item 7): a note
on the conversations and questions (truncated chats, questions without evidence, unresolved
evidence) is computed again by :meth:`Dataset.subset`; a note on the file stays."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from benchmark_fixtures import beam_fixture, realtalk_fixture

from synapse_pt.commands.build import build_dataset
from synapse_pt.data import load_locomo, sample_path
from synapse_pt.data.beam import load_beam
from synapse_pt.data.realtalk import load_realtalk

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _two_beam_conversations(tmp_path: Path) -> Path:
    """Conversation 1 read from its whole chat, conversation 2 (a copy) from a truncated one:
    one question without evidence (the abstention question) in each."""
    folder = beam_fixture(tmp_path / "a")
    second = beam_fixture(tmp_path / "b", truncated=True) / "1"
    shutil.copytree(second, folder / "2")
    return folder


def test_beam_notes_count_the_subset(tmp_path):
    whole = load_beam(_two_beam_conversations(tmp_path))
    assert any("chat_trunecated.json read for 1 conversations (beam100k-2)" in n
               for n in whole.notes)
    assert any(n.startswith("2 question(s) carry no evidence") for n in whole.notes)
    first = whole.subset(max_conversations=1)
    assert [c.sample_id for c in first] == ["beam100k-1"]
    # the conversation read from the truncated chat is not in the subset: no note names it
    assert not any("beam100k-2" in n for n in first.notes), first.notes
    assert any(n == "1 question(s) carry no evidence (left out of retrieval metrics): "
               "beam100k-1/0" for n in first.notes), first.notes
    # only the questions with evidence: no question without evidence is left to name
    answered = whole.subset(question_categories=[3, 6])
    assert not any("carry no evidence" in n for n in answered.notes), answered.notes
    assert any("beam100k-2" in n for n in answered.notes)  # both conversations still held
    # the whole folder's notes are untouched by a subset taken of it
    assert any("beam100k-2" in n for n in whole.notes)


def test_realtalk_unresolved_evidence_counted_on_the_subset(tmp_path):
    realtalk_fixture(tmp_path)
    whole = load_realtalk(tmp_path)
    assert any("2 evidence piece(s) name no message" in n for n in whole.notes)
    first = whole.subset(max_questions=1)  # q0: every piece resolves
    assert not any("evidence piece(s)" in n for n in first.notes), first.notes


def test_file_notes_stay_after_a_subset():
    dataset = load_locomo(sample_path(), name="sample")
    dataset.notes.append("a note on the file")
    assert "a note on the file" in dataset.subset(max_questions=1).notes


def test_the_real_beam_subset_notes():
    folder = Path(os.environ.get("SYNAPSE_BEAM_100K") or SHARED / "beam" / "100K")
    if not folder.is_dir():
        pytest.skip(f"{folder} not beside the checkout")
    whole = build_dataset({"name": "beam_100k", "format": "beam", "path": str(folder)})
    two = build_dataset({"name": "beam_100k", "format": "beam", "path": str(folder),
                         "max_conversations": 2})
    held = {c.sample_id for c in two}
    others = {c.sample_id for c in whole} - held
    for note in two.notes:
        named = {s for s in others if f"{s}," in note + "," or f"{s}/" in note or f"{s})" in note}
        assert not named, (note, named)
    no_evidence = sum(not q.evidence for q in two.questions())
    assert any(n.startswith(f"{no_evidence} question(s) carry no evidence") for n in two.notes), (
        two.notes)
    assert no_evidence < sum(not q.evidence for q in whole.questions())
