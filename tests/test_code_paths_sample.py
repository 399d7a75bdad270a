"""Issue 61, "done when": on the shipped sample, with scripted replies that exercise every
branch of the two systems' reply handling, the project's LLM builds send the requests the code's
path sends and build the memories it builds (facts, concepts, reflections, edges; boxes,
traces). The code's path is :mod:`code_paths`, a plain reference written from the upstream
sources; the project's requests are the bodies a loopback OpenAI-compatible server received.

GAAMA (chunks of at most 150 tokens: 6 chunks; the code's 0.75 context threshold; a 64-bucket
hashing encoder for both): chunk 0 answers in a whole-reply fence, one fact twice (case aside),
a concept naming no episode and a fact concept no list holds; chunk 1 in a fence with prose
after it (asked again: a JSON list, asked again: read), one fact repeating chunk 0's; chunk 2
concepts only; chunk 3 an empty completion; chunk 4 no JSON, then an empty retry, then ``{}``
(nothing extracted); the rest plainly. Reflections: the same text from several chunks, citing
an id of no new fact; chunk 1's first garbled, then read; one empty.

Membox: Topic Loom replies Yes, No (a question), Partially Shifted and empty; box replies
plain (ten keywords), a JSON list, empty, events as a string, fenced; verification replies
plain, fenced (all join), empty; chain replies plain, fenced (no trace), in the model's own
words, leaving an event out.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from code_paths import (
    GaamaCodePath,
    GaamaTexts,
    MemboxCodePath,
    canonical_id,
    episode_node_id,
)
from loopback import completion_body, serve
from upstream_files import ROOT, membox_template, needs_upstream, template_head, unformat

from synapse_pt.data import load_locomo, sample_path, upstream
from synapse_pt.graph.extraction import LLMConceptExtractor
from synapse_pt.memory.gaama.graph import EDGE_TYPES
from synapse_pt.memory.gaama.memory import GAAMAMemory
from synapse_pt.memory.membox.memory import MemboxMemory
from synapse_pt.models.hashing import HashingEncoder
from synapse_pt.models.llm.openai_compat import OpenAICompatibleLLM

SAMPLE = load_locomo(sample_path()).conversations[0]
ENC = HashingEncoder(64)
RETRY_FILE = ROOT / "gaama" / "services" / "llm_extractors.py"
pytestmark = [needs_upstream, pytest.mark.skipif(not RETRY_FILE.is_file(),
                                                 reason=f"{RETRY_FILE} not at hand")]


@pytest.fixture(autouse=True)
def _upstream_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(upstream.ENV_VAR, str(ROOT))


def on_loopback(reply: Callable[[str], str], build: Callable[[OpenAICompatibleLLM], Any]
                ) -> tuple[Any, list[dict[str, Any]]]:
    """``build(llm)`` with an LLM answering ``reply(prompt)`` over HTTP, one request at a time
    (so the bodies arrive in the order sent); returns its result and the request bodies."""
    def behaviour(body: dict[str, Any], n: int) -> tuple[int, str, float]:
        return 200, completion_body(reply(body["messages"][0]["content"]),
                                    {"prompt_tokens": 1, "completion_tokens": 1}), 0.0

    with serve(behaviour) as server:
        llm = OpenAICompatibleLLM("gpt-4o-mini", base_url=server.url, api_key_env=None,
                                  max_concurrency=1, max_retries=0)
        result = build(llm)
        return result, list(server.bodies)


# ===================================================================================== GAAMA

def gaama_script() -> Callable[[str], str]:
    """The scripted model (module docstring), its replies worked out from the sample up front:
    the chunks by the code's rule (orchestrator.py 139-162), each chunk's facts one per episode
    (``<speaker> said: <40 characters>``)."""
    texts = GaamaTexts.read()
    turns = [(episode_node_id(SAMPLE.sample_id, t.dia_id), t.speaker, t.text, s.date_time_raw)
             for s in SAMPLE.sessions for t in s.turns]
    chunks, current, size = [], [], 0
    for t in turns:
        tok = len((t[1] + f" [{t[3]}] {t[1]}: {t[2]}").split())
        if size + tok > 150 and current:
            chunks.append(current)
            current, size = [], 0
        current.append(t)
        size += tok
    chunks.append(current)
    assert len(chunks) == 6
    chunk_of = {t[0]: k for k, c in enumerate(chunks) for t in c}

    def fact(t) -> str:
        return f"{t[1]} said: {t[2][:40]}"

    def facts_json(k: int, extra: list[dict] = ()) -> str:
        return json.dumps({"facts": [{"fact_text": fact(t), "belief": 1.0,
                                      "source_episode_ids": [t[0]],
                                      "concepts": ["chat_topic", "unknown_label"]}
                                     for t in chunks[k]] + list(extra),
                           "concepts": [{"concept_label": "chat_topic",
                                         "episode_ids": [t[0] for t in chunks[k]]}]})

    first = fact(chunks[0][0])
    replies = {
        0: "```json\n" + json.dumps({**json.loads(facts_json(0, [
            {"fact_text": first.upper(), "source_episode_ids": [chunks[0][1][0]]}])),
            "concepts": [{"concept_label": "Chat_Topic", "episode_ids": [chunks[0][0][0]]},
                         {"concept_label": "orphan_label",
                          "episode_ids": ["ep-0000000000000000"]}]}) + "\n```",
        1: "```json\n" + facts_json(1) + "\n```\nHope this helps!",
        2: json.dumps({"concepts": [{"concept_label": "small_talk",
                                     "episode_ids": [t[0] for t in chunks[2]]}]}),
        3: "",
        4: "not json at all",
    }
    retries = {  # the bad output a retry shows -> the retry's reply
        replies[1]: "[]",
        "[]": facts_json(1, [{"fact_text": first.replace(" ", "  "),
                              "source_episode_ids": [chunks[1][0][0], chunks[1][0][0]]}]),
        replies[4]: "   ",
        "": "{}",
    }
    raw_head, raw_tail = texts.retry.split("{(last_raw or '')[:1000]}")
    raw_head = raw_head.split("{last_error}")[1]

    def reflection(prompt: str) -> str:
        new = prompt.rstrip().rsplit("\n\n", 1)[1].splitlines()
        ids = [line[1:line.index("]")] for line in new]
        chunk = next(k for k, c in enumerate(chunks) if canonical_id(fact(c[0])) == ids[0])
        if chunk == 1 and "Let me think" not in prompt:
            return "Let me think about it."
        if chunk == 5:
            return ""
        return json.dumps({"reflections": [
            {"reflection_text": "They talk often.", "belief": 0.8,
             "source_fact_ids": ids[:2] + ["entity-0000000000000000"]},
            {"reflection_text": f"Chunk {chunk} is friendly.", "source_fact_ids": ids[-1:]}]})

    def reply(prompt: str) -> str:
        if prompt.startswith(texts.retry.split("{last_error}")[0]):
            raw = prompt.split(raw_head, 1)[1].rsplit(raw_tail.split("{keys_hint}")[0], 1)[0]
            if raw == "Let me think about it.":
                return json.dumps({"reflections": [{"reflection_text": "Second thoughts.",
                                                    "source_fact_ids": []}]})
            (answer,) = [v for k, v in retries.items() if k[:1000] == raw]  # 1,000 shown
            return answer
        if prompt.startswith(texts.fact.splitlines()[0]):
            new = prompt.rstrip().rsplit("\n\n", 1)[1]
            k = chunk_of[new[1:new.index("]")]]
            return replies.get(k, facts_json(k))
        assert prompt.startswith(texts.reflection.splitlines()[0]), prompt[:80]
        return reflection(prompt)

    return reply


def gaama_graph(memory: GAAMAMemory) -> tuple[Counter, Counter]:
    """The project's graph as ``(node kind, key)`` and ``(key, key, edge type)`` counts, a key
    the node's id in the code's form (episode: its ep- id; else the id of its text)."""
    block = memory.blocks[SAMPLE.sample_id]
    keys = [episode_node_id(SAMPLE.sample_id, c[0]) if k == "episode" else canonical_id(t)
            for k, t, c in zip(block.kind, block.text, block.covers, strict=True)]
    nodes = Counter((k, key, t) for k, key, t in zip(block.kind, keys, block.text, strict=True))
    src, dst = block.edge_index.tolist()
    edges = Counter((keys[a], keys[b], EDGE_TYPES[t])
                    for a, b, t in zip(src, dst, block.edge_type.tolist(), strict=True))
    return nodes, edges


def test_gaama_build_on_the_sample_is_the_codes_path() -> None:
    reply = gaama_script()

    def build(llm: OpenAICompatibleLLM) -> GAAMAMemory:
        memory = GAAMAMemory(ENC, LLMConceptExtractor(llm), chunk_tokens=150)
        memory.ingest([SAMPLE])
        return memory

    memory, bodies = on_loopback(reply, build)
    code = GaamaCodePath(reply, ENC.encode, chunk_tokens=150).build([SAMPLE])
    # the requests, in order: one user message, the code's budget as max_completion_tokens,
    # no temperature, no seed
    assert [(b["messages"][0]["content"], b["max_completion_tokens"]) for b in bodies] == (
        code.requests)
    assert all(len(b["messages"]) == 1 and not {"temperature", "seed", "max_tokens"} & set(b)
               for b in bodies)
    # 6 fact requests; reflections after the 3 chunks with facts (0, 1, 5); retries: 2 for
    # chunk 1's facts, 2 for chunk 4's, 1 for chunk 1's reflection
    assert len(code.requests) == 6 + 3 + 5
    # the memory: the same nodes (kind, id, text) and edges (each direction, repeats counted)
    nodes, edges = gaama_graph(memory)
    assert nodes == Counter((n.kind, i, n.text) for i, n in code.nodes.items())
    assert edges == Counter([*code.edges, *((b, a, t) for a, b, t in code.edges)])
    assert {k for k, _, _ in nodes} == {"episode", "fact", "concept", "reflection"}
    assert ("concept", canonical_id("orphan_label"), "orphan_label") in nodes
    d = memory.describe()
    assert d["extraction_failures"] == code.fallbacks == 1 and d["empty_replies"] == 2


# ===================================================================================== Membox

TOPICS = ("the pottery class", "the new dog", "the library job", "the trip to Lisbon")


def membox_script() -> Callable[[str], str]:
    """The scripted model (module docstring); every branch keyed on the prompt's content."""
    loom, box, verify, chains = (membox_template(n) for n in (
        "PROMPT_MSG_CONTINUATION", "PROMPT_DIALOG_EXTRACT", "PROMPT_TRACE_EVENT_FILTER",
        "PROMPT_TRACE_INIT"))
    index = {t.dia_id: i for i, t in enumerate(SAMPLE.turns())}
    text_index = {f"{t.speaker}: {t.text.strip()}": i for i, t in enumerate(SAMPLE.turns())}
    counter = {"verify": 0, "chains": 0}

    def events_of(i: int) -> list[str]:
        return [f"Nora and Tomas talk about {TOPICS[i % 4]} again.",
                f"Nora and Tomas plan {TOPICS[(i + 1) % 4]} soon."]

    def reply(prompt: str) -> str:
        if prompt.startswith(template_head(loom)):
            curr = unformat(loom, prompt)["curr"]
            i = text_index[curr]
            if "?" in curr:
                return "No."
            return ["Yes, it continues.", "Partially Shifted", "", "yes"][i % 4]
        if prompt.startswith(template_head(box)):
            content = unformat(box, prompt)["text"]
            first = content.splitlines()[1]
            i = next(index[t.dia_id] for t in SAMPLE.turns()
                     if first.endswith(f"{t.speaker}: {t.text.strip()}"))
            plain = {"keywords": [f"kw{j}" for j in range(10)], "topic": TOPICS[i % 4],
                     "explicit_mentions": events_of(i)}
            return [json.dumps(plain), json.dumps(["kw"]), "",
                    json.dumps({**plain, "explicit_mentions": "all about pottery"}),
                    "```json\n" + json.dumps(plain) + "\n```", json.dumps(plain)][i % 6]
        if prompt.startswith(template_head(verify)):
            counter["verify"] += 1
            events = unformat(verify, prompt)["content_b"].splitlines()
            plain = json.dumps({"related_events": events[:1], "unrelated_events": events[1:]})
            return [plain, "```json\n" + plain + "\n```", "", plain][counter["verify"] % 4]
        assert prompt.startswith(template_head(chains)), prompt[:80]
        counter["chains"] += 1
        events = unformat(chains, prompt)["events"].splitlines()
        plain = {"primary_chain": events, "secondary_chains": [], "isolated_events": []}
        return [json.dumps(plain), "```json\n" + json.dumps(plain) + "\n```",
                json.dumps({"primary_chain": ["In their words: " + events[0]],
                            "secondary_chains": [events[1:2]], "isolated_events": []}),
                json.dumps({"primary_chain": events[:1], "isolated_events": []})][
            counter["chains"] % 4]

    return reply


def test_membox_build_on_the_sample_is_the_codes_path() -> None:
    def build(llm: OpenAICompatibleLLM) -> MemboxMemory:
        memory = MemboxMemory(ENC, LLMConceptExtractor(llm))
        memory.ingest_dialogues([SAMPLE])
        return memory

    memory, bodies = on_loopback(membox_script(), build)
    code = MemboxCodePath(membox_script(), ENC.encode).build(SAMPLE)
    sent = [(kind_of(b), b["messages"][0]["content"], "response_format" in b) for b in bodies]
    # the Loom and box requests (ours ask them in batches), then the Trace Weaver's in order
    assert Counter(r for r in sent if r[0] in ("loom", "box")) == Counter(
        r for r in code.requests if r[0] in ("loom", "box"))
    assert [r for r in sent if r[0] in ("verify", "chains")] == [
        r for r in code.requests if r[0] in ("verify", "chains")]
    assert all(len(b["messages"]) == 1 and b["temperature"] == 0.0
               and not {"seed", "max_tokens", "max_completion_tokens"} & set(b) for b in bodies)
    assert {k for k, _, _ in sent} == {"loom", "box", "verify", "chains"}
    # the boxes: turns, stored text, topic, keywords, events (or the events' text)
    ours = [([t.dia_id for t in b.turns], b.content, b.topic, ", ".join(b.keywords),
             [e for e, _, _ in b.events], b.events_text or " | ".join(e for e, _, _ in b.events))
            for b in memory.boxes]
    assert ours == [(b.turns, b.content, b.topic, b.keywords, b.events, b.events_text)
                    for b in code.boxes]
    # the traces: the boxes they hold and their events in order, the model's words included
    assert [(sorted({b for b, _ in t}), [memory.boxes[b].event(e)[0] for b, e in t])
            for t in memory.traces] == [
        (sorted(boxes), [e for _, evs in entries for e in evs]) for boxes, entries in code.traces]
    assert any(e.startswith("In their words: ") for t in memory.traces
               for e in (memory.boxes[b].event(i)[0] for b, i in t))
    assert memory.describe()["untraced_events"] > 0


def kind_of(body: dict[str, Any]) -> str:
    prompt = body["messages"][0]["content"]
    for kind, name in (("loom", "PROMPT_MSG_CONTINUATION"), ("box", "PROMPT_DIALOG_EXTRACT"),
                       ("verify", "PROMPT_TRACE_EVENT_FILTER"), ("chains", "PROMPT_TRACE_INIT")):
        if prompt.startswith(template_head(membox_template(name))):
            return kind
    raise AssertionError(prompt[:80])
