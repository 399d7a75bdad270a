"""Memories ingest dialogues, never questions (issue 10, item 7): whatever a caller passes to
``MemorySystem.ingest``, the system's own code receives bare :class:`Dialogue` objects, a type with
no field for questions, gold answers or evidence."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest
import torch

from synapse_pt.data import Conversation, Dialogue, load_locomo, sample_path
from synapse_pt.memory.base import MemorySystem, RetrievalResult


class Spy(MemorySystem):
    def __init__(self) -> None:
        self.received: list[object] = []

    def ingest_dialogues(self, dialogues: Sequence[Dialogue]) -> None:
        self.received.extend(dialogues)

    def retrieve(self, questions):  # pragma: no cover - not used
        return RetrievalResult([[] for _ in questions], torch.zeros(len(questions)),
                               torch.zeros(len(questions), dtype=torch.bool))


def test_dialogue_has_no_field_for_questions_answers_or_evidence() -> None:
    fields = {f.name for f in dataclasses.fields(Dialogue)}
    assert fields == {"sample_id", "speaker_a", "speaker_b", "sessions"}
    turn_fields = {f.name for f in dataclasses.fields(type(next(
        load_locomo(sample_path()).conversations[0].turns())))}
    assert not turn_fields & {"question", "questions", "answer", "evidence", "category"}


def test_ingest_strips_questions_before_the_system_sees_them() -> None:
    conversation = load_locomo(sample_path()).conversations[0]
    assert isinstance(conversation, Conversation) and conversation.questions
    spy = Spy()
    spy.ingest([conversation])
    (got,) = spy.received
    assert type(got) is Dialogue and not hasattr(got, "questions")
    assert got.sessions == conversation.sessions and got.sample_id == conversation.sample_id
    assert list(got.turns()) == list(conversation.turns())


def test_ingest_refuses_other_types_by_position() -> None:
    conversation = load_locomo(sample_path()).conversations[0]
    with pytest.raises(TypeError, match="item 1 is a dict"):
        Spy().ingest([conversation, {"sample_id": "x"}])
