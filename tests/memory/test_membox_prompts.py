"""Membox's LLM build under the code's own prompts (``memory.prompts=upstream``, issue 44).

Every expected prompt is rendered here from the template cut out of ``membox.py`` by a regular
expression (:func:`upstream_files.membox_template`, not the loader's ``ast``) and filled with
``str.format`` over values written by hand from the tiny conversation below, so a loader or
renderer that misreads a template fails these tests. The verification reader
(``memory.verify_parse``) is run both ways with a fake chat model whose replies are worked out
by hand.

The conversation: session 1 (``1:56 pm on 8 May, 2023``) D1:1-D1:3, session 2 (``10:00 am on
1 June, 2023``) D2:1-D2:2. The model says "Yes" to the one Topic Loom question (D1:3, the
first turn not decided by the rule), so the boxes are D1:1-3 and D2:1-2 (a new session closes a
box). Box 0's two events go to one chain request (no trace yet) and become trace 0; box 1's
events have trace 0 as candidate (``trace_threshold=-1``: every trace is one), verified in one
call; what joins no trace follows.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from upstream_files import ROOT, membox_template, needs_upstream, template_head

from synapse_pt.data import upstream
from synapse_pt.data.schema import Dialogue, Session, Turn
from synapse_pt.graph.extraction import LLMConceptExtractor
from synapse_pt.memory.membox.llm_build import (
    BoxReply,
    MemboxPrompts,
    parse_box_code,
    parse_chains_code,
    parse_verify,
    parse_verify_code,
)
from synapse_pt.memory.membox.memory import MemboxMemory
from synapse_pt.models.hashing import HashingEncoder
from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse
from synapse_pt.models.structured import StructuredOutputError

REPO = Path(__file__).resolve().parents[2]
ENC = HashingEncoder(64)
pytestmark = needs_upstream
NAMES = ("PROMPT_MSG_CONTINUATION", "PROMPT_DIALOG_EXTRACT", "PROMPT_TRACE_EVENT_FILTER",
         "PROMPT_TRACE_INIT")
LOOM, BOX, VERIFY, CHAINS = (membox_template(n) for n in NAMES)
MAY, JUNE = "1:56 pm on 8 May, 2023", "10:00 am on 1 June, 2023"
EV = ["Ann adopted a dog named Rex.", "Rex is a beagle.",  # box 0
      "Rex learned to sit.", "Bo heard the news."]  # box 1


@pytest.fixture(autouse=True)
def _upstream_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(upstream.ENV_VAR, str(ROOT))


def dialogue() -> Dialogue:
    def turn(dia: str, who: str, text: str, s: int, i: int, day: datetime,
             caption: str | None = None) -> Turn:
        return Turn("tiny", dia, who, text, s, i, day, blip_caption=caption)

    may, june = datetime(2023, 5, 8, 13, 56), datetime(2023, 6, 1, 10, 0)
    s1 = (turn("D1:1", "Ann", "I adopted a dog.", 1, 0, may, caption="a beagle on a sofa"),
          turn("D1:2", "Bo", "What is its name?  ", 1, 1, may),
          turn("D1:3", "Ann", "Rex. He is a beagle.", 1, 2, may))
    s2 = (turn("D2:1", "Ann", "Rex learned to sit.", 2, 0, june),
          turn("D2:2", "Bo", "Great news!", 2, 1, june))
    return Dialogue("tiny", "Ann", "Bo", (Session(1, may, MAY, s1), Session(2, june, JUNE, s2)))


class FakeMembox(LLM):
    """Answers the code's four build prompts; ``verify`` is the verification reply."""

    backend, model = "fake", "fake-membox"

    def __init__(self, verify: str) -> None:
        self.verify = verify
        self.requests: list[ChatRequest] = []

    def reply(self, prompt: str) -> str:
        if prompt.startswith(template_head(LOOM)):
            return "Yes"
        if prompt.startswith(template_head(BOX)):
            events = EV[:2] if f"Start: {MAY}" in prompt else EV[2:]
            return json.dumps({"keywords": ["dog", "Rex"], "topic": "a new dog",
                               "explicit_mentions": events})
        if prompt.startswith(template_head(VERIFY)):
            return self.verify
        if prompt.startswith(template_head(CHAINS)):
            events = prompt.split("Events: ")[-1].split("\nOutput your analysis")[0]
            return json.dumps({"primary_chain": events.splitlines(), "secondary_chains": [],
                               "isolated_events": []})
        raise AssertionError(f"unexpected prompt: {prompt[:80]}")

    def generate(self, requests):
        self.requests.extend(requests)
        return [ChatResponse(self.reply(r.messages[0][1]), 1, 1, 0.0, self.model)
                for r in requests]

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def build(verify: str, **kw) -> tuple[MemboxMemory, FakeMembox]:
    llm = FakeMembox(verify)
    memory = MemboxMemory(ENC, LLMConceptExtractor(llm), trace_threshold=-1.0, **kw)
    memory.ingest_dialogues([dialogue()])
    return memory, llm


def of_kind(llm: FakeMembox, template: str) -> list[ChatRequest]:
    return [r for r in llm.requests if r.messages[0][1].startswith(template_head(template))]


def related_reply(related: list[str], unrelated: list[str]) -> str:
    return json.dumps({"chain_summary": "a dog", "related_events": related,
                       "unrelated_events": unrelated, "reasoning": {}})


def test_no_build_prompt_of_membox_is_pasted_into_the_project() -> None:
    """No line of 40+ characters of the four build prompts appears in synapse_pt/ or configs/."""
    lines = [s.strip() for t in (LOOM, BOX, VERIFY, CHAINS) for s in t.splitlines()
             if len(s.strip()) >= 40]
    assert len(lines) > 40
    texts = {p: p.read_text(errors="replace") for folder in ("synapse_pt", "configs")
             for p in (REPO / folder).rglob("*") if p.is_file()
             and p.suffix in (".py", ".yaml", ".md", ".txt", ".json")}
    assert [(s, str(p)) for s in lines for p, t in texts.items() if s in t] == []


def test_each_request_is_its_constant_formatted_as_the_code_does() -> None:
    """By hand: the Loom's previous messages and new one as ``role: text`` (the text stripped,
    no image caption; check_relation joins them with newlines); the box content as
    _get_content_str writes it (``Start:`` then ``<date> <role>: <text>``); the trace's events as
    ``<start>: <event>`` and the box's events one per line (_llm_event_filter); the unmatched
    events one per line (_llm_init_chain). One user message, temperature 0, no budget of its own
    (16,384), JSON mode for the box extraction only."""
    memory, llm = build(related_reply([EV[2]], [EV[3]]))
    (loom,) = of_kind(llm, LOOM)
    assert loom.messages == (("user", LOOM.format(
        ref="Ann: I adopted a dog.\nBo: What is its name?", curr="Ann: Rex. He is a beagle.")),)
    boxes = of_kind(llm, BOX)
    assert [r.messages for r in boxes] == [
        (("user", BOX.format(text=f"Start: {MAY}\n{MAY} Ann: I adopted a dog.\n"
                                  f"{MAY} Bo: What is its name?\n"
                                  f"{MAY} Ann: Rex. He is a beagle.")),),
        (("user", BOX.format(text=f"Start: {JUNE}\n{JUNE} Ann: Rex learned to sit.\n"
                                  f"{JUNE} Bo: Great news!")),)]
    (verify,) = of_kind(llm, VERIFY)
    assert verify.messages == (("user", VERIFY.format(
        content_a=f"{MAY}: {EV[0]}\n{MAY}: {EV[1]}", content_b=f"{EV[2]}\n{EV[3]}")),)
    (chain,) = of_kind(llm, CHAINS)  # box 0's two events; box 1's one leftover needs no call
    assert chain.messages == (("user", CHAINS.format(events=f"{EV[0]}\n{EV[1]}")),)
    assert len(llm.requests) == 1 + 2 + 1 + 1
    for r in llm.requests:
        assert r.max_tokens == 16384 and r.temperature == 0.0 and r.stop == ()
        assert dict(r.extra) == ({"response_format": {"type": "json_object"}} if r in boxes
                                 else {})
    assert [b.keywords for b in memory.boxes] == [["dog", "Rex"]] * 2
    assert [b.topic for b in memory.boxes] == ["a new dog"] * 2
    assert memory.traces == [[(0, 0), (0, 1), (1, 0)], [(1, 1)]]
    d = memory.describe()
    assert d["prompts"] == "upstream" and d["upstream_prompts"] == ["membox/membox.py"]
    assert d["extraction_failures"] == 0 and d["extraction_attempts"] == 5


def test_budgets_can_be_set_and_ours_stays_available() -> None:
    """max_tokens / loom_max_tokens override the code's 16,384; prompts=ours sends our wordings
    with a system message and our budgets (512, Loom 8) and reads no upstream file."""
    prompts = MemboxPrompts("upstream", max_tokens=256, loom_max_tokens=4)
    t = dialogue().sessions[0].turns
    assert prompts.loom_request(t[:2], t[2]).max_tokens == 4
    assert prompts.box_request(["x"], "Start: y").max_tokens == 256
    ours = MemboxPrompts("ours")
    assert ours.templates == {} and ours.files == []
    request = ours.loom_request(t[:2], t[2])
    assert request.messages[0][0] == "system" and request.max_tokens == 8
    assert ours.verify_request(["a"], ["b"]).max_tokens == 512
    with pytest.raises(ValueError, match="memory.verify_parse"):
        MemboxPrompts("ours", verify_parse="loose")


def test_verify_parse_strict_joins_all_events_when_the_reply_is_not_bare_json() -> None:
    """A fenced reply: strict (the code's json.loads) cannot read it, so both of box 1's events
    join trace 0, counted, with no repair request; fenced reads it: only "Rex learned to sit."
    joins, and the other starts a trace of its own (one event: no chain call)."""
    fenced = "```json\n" + related_reply([EV[2]], [EV[3]]) + "\n```"
    strict, llm = build(fenced)
    assert strict.traces == [[(0, 0), (0, 1), (1, 0), (1, 1)]]
    (failure,) = strict.failures
    assert failure.stage == "verify" and "json.loads" in failure.error
    assert not [r for r in llm.requests if len(r.messages) > 1]  # asked once, as the code
    assert len(of_kind(llm, CHAINS)) == 1  # box 0 only: box 1 has no unmatched event
    loose, llm = build(fenced, verify_parse="fenced")
    assert loose.traces == [[(0, 0), (0, 1), (1, 0)], [(1, 1)]] and not loose.failures
    # prose: strict joins all at once; fenced asks for one repair, then joins all (counted)
    strict, llm = build("Both continue the story.")
    assert strict.traces[0][2:] == [(1, 0), (1, 1)] and len(llm.requests) == 5
    loose, llm = build("Both continue the story.", verify_parse="fenced")
    assert loose.traces[0][2:] == [(1, 0), (1, 1)] and len(llm.requests) == 6
    assert "repair reply" in loose.failures[0].error


def test_verify_keeps_an_event_named_both_ways() -> None:
    """"Bo heard the news." is listed as related and as unrelated: the code's if/elif joins it
    to trace 0."""
    both = related_reply([EV[2], EV[3]], [EV[3]])
    kept, _ = build(both)
    assert kept.traces == [[(0, 0), (0, 1), (1, 0), (1, 1)]]
    assert not kept.failures


def test_the_code_readers_by_hand() -> None:
    loom = MemboxPrompts("upstream")
    assert [loom.parse_loom(r) for r in ("Yes", "yes, same topic", "No", "Partially Shifted",
                                         "")] == ["yes", "yes", "no", "no", "no"]
    # box (membox.py 480-499): keywords as a list or one string, missing keys empty; strict (the
    # code's): an object of none of the keys is an empty box, a fenced reply no JSON object;
    # fenced (ours): the fence taken off, an object of none of the keys unreadable
    assert parse_box_code('{"keywords": [" dog ", ""], "topic": " pets ", '
                          '"explicit_mentions": ["a walk", " "]}') == BoxReply(
        ["dog"], "pets", ["a walk"])
    assert parse_box_code('{"keywords": "dog, cat"}') == BoxReply(["dog, cat"], "", [])
    assert parse_box_code('{"summary": "x"}') == BoxReply([], "", [])
    # events that are no list: no event, their text indexed (events_text, 496-498)
    assert parse_box_code('{"topic": "t", "explicit_mentions": "a walk"}') == BoxReply(
        [], "t", [], "a walk")
    with pytest.raises(StructuredOutputError):
        parse_box_code('```json\n{"topic": "pets"}\n```')
    with pytest.raises(StructuredOutputError):
        parse_box_code('["dog", "cat"]')  # the code's d.get fails: an empty box
    assert parse_box_code('```json\n{"topic": "pets"}\n```', strict=False) == BoxReply(
        [], "pets", [])
    with pytest.raises(StructuredOutputError):
        parse_box_code('{"summary": "x"}', strict=False)
    # verification: by text; none named -> all; not JSON as a whole -> unreadable under strict
    events = ["a", "b", "c"]
    assert parse_verify_code('{"related_events": ["c", "a"], "unrelated_events": ["b"]}',
                             events) == [0, 2]
    assert parse_verify_code('{"related_events": ["zzz"]}', events) == [0, 1, 2]
    with pytest.raises(StructuredOutputError, match="json.loads"):
        parse_verify_code('Here: {"related_events": ["a"]}', events)
    assert parse_verify_code('Here: {"related_events": ["a"]}', events, strict=False) == [0]
    with pytest.raises(StructuredOutputError):
        parse_verify_code('{"related_events": 5}', events)  # the code: `in` an int raises
    # ours (numbered events): an event named both ways is related; strict as above
    assert parse_verify('{"related": [0, 1], "unrelated": [1]}', 2) == [0, 1]
    with pytest.raises(StructuredOutputError):
        parse_verify('```json\n{"related": [0]}\n```', 2, strict=True)
    # chains: primary, then secondary, then isolated events no chain used; texts matched to the
    # events (case and spacing aside), an unknown text left out, an unnamed event on its own
    reply = json.dumps({"primary_chain": ["B", "a"], "secondary_chains": [[], ["c", "new"]],
                        "isolated_events": ["a", "d"]})
    assert parse_chains_code(reply, ["a", "b", "c", "d", "e"]) == [[1, 0], [2], [3], [4]]
    assert parse_chains_code('{"primary_chain": [], "isolated_events": ["b", "a"]}',
                             ["a", "b"]) == [[1, 0]]
    with pytest.raises(StructuredOutputError, match="groups no event"):
        parse_chains_code('{"primary_chain": []}', ["a"])
