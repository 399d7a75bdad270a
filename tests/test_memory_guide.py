"""docs/adding_a_memory.md: its example memory runs exactly as written, ranks a hand-built
conversation as worked out by hand, and plugs into the evaluation harness on the shipped sample."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pytest

from synapse_pt.data.locomo import load_locomo
from synapse_pt.data.records import Conversation, Question, Session, Turn
from synapse_pt.data.source import sample_path
from synapse_pt.eval.pipeline import EvalSettings, blind, evaluate
from synapse_pt.eval.tokens import HFTokenCounter
from synapse_pt.models.hashing import HashingEncoder

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "adding_a_memory.md"


@pytest.fixture(scope="module")
def RecencyDenseMemory():  # noqa: N802 (the class the guide defines)
    text = GUIDE.read_text()
    example = text[text.index("## The example"):]
    code = re.search(r"```python\n(.*?)```", example, flags=re.S).group(1)
    namespace: dict = {}
    exec(compile(code, str(GUIDE), "exec"), namespace)
    return namespace["RecencyDenseMemory"]


def _conversation() -> tuple[Conversation, Question]:
    when = datetime(2023, 5, 8, 13, 0)
    texts = ["I adopted a puppy named Rex", "the weather is nice", "I adopted a puppy named Rex"]
    turns = tuple(Turn("c", f"D1:{i + 1}", "Ann", t, 1, i, when) for i, t in enumerate(texts))
    question = Question("c", 0, "Ann: I adopted a puppy named Rex", "Rex", 4, ("D1:3",),
                        ("D1:3",))
    conv = Conversation("c", "Ann", "Bob", (Session(1, when, "1:00 pm on 8 May, 2023", turns),),
                        (question,))
    return conv, question


def test_recency_breaks_a_tie_towards_the_later_turn(RecencyDenseMemory):  # noqa: N803
    conv, question = _conversation()
    # turns 1 and 3 are the same text: equal cosine; positions 0, 0.5, 1 -> turn 3 gains 0.5
    memory = RecencyDenseMemory(HashingEncoder(64), k=2, recency=0.5)
    memory.ingest([conv])
    result = memory.retrieve([blind(question)])
    assert result.node_ids() == [["D1:3", "D1:1"]]
    without = RecencyDenseMemory(HashingEncoder(64), k=2, recency=0.0)
    without.ingest([conv])
    assert without.retrieve([blind(question)]).node_ids() == [["D1:1", "D1:3"]]  # lower index


def test_the_example_runs_in_the_harness_on_the_sample(RecencyDenseMemory):  # noqa: N803
    dataset = load_locomo(sample_path(), name="sample")
    memory = RecencyDenseMemory(HashingEncoder(64), k=5)
    memory.ingest(dataset.conversations)
    df, summary = evaluate(memory, dataset, settings=EvalSettings(mode="retrieval"),
                           token_counter=HFTokenCounter(None))
    assert len(df) == dataset.num_questions
    assert df["retrieved"].map(len).max() == 5
    assert 0.0 <= df["recall@5"].dropna().mean() <= 1.0
    assert summary["gated_rate"] == 0.0
