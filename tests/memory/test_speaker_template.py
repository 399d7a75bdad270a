"""Turns are indexed with their speaker (SPEC §1.1): a question naming a person finds that
person's turn. Both speakers say parallel things, so only the speaker's name tells the turns
apart; with the utterance alone (the landed code before the fidelity fix) the other speaker's
turn, which comes first, wins the tie."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from synapse_pt.data.schema import Conversation, Question, Session, Turn
from synapse_pt.eval.qa.pipeline import blind
from synapse_pt.graph.extraction import KeywordConceptExtractor
from synapse_pt.memory.baselines import BM25Memory, VectorRAG
from synapse_pt.memory.synapse import SynapseMemory
from synapse_pt.retrieval.items import EPISODIC

PAIRS = [  # (Tomas says, Nora says, question about Nora)
    ("I work at the bakery downtown.", "I work at the library downtown.",
     "Where does Nora work?"),
    ("My dog is a beagle called Pepper.", "My dog is a greyhound called Biscuit.",
     "What is the name of Nora's dog?"),
    ("I play the violin on weekends.", "I play the cello on weekends.",
     "Which instrument does Nora play?"),
    ("I grew up in Porto.", "I grew up in Leeds.", "Where did Nora grow up?"),
]
FILLER = ["How was your week?", "Pretty busy, but good.", "Glad to hear it.",
          "Let's catch up soon.", "Sure, talk later."]


def conversation() -> tuple[Conversation, list[Question]]:
    start = datetime(2024, 3, 3, 14, 0)
    texts = [(s, t) for tom, nora, _ in PAIRS for s, t in (("Tomas", tom), ("Nora", nora))]
    texts += [("Tomas", f) for f in FILLER]  # small talk: Nora speaks only the four facts
    turns = tuple(Turn("spk", f"D1:{i + 1}", s, t, 1, i, start + timedelta(minutes=i))
                  for i, (s, t) in enumerate(texts))
    questions = tuple(Question("spk", i, q, "x", 4, (f"D1:{2 * i + 2}",), (f"D1:{2 * i + 2}",))
                      for i, (_, _, q) in enumerate(PAIRS))
    conv = Conversation("spk", "Tomas", "Nora", (Session(1, start, "", turns),), questions)
    return conv, list(questions)


def memories(encoder, template: str):
    return {"dense": VectorRAG(encoder, turn_template=template),
            "bm25": BM25Memory(turn_template=template),
            "synapse": SynapseMemory(encoder, KeywordConceptExtractor(encoder),
                                     turn_template=template)}


def ranks(memory, conv, questions) -> list[tuple[int, int]]:
    """Per question: (rank of Nora's turn, rank of Tomas's parallel turn) among the retrieved
    turns, 0-based (99 = absent). SYNAPSE's concept nodes are left out of the count: the point
    here is the turn text, not how many concepts the paper's ranking puts on top."""
    memory.ingest([conv])
    result = memory.retrieve([blind(q) for q in questions])
    out = []
    for q, row in zip(questions, result.items, strict=True):
        ids = [it.node_id for it in row if it.kind == EPISODIC]
        nora, tomas = q.evidence[0], f"D1:{int(q.evidence[0][3:]) - 1}"
        out.append((ids.index(nora) if nora in ids else 99,
                    ids.index(tomas) if tomas in ids else 99))
    return out


@pytest.mark.slow
def test_a_question_naming_a_speaker_finds_that_speakers_turn(minilm) -> None:
    conv, questions = conversation()
    for name, memory in memories(minilm, "{speaker}: {text}{caption}").items():
        for q, (nora, tomas) in zip(questions, ranks(memory, conv, questions), strict=True):
            assert nora < 3, (name, q.question)
            assert nora < tomas, (name, q.question)


@pytest.mark.slow
def test_without_the_speaker_bm25_cannot_tell_the_turns_apart(minilm) -> None:
    # the test above fails on the landed code (utterances indexed alone): BM25 scores both
    # parallel turns alike and the tie goes to the earlier one, Tomas's
    conv, questions = conversation()
    found = ranks(memories(minilm, "{text}{caption}")["bm25"], conv, questions)
    assert all(nora > tomas for nora, tomas in found)
