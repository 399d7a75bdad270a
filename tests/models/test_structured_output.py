"""parse_json_reply, parse_string_list and generate_structured's single repair round."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse, LLMError
from synapse_pt.models.structured import (
    StructuredOutputError,
    generate_structured,
    parse_json_reply,
    parse_string_list,
)


class FunctionLLM(LLM):
    """Replies ``reply(request)``; records each batch."""

    backend, model = "scripted", "s"

    def __init__(self, reply: Callable[[ChatRequest], str]) -> None:
        self.reply = reply
        self.batches: list[list[ChatRequest]] = []

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        self.batches.append(list(requests))
        return [ChatResponse(self.reply(r), 1, 1, 0.0, self.model) for r in requests]

    def count_tokens(self, text: str) -> int:
        return 1


@pytest.mark.parametrize(("reply", "expected"), [
    ('{"a": 1}', {"a": 1}),
    ('```json\n["x", "y"]\n```', ["x", "y"]),
    ('Sure! Here it is:\n```\n{"k": [1, 2]}\n```\nHope this helps.', {"k": [1, 2]}),
    ('The concepts are ["ski trip", "Mark"] as requested.', ["ski trip", "Mark"]),
    ('{"t": "a } and a ] inside", "n": 2} trailing words', {"t": "a } and a ] inside", "n": 2}),
    ('[not json] then {"ok": true}', {"ok": True}),
    ('```json\n{"a": "b"}', {"a": "b"}),  # unclosed fence: the object is still found
])
def test_parse_json_reply(reply, expected):
    assert parse_json_reply(reply) == expected


@pytest.mark.parametrize("reply", ["no json here", '{"a": 1', "42", '"just a string"', ""])
def test_parse_json_reply_raises(reply):
    with pytest.raises(StructuredOutputError, match="no JSON object or list"):
        parse_json_reply(reply)


@pytest.mark.parametrize(("reply", "expected"), [
    ('["pottery", "Caroline"]', ["pottery", "Caroline"]),
    ('```json\n["a", 2]\n```', ["a", "2"]),
    ('{"concepts": ["hiking", "camping"]}', ["hiking", "camping"]),
    ("[]", []),
    ("Concepts:\n- pottery class\n- Mel\n* beach trip", ["pottery class", "Mel", "beach trip"]),
    ("1. painting\n2) sunrise\n3. 'family'", ["painting", "sunrise", "family"]),
    ("pottery, camping, LGBTQ support group.", ["pottery", "camping", "LGBTQ support group"]),
])
def test_parse_string_list(reply, expected):
    assert parse_string_list(reply) == expected


@pytest.mark.parametrize("reply", [
    "I could not find any concepts in this conversation",
    "Well, I think the conversation is mainly about how Caroline spent her weekend and the rest "
    "is small talk between friends",
    '[{"name": "x"}]',
    '{"a": [1], "b": [2]}',
    "",
])
def test_parse_string_list_raises(reply):
    with pytest.raises(StructuredOutputError):
        parse_string_list(reply)


def test_generate_structured_all_parse_first_time():
    replies = {"q1": '```json\n{"a": 1}\n```', "q2": 'Answer: [1, 2] done'}
    llm = FunctionLLM(lambda r: replies[r.messages[-1][1]])
    results = generate_structured(llm, [ChatRequest((("user", "q1"),)),
                                        ChatRequest((("user", "q2"),))])
    assert [(r.ok, r.value, r.error) for r in results] == [(True, {"a": 1}, None),
                                                          (True, [1, 2], None)]
    assert len(llm.batches) == 1 and all(len(r.responses) == 1 for r in results)


def test_generate_structured_repair_succeeds_and_fails():
    def reply(r: ChatRequest) -> str:
        first = r.messages[0][1]
        if r.messages[-1][1].startswith("Reply in JSON"):  # a repair request
            return '```json\n["fixed"]\n```' if first == "fixable" else "still just prose"
        return {"good": '["x"]', "fixable": "Let me think about that.",
                "hopeless": "I have no idea what you want"}[first]

    llm = FunctionLLM(reply)
    requests = [ChatRequest((("user", q),)) for q in ("good", "fixable", "hopeless")]
    results = generate_structured(llm, requests, parse=parse_string_list,
                                  repair_instruction="Reply in JSON only ({error})")
    assert [r.ok for r in results] == [True, True, False]
    assert results[0].value == ["x"] and results[1].value == ["fixed"]
    assert results[1].error is None
    assert results[2].value is None
    assert "first reply" in results[2].error and "repair reply" in results[2].error
    assert "still just prose" in results[2].error
    assert [len(r.responses) for r in results] == [1, 2, 2]
    # one batch of 3, then ONE repair batch with the two failures
    assert [len(b) for b in llm.batches] == [3, 2]
    repair = llm.batches[1][0]
    assert repair.messages[:2] == (("user", "fixable"), ("assistant", "Let me think about that."))
    assert repair.messages[2][0] == "user"
    assert repair.messages[2][1].startswith("Reply in JSON only (StructuredOutputError: no list")
    assert repair.max_tokens == requests[1].max_tokens


def test_generate_structured_empty_and_backend_errors():
    llm = FunctionLLM(str)
    assert generate_structured(llm, []) == [] and llm.batches == []

    class Down(FunctionLLM):
        def generate(self, requests):
            raise LLMError("backend down")

    with pytest.raises(LLMError, match="backend down"):
        generate_structured(Down(str), [ChatRequest((("user", "q"),))])
