"""The related systems' answer steps in our wording (issue 30, ``eval.prompts=ours``): GAAMA's
memory in sections by type with its rules and budget, Membox's memories in rank order with
relative-date conversion. Their code's own prompts (the default): tests/test_upstream_prompts.py."""

from __future__ import annotations

from datetime import datetime

from synapse_pt.eval.qa.pipeline import EvalSettings, answer_limits
from synapse_pt.eval.qa.prompts import answer_messages
from synapse_pt.memory.gaama.answer import gaama_sections
from synapse_pt.memory.membox.answer import rank_order_context
from synapse_pt.retrieval.items import EPISODIC, RetrievedItem

MAY = datetime(2023, 5, 8)
JUNE = datetime(2023, 6, 1)


def _items() -> list[RetrievedItem]:
    return [RetrievedItem("F:3", "Ann adopted a cat.", "fact", 0.9, JUNE, turn_ids=("D2:1",)),
            RetrievedItem("D2:1", "Ann: I adopted a cat!", EPISODIC, 0.8, JUNE, "Ann"),
            RetrievedItem("R:7", "Ann loves animals.", "reflection", 0.7, JUNE,
                          turn_ids=("D2:1",)),
            RetrievedItem("D1:1", "Ann: I want a pet.", EPISODIC, 0.6, MAY, "Ann"),
            RetrievedItem("F:1", "Ann wants a pet.", "fact", 0.5, MAY, turn_ids=("D1:1",))]


def test_gaama_sections_by_type_facts_by_rank_episodes_by_time() -> None:
    text = gaama_sections(_items())
    assert text.split("\n") == [
        "## Facts", "- [1 June 2023] Ann adopted a cat.", "- [8 May 2023] Ann wants a pet.", "",
        "## Reflections", "- [1 June 2023] Ann loves animals.", "",
        "## Episodes (in time order)", "- [8 May 2023] Ann: I want a pet.",
        "- [1 June 2023] Ann: I adopted a cat!"]
    assert gaama_sections([]) == "(empty)"
    user = answer_messages("Did Ann get a pet?", _items(), "Ann and Bo", style="gaama",
                           prompts="ours")[1]
    assert user["content"].startswith("Question: Did Ann get a pet?")
    assert "name every one the memory mentions" in user["content"]


def test_membox_context_in_rank_order_with_trace_events() -> None:
    box = RetrievedItem("B:2", "8 May 2023 Ann: I want a pet.", "box", 0.9, MAY,
                        turn_ids=("D1:1",), dated=True)
    trace = RetrievedItem("T:0",
                          "[08 May 2023] Ann wants a pet.\n[01 June 2023] Ann adopted a cat.",
                          "trace", 0.9, MAY, turn_ids=("D1:1", "D2:1"), dated=True)
    early = RetrievedItem("B:0", "1 June 2023 Ann: I adopted a cat!", "box", 0.5, JUNE,
                          turn_ids=("D2:1",), dated=True)
    text = rank_order_context([box, trace, early])
    assert text.split("\n\n") == ["- 8 May 2023 Ann: I want a pet.",
                                  "Events:\n[08 May 2023] Ann wants a pet.\n"
                                  "[01 June 2023] Ann adopted a cat.",
                                  "- 1 June 2023 Ann: I adopted a cat!"]
    user = answer_messages("When did Ann adopt a cat?", [box, trace, early], "Ann and Bo",
                           style="membox", prompts="ours")[1]["content"]
    assert "Turn every relative time" in user and "Keep the answer under 5-6 words." in user


def test_answer_budget_follows_the_style() -> None:
    for prompts in ("ours", "upstream"):
        assert answer_limits(EvalSettings(mode="qa", answer_style="gaama",
                                          prompts=prompts)) == (512, ())
        assert answer_limits(EvalSettings(mode="qa", answer_style="gaama", prompts=prompts,
                                          answer_budget="config")) == (32, ("\n",))
    assert answer_limits(EvalSettings(mode="qa", answer_style="membox",
                                      prompts="ours")) == (32, ("\n",))
    # Membox's chat_completion sets no max_tokens: gpt-4o-mini's own limit, and no stop
    assert answer_limits(EvalSettings(mode="qa", answer_style="membox")) == (16384, ())
