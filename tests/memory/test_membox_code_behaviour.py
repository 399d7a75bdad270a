"""Membox's LLM build where our build used to differ from its code (issue 61), one test per
difference, each on hand-made replies and checked against what ``membox.py`` (3d1fa84) does,
its lines cited at each test.

The conversation is ``test_membox_prompts.py``'s: box 0 = D1:1-D1:3 (events EV[0], EV[1]),
box 1 = D2:1-D2:2 (EV[2], EV[3]); ``trace_threshold=-1`` makes every trace a candidate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest
from test_membox_prompts import BOX, CHAINS, EV, LOOM, MAY, VERIFY, dialogue, related_reply
from upstream_files import ROOT, needs_upstream, template_head, unformat

from synapse_pt.data import upstream
from synapse_pt.data.schema import Question
from synapse_pt.graph.extraction import LLMConceptExtractor
from synapse_pt.memory.membox.llm_build import set_order
from synapse_pt.memory.membox.memory import MemboxMemory
from synapse_pt.models.hashing import HashingEncoder
from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse

ENC = HashingEncoder(64)
pytestmark = needs_upstream


@pytest.fixture(autouse=True)
def _upstream_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(upstream.ENV_VAR, str(ROOT))


def kind(prompt: str) -> str:
    for name, template in (("loom", LOOM), ("box", BOX), ("verify", VERIFY),
                           ("chains", CHAINS)):
        if prompt.startswith(template_head(template)):
            return name
    raise AssertionError(prompt[:80])


def box_reply(prompt: str) -> str:
    events = EV[:2] if f"Start: {MAY}" in prompt else EV[2:]
    return json.dumps({"keywords": ["dog", "Rex"], "topic": "a new dog",
                       "explicit_mentions": events})


def chain_of_all(prompt: str) -> str:
    events = unformat(CHAINS, prompt)["events"].splitlines()
    return json.dumps({"primary_chain": events, "secondary_chains": [], "isolated_events": []})


class Scripted(LLM):
    """Answers each of the four prompts with ``replies[kind](prompt)``, by default the code's
    form of box 0 / box 1 (test_membox_prompts.py), Yes, all events related, one chain of all."""

    backend, model = "scripted", "scripted-membox"

    def __init__(self, **replies: Callable[[str], str]) -> None:
        self.replies = {"loom": lambda p: "Yes", "box": box_reply,
                        "verify": lambda p: related_reply(EV[2:], []), "chains": chain_of_all,
                        **replies}
        self.requests: list[ChatRequest] = []

    def generate(self, requests):
        self.requests.extend(requests)
        return [ChatResponse(self.replies[kind(r.messages[0][1])](r.messages[0][1]), 1, 1, 0.0,
                             self.model) for r in requests]

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def of(self, name: str) -> list[ChatRequest]:
        return [r for r in self.requests if kind(r.messages[0][1]) == name]


def build(llm: Scripted, **kw) -> MemboxMemory:
    memory = MemboxMemory(ENC, LLMConceptExtractor(llm), trace_threshold=-1.0, **kw)
    memory.ingest_dialogues([dialogue()])
    return memory


def traces_as_text(memory: MemboxMemory) -> list[list[str]]:
    return [[memory.boxes[b].event(e)[0] for b, e in trace] for trace in memory.traces]


def test_requests_carry_the_codes_sampling() -> None:
    """LLMWorker.chat_completion (membox.py 439-449): temperature 0.0, no seed, no budget (the
    model's own limit); the box extraction in JSON mode. A budget set is sent as max_tokens, or
    under memory.budget_param."""
    from synapse_pt.models.llm.openai_compat import OpenAICompatibleLLM

    llm = Scripted()
    memory = build(llm)
    send = OpenAICompatibleLLM("gpt-4o-mini", base_url="http://127.0.0.1:9/v1").payload
    for r in llm.requests:
        assert (r.temperature, r.seed, r.budget_param, r.accept_empty) == (0.0, None, None,
                                                                           True)
        body = send(r)
        assert set(body) - {"response_format"} == {"model", "messages", "temperature"}
    d = memory.describe()
    assert (d["temperature"], d["seed"], d["box_parse"], d["chain_parse"]) == (
        0.0, None, "strict", "strict")
    llm = Scripted()
    build(llm, max_tokens=256)
    assert {send(r).get("max_tokens") for r in llm.of("box")} == {256}
    assert all("max_tokens" not in send(r) for r in llm.of("loom"))  # its budget is not set
    llm = Scripted()
    build(llm, max_tokens=256, budget_param="max_completion_tokens", seed=3)
    assert {(send(r)["max_completion_tokens"], send(r)["seed"]) for r in llm.of("box")} == {
        (256, 3)}


def test_a_fenced_chain_reply_leaves_its_events_without_a_trace() -> None:
    """The chain request is not in JSON mode, and _llm_init_chain reads its reply with
    json.loads (membox.py 832-848): a fenced reply is {}, so no chain is made and box 0's two
    events get no trace (950-984); counted here, untraced_events 2. Box 1 then has no candidate
    trace: its two events go to a chain request of their own, read. In trace mode a box without
    a trace is not shown (_build_trace_contexts). Ours (chain_parse=fenced) reads the fence."""
    def chains(prompt: str) -> str:
        reply = chain_of_all(prompt)
        return f"```json\n{reply}\n```" if EV[0] in prompt else reply

    llm = Scripted(chains=chains)
    memory = build(llm)
    assert traces_as_text(memory) == [[EV[2], EV[3]]]
    assert not llm.of("verify") and len(llm.of("chains")) == 2
    assert not [r for r in llm.requests if len(r.messages) > 1]  # asked once
    (failure,) = memory.failures
    assert failure.stage == "chains" and failure.where == "D1:1"
    assert memory.describe()["untraced_events"] == 2
    question = Question("tiny", 0, "What is the dog's name?", "Rex", 1, (), ())
    result = memory.retrieve([question])
    shown = {it.node_id for it in result.items[0]}
    assert "B:0" not in shown and "B:1" in shown
    ours = build(Scripted(chains=chains), chain_parse="fenced")
    assert traces_as_text(ours)[0] == [EV[0], EV[1], EV[2], EV[3]] and not ours.failures


def test_a_chain_reply_keeps_the_models_texts_and_loses_what_it_leaves_out() -> None:
    """_create_trace_with_events (membox.py 946-958) stores the texts the model wrote: "Ann got
    a dog." (no event of the box) is a trace event, shown in the next verification's trace lines
    (789-797) and embedded for the next candidate search; EV[0], which no chain names, gets no
    trace. An isolated event no chain holds is a trace of its own (980-984)."""
    def chains(prompt: str) -> str:
        if EV[0] in prompt:
            return json.dumps({"primary_chain": ["Ann got a dog.", EV[1]],
                               "secondary_chains": [[]], "isolated_events": ["Rex barks.",
                                                                             EV[1]]})
        return chain_of_all(prompt)

    llm = Scripted(chains=chains, verify=lambda p: related_reply([EV[2]], [EV[3]]))
    memory = build(llm)
    # box 1: both traces are candidates, each verified with all its events: EV[2] joins both,
    # EV[3] none, and as the only one left makes a trace alone (no chain request)
    assert traces_as_text(memory) == [["Ann got a dog.", EV[1], EV[2]], ["Rex barks.", EV[2]],
                                      [EV[3]]]
    assert memory.describe()["untraced_events"] == 1
    content_a = {unformat(VERIFY, r.messages[0][1])["content_a"] for r in llm.of("verify")}
    assert f"{MAY}: Ann got a dog.\n{MAY}: {EV[1]}" in content_a
    assert [e for e, _, _ in memory.boxes[0].events] == EV[:2]  # the box's own events


def test_a_chain_reply_the_code_cannot_read_is_counted() -> None:
    """A JSON list: TraceLinker.run calls init_res.get on it (membox.py 962-965) and stops;
    here counted, and the events get no trace."""
    memory = build(Scripted(chains=lambda p: '["a", "b"]' if EV[0] in p else chain_of_all(p)))
    assert [f.stage for f in memory.failures] == ["chains"]
    assert "not an object" in memory.failures[0].error


def test_a_malformed_box_reply_leaves_an_empty_box_asked_once() -> None:
    """process_new_box (membox.py 480-499): json.loads of the reply, and on any error the box
    keeps no topic, keywords or events; no second request (counted here). A JSON object keeps
    every keyword (no cap). Ours (box_parse=fenced): one repair round."""
    def boxes(prompt: str) -> str:
        if f"Start: {MAY}" in prompt:
            return '["dog", "Rex"]'
        return json.dumps({"keywords": [f"k{i}" for i in range(10)], "topic": "t",
                           "explicit_mentions": EV[2:]})

    llm = Scripted(box=boxes)
    memory = build(llm)
    first, second = memory.boxes
    assert (first.keywords, first.topic, first.events) == ([], "", [])
    assert second.keywords == [f"k{i}" for i in range(10)]
    assert len(llm.of("box")) == 2 and not [r for r in llm.requests if len(r.messages) > 1]
    assert [f.stage for f in memory.failures] == ["box"]
    llm = Scripted(box=boxes)
    build(llm, box_parse="fenced")
    assert len([r for r in llm.of("box") if len(r.messages) > 1]) == 1


def test_an_empty_completion_is_read_as_the_code_reads_it() -> None:
    """chat_completion returns "" (or "{}" in JSON mode) for an empty or missing completion
    (membox.py 450-455): the Loom reads "" as No and closes the box (457-462, 626-630); a box
    reply of "" keeps the box empty (480-499); a verification of "" joins every event
    (823-828); a chain reply of "" makes no trace (845-848). Never asked again."""
    llm = Scripted(loom=lambda p: "", verify=lambda p: "")
    memory = build(llm)
    assert [[t.dia_id for t in b.turns] for b in memory.boxes] == [
        ["D1:1", "D1:2"], ["D1:3"], ["D2:1", "D2:2"]]
    assert all(r.accept_empty for r in llm.requests)
    llm = Scripted(box=lambda p: box_reply(p) if f"Start: {MAY}" in p else "",
                   verify=lambda p: "")
    memory = build(llm)
    assert memory.boxes[1].events == [] and memory.traces == [[(0, 0), (0, 1)]]
    llm = Scripted(chains=lambda p: "", verify=lambda p: "")
    memory = build(llm)
    assert memory.traces == [] and memory.describe()["untraced_events"] == 4


def test_a_trace_entrys_events_are_a_set_of_texts() -> None:
    """_llm_event_filter collects the related events in a set (membox.py 816-828) and the entry
    lists it (938): a text twice in the box is in the entry once, and the entry's order is a
    set's, not the box's. The code's set order follows its process's salted string hash; here
    a fixed hash gives the same order in every process (the prompts of a rerun match the
    response cache)."""
    texts = [f"Event number {i}." for i in range(8)]
    ordered = set_order(texts)
    assert sorted(ordered) == sorted(texts) and ordered != texts
    assert set_order([texts[0], texts[1], texts[0]]) == set_order(texts[:2])
    code = ("from synapse_pt.memory.membox.llm_build import set_order; "
            f"print(set_order({texts!r}))")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
            for seed in ("1", "2")}
    assert runs == {f"{ordered}\n"}

    def boxes(prompt: str) -> str:
        events = EV[:2] if f"Start: {MAY}" in prompt else [EV[2], EV[3], EV[2]]
        return json.dumps({"keywords": ["k"], "topic": "t", "explicit_mentions": events})

    memory = build(Scripted(box=boxes, verify=lambda p: related_reply([EV[2], EV[3]], [])))
    assert traces_as_text(memory) == [[EV[0], EV[1], *set_order([EV[2], EV[3]])]]
