"""GAAMA's LLM build where our build used to differ from its code (issue 61), one test per
difference, each on hand-made replies and checked against what the code does (gaama 2d992f7,
file:line cited at each test).

The conversation, encoder and helpers are those of ``test_gaama_upstream_build.py`` (chunk 1:
E1 Ann on pottery, E2 Bob on his dog; chunk 2: E3-E5 on pottery, E6 on the dog; similarities 1
within a topic, 0 across). The code's retry texts are cut here from ``services/llm_extractors.py``
with regular expressions on its source text (not the build's ``ast`` reader) and filled by hand.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Sequence

import pytest
import torch
from test_gaama_upstream_build import (
    F1,
    F2,
    F3,
    S1,
    S2,
    TURNS,
    TopicEncoder,
    by_hand,
    edges,
    ent,
    ep,
    fact_md,
    line,
    nodes,
)
from upstream_files import ROOT, needs_upstream

from synapse_pt.data import load_locomo, upstream
from synapse_pt.graph.extraction import LLMConceptExtractor
from synapse_pt.memory.gaama.memory import FACT, GAAMAMemory
from synapse_pt.memory.gaama.replies import RetryTexts, strip_fence
from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse

RETRY_SOURCE = ROOT / "gaama" / "services" / "llm_extractors.py"
pytestmark = needs_upstream
needs_retry_file = pytest.mark.skipif(not RETRY_SOURCE.is_file(),
                                      reason=f"{RETRY_SOURCE} not at hand")


@pytest.fixture(autouse=True)
def _upstream_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(upstream.ENV_VAR, str(ROOT))


def conversation(tmp_path, sample_id: str, turns: Sequence[tuple[str, str, str]],
                 speakers: tuple[str, str] = ("Ann", "Bob")):
    session = {"speaker_a": speakers[0], "speaker_b": speakers[1],
               "session_1_date_time": S1, "session_2_date_time": S2,
               "session_1": [], "session_2": []}
    for dia_id, who, text in turns:
        session[f"session_{dia_id[1]}"].append({"speaker": who, "dia_id": dia_id, "text": text})
    path = tmp_path / f"{sample_id}.json"
    path.write_text(json.dumps([{"sample_id": sample_id, "conversation": session, "qa": [
        {"question": "What?", "answer": "x", "evidence": [turns[0][0]], "category": 4}]}]))
    return load_locomo(path).conversations[0]


@pytest.fixture
def conv(tmp_path):
    return conversation(tmp_path, "t1", TURNS)


class Replies(LLM):
    """Answers each request with ``reply(prompt, request number)``; records the requests."""

    backend, model = "scripted", "scripted-code"

    def __init__(self, reply: Callable[[str, int], str]) -> None:
        self.reply, self.requests = reply, []

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        out = []
        for r in requests:
            self.requests.append(r)
            out.append(ChatResponse(self.reply(r.messages[0][1], len(self.requests)), 10, 5,
                                    0.0, self.model))
        return out

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def prompts(self) -> list[str]:
        return [r.messages[0][1] for r in self.requests]


def is_facts(prompt: str) -> bool:
    return prompt.startswith(fact_md().splitlines()[0])


def chunk_of(prompt: str) -> int:
    """1 or 2: the chunk whose new episodes end the prompt."""
    return 1 if prompt.rstrip().endswith(TURNS[1][2]) else 2


def facts_reply(*facts: tuple[str, list[str], list[str]],
                concepts: Sequence[tuple[str, list[str]]] = ()) -> str:
    return json.dumps({"facts": [{"fact_text": t, "belief": 1.0, "source_episode_ids": s,
                                  "concepts": c} for t, s, c in facts],
                       "concepts": [{"concept_label": c, "episode_ids": e} for c, e in concepts]})


NO_REFLECTIONS = json.dumps({"reflections": []})


def build(conv_or_convs, reply: Callable[[str, int], str], **settings
          ) -> tuple[GAAMAMemory, Replies]:
    llm = Replies(reply)
    memory = GAAMAMemory(TopicEncoder(), LLMConceptExtractor(llm),
                         chunk_tokens=settings.pop("chunk_tokens", 50), **settings)
    memory.ingest(conv_or_convs if isinstance(conv_or_convs, list) else [conv_or_convs])
    return memory, llm


# ----------------------------------------------------------------- the code's retry texts, by hand

def _literals(block: str) -> str:
    """The concatenated string literals of a parenthesised source block, escapes decoded."""
    parts = re.findall(r'f?"((?:[^"\\]|\\.)*)"', block)
    return "".join(p.encode().decode("unicode_escape") for p in parts)


def retry_by_hand(error: str, raw: str, keys: list[str]) -> str:
    """The code's retry prompt (llm_extractors.py 57-63) filled by hand: the f-string's pieces
    cut from the source text, its fields replaced."""
    src = RETRY_SOURCE.read_text()
    template = _literals(src.split("retry_prompt = (")[1].split("\n        )\n")[0])
    hint = _literals(src.split("keys_hint = (")[1].split("\n        )\n")[0])
    hint = hint.replace("{expected_keys}", str(keys))
    return (template.replace("{last_error}", error)
            .replace("{(last_raw or '')[:1000]}", raw[:1000]).replace("{keys_hint}", hint))


def code_errors() -> tuple[str, str, str, str]:
    """The fact and reflection extractors' first errors (232-236, 303-307) and the two fixed
    retry errors (76, 86), cut from the source text."""
    src = RETRY_SOURCE.read_text()
    first = re.findall(r'_retry_llm_for_json\(\s*self\._llm, raw or "", "([^"]*)"', src)
    fixed = re.findall(r'last_error = "([^"]*)"', src)
    assert len(first) == 2 and len(fixed) == 2
    return first[0], first[1], fixed[0], fixed[1]


@needs_retry_file
def test_the_retry_texts_are_the_files() -> None:
    texts = RetryTexts.read()
    facts_error, reflections_error, empty, not_dict = code_errors()
    assert texts.first_error == {"facts": facts_error, "reflections": reflections_error}
    assert (texts.empty_error, texts.not_dict_error) == (empty, not_dict)
    long_raw = "x" * 1500  # the code shows the first 1,000 characters
    assert texts.render("E", long_raw, "facts") == retry_by_hand("E", long_raw,
                                                                 ["facts", "concepts"])
    assert texts.render("E", "r", "reflections") == retry_by_hand("E", "r", ["reflections"])


# ------------------------------------------------------------------------------ sampling

def test_requests_carry_the_codes_sampling(conv) -> None:
    """adapters/openai_llm.py 51-57: no temperature and no seed unless given (the API's
    defaults), the budget as max_completion_tokens; the body the OpenAI-compatible backend sends
    and the response cache key follow the request."""
    from synapse_pt.models.llm.cache import canonical_request
    from synapse_pt.models.llm.openai_compat import OpenAICompatibleLLM

    memory, llm = build(conv, lambda p, n: "" if is_facts(p) else NO_REFLECTIONS)
    request = llm.requests[0]
    assert (request.temperature, request.seed, request.budget_param) == (
        None, None, "max_completion_tokens")
    body = OpenAICompatibleLLM("gpt-4o-mini", base_url="http://127.0.0.1:9/v1").payload(request)
    assert set(body) == {"model", "messages", "max_completion_tokens"}
    assert body["max_completion_tokens"] == 8000
    d = memory.describe()
    assert (d["temperature"], d["seed"], d["budget_param"]) == (None, None,
                                                               "max_completion_tokens")
    # ours, as settings: temperature 0, seed 0, max_tokens
    ours, llm = build(conv, lambda p, n: "", temperature=0, seed=0, budget_param="max_tokens")
    body = OpenAICompatibleLLM("m", base_url="http://127.0.0.1:9/v1").payload(llm.requests[0])
    assert (body["temperature"], body["seed"], body["max_tokens"]) == (0.0, 0, 8000)
    assert "max_completion_tokens" not in body
    keys = {canonical_request("b", "m", r) for r in (request, llm.requests[0])}
    assert len(keys) == 2  # the sampling is part of the response cache key


# ------------------------------------------------------------------------ reading replies

def test_a_fence_is_taken_off_only_when_it_wraps_the_whole_reply() -> None:
    """llm_extractors.py 22-29: ^```(?:json)?...```$ on the stripped reply."""
    assert strip_fence('  ```json\n{"a": 1}\n```  ') == '{"a": 1}'
    assert strip_fence('```\n{"a": 1}\n```') == '{"a": 1}'
    assert strip_fence('```json{"a": 1}```') == '{"a": 1}'
    assert strip_fence('```python\n{"a": 1}\n```') == 'python\n{"a": 1}'
    assert strip_fence('Here:\n```json\n{"a": 1}\n```') == 'Here:\n```json\n{"a": 1}\n```'
    assert strip_fence('```json\n{"a": 1}\n``` done') == '```json\n{"a": 1}\n``` done'
    assert strip_fence("```") == "```" and strip_fence("``````") == ""


@needs_retry_file
def test_a_fenced_fact_reply_is_read_and_prose_around_a_fence_is_asked_again(conv) -> None:
    """Chunk 1 answers with its JSON in a fence and a sentence after it: not a whole-reply fence,
    so json.loads fails and the code asks again (llm_extractors.py 222-237), ONE user message:
    the retry prompt with the extractor's own error and the reply (57-63, 233-236). The retry's
    reply is the JSON in a whole-reply fence: read (74-85)."""
    fact_json = facts_reply((F1, [ep("D1:1")], []))
    first = f"```json\n{fact_json}\n```\nHope this helps!"

    def reply(prompt: str, n: int) -> str:
        if n == 1:
            return first
        if n == 2:
            return f"```json\n{fact_json}\n```"
        return facts_reply() if is_facts(prompt) else NO_REFLECTIONS

    memory, llm = build(conv, reply)
    facts_error = code_errors()[0]
    assert llm.requests[1].messages == (("user", retry_by_hand(
        facts_error, first, ["facts", "concepts"])),)
    assert (llm.requests[1].max_tokens, llm.requests[1].budget_param) == (
        8000, "max_completion_tokens")
    assert set(nodes(memory, FACT)) == {F1}
    assert memory.describe()["extraction_failures"] == 0
    assert memory.describe()["upstream_prompts"][-1] == "gaama/services/llm_extractors.py"


@needs_retry_file
def test_a_malformed_fact_reply_is_asked_again_twice_then_nothing_is_extracted(conv) -> None:
    """llm_extractors.py 32-98: the first retry names the extractor's error and shows the bad
    reply; its reply, a JSON list, is "empty or not a dict" (86); the second retry shows that;
    its reply is empty ("empty response", 75-78); then the code goes on with empty lists: chunk
    1 makes nothing (counted here), and no reflection request follows a chunk without facts
    (ltm_creator.py 176). Chunk 2 is read as usual."""
    bad = "Sure! The facts are: {'fact_text': Ann likes pottery"

    def reply(prompt: str, n: int) -> str:
        if n <= 3:
            return [bad, "[1, 2]", "   "][n - 1]
        if is_facts(prompt):
            return facts_reply((F3, [ep("D2:1")], []))
        return NO_REFLECTIONS

    memory, llm = build(conv, reply)
    facts_error, _, empty, not_dict = code_errors()
    keys = ["facts", "concepts"]
    assert [r.messages for r in llm.requests[1:3]] == [
        (("user", retry_by_hand(facts_error, bad, keys)),),
        (("user", retry_by_hand(not_dict, "[1, 2]", keys)),)]
    assert empty != not_dict
    assert [is_facts(p) for p in llm.prompts()] == [True, False, False, True, False]
    assert set(nodes(memory, FACT)) == {F3}
    (failure,) = memory.failures
    assert failure.stage == "facts" and failure.where == "D1:1..D1:2"
    assert "nothing extracted" in failure.error
    d = memory.describe()
    assert d["extraction_failures"] == 1 and d["extraction_attempts"] == 3


@needs_retry_file
def test_a_json_error_in_a_retry_reply_is_named_in_the_next_retry(conv) -> None:
    """llm_extractors.py 88-90: a retry reply that is no JSON puts the decoder's own message in
    the next retry."""
    def reply(prompt: str, n: int) -> str:
        return {1: "no json", 2: "{oops", 3: facts_reply((F1, [ep("D1:1")], []))}.get(
            n, facts_reply() if is_facts(prompt) else NO_REFLECTIONS)

    memory, llm = build(conv, reply)
    try:
        json.loads("{oops")
    except json.JSONDecodeError as err:
        decoder = str(err)
    assert llm.requests[2].messages[0][1] == retry_by_hand(decoder, "{oops",
                                                           ["facts", "concepts"])
    assert set(nodes(memory, FACT)) == {F1} and not memory.failures


def test_a_reply_without_facts_makes_its_concepts_and_nothing_else(conv) -> None:
    """llm_extractors.py 218-229: a JSON object is the reply, with or without "facts"; its
    concepts become nodes, one naming no episode of the chunk too (ltm_creator.py 320-352); no
    fact, no reflection request (176), no retry, no failure. Ours (memory.replies=repair) asks
    for a repair, then counts it."""
    concepts_only = json.dumps({"concepts": [
        {"concept_label": "Pottery_Class", "episode_ids": [ep("D1:1")]},
        {"concept_label": "lonely_label", "episode_ids": ["ep-0000000000000000"]}]})

    def reply(prompt: str, n: int) -> str:
        if is_facts(prompt):
            return concepts_only if chunk_of(prompt) == 1 else facts_reply()
        return NO_REFLECTIONS

    memory, llm = build(conv, reply)
    assert [is_facts(p) for p in llm.prompts()] == [True, True]
    concepts = nodes(memory, "concept")
    assert set(concepts) == {"pottery_class", "lonely_label"}
    assert edges(memory, concepts["pottery_class"], "HAS_CONCEPT") == {0}  # E1
    assert edges(memory, concepts["lonely_label"], "HAS_CONCEPT") == set()
    assert not nodes(memory, FACT) and not memory.failures
    # chunk 2 is shown the concept its episodes are near (pottery), by label
    assert "## Existing concepts (reuse when applicable, do NOT duplicate)\n\npottery_class\n" in (
        llm.prompts()[1])
    ours, llm = build(conv, reply, replies="repair")
    assert len(ours.failures) == 1 and len(llm.requests[1].messages) == 3  # the repair round


def test_an_empty_completion_is_nothing_extracted(conv) -> None:
    """llm_extractors.py 223-225 (and adapters/openai_llm.py 60-62: no choices or no content
    read as ""): an empty reply is read as no facts and no concepts, never asked again; counted
    here in empty_replies, not as a failure."""
    memory, llm = build(conv, lambda p, n: "" if is_facts(p) else NO_REFLECTIONS)
    assert [is_facts(p) for p in llm.prompts()] == [True, True]
    assert all(r.accept_empty for r in llm.requests)
    assert not nodes(memory, FACT) and not memory.failures
    assert memory.describe()["empty_replies"] == 2


def test_the_backend_takes_an_empty_completion_where_the_request_accepts_one() -> None:
    """Against the loopback server: an empty or null completion is "" for a request that accepts
    one (one HTTP request), and a malformed answer, asked again, for one that does not."""
    from loopback import completion_body, serve

    from synapse_pt.models.llm.base import LLMError
    from synapse_pt.models.llm.openai_compat import OpenAICompatibleLLM

    def behaviour(body, n):
        content = None if "null" in body["messages"][-1]["content"] else ""
        text = json.dumps({"choices": [{"message": {"role": "assistant", "content": content},
                                        "finish_reason": "stop"}]})
        return 200, text, 0.0

    with serve(behaviour) as server:
        llm = OpenAICompatibleLLM("m", base_url=server.url, max_retries=1, backoff_s=0.0)
        taken = llm.generate([ChatRequest((("user", "a"),), accept_empty=True),
                              ChatRequest((("user", "null"),), accept_empty=True)])
        assert [r.text for r in taken] == ["", ""] and len(server.bodies) == 2
        with pytest.raises(LLMError, match="empty completion"):
            llm.generate([ChatRequest((("user", "b"),))])
        assert len(server.bodies) == 2 + 2  # asked again once (max_retries=1)
    assert completion_body("x")  # the helper's form, used by the other loopback tests


# ------------------------------------------------------------------------------ node identity

def test_a_fact_repeated_across_chunks_is_one_node(conv) -> None:
    """canonical_id_entity (infra/id_helpers.py: lower-cased, spaces collapsed) keys a fact
    (ltm_creator.py 374), so chunk 2's "ann started a  pottery class." is chunk 1's fact: one
    node, the repeat's text (the node store's upsert, sqlite_memory.py 119-149), DERIVED_FROM
    edges from both chunks, one per citation, E3 cited twice (make_edge, graph_edges.py 53: a
    new edge id each time). The repeat is a new fact of chunk 2 for its reflection request,
    listed with its own text."""
    again = "ann started a  pottery class on 7 may 2023."

    def reply(prompt: str, n: int) -> str:
        if not is_facts(prompt):
            return NO_REFLECTIONS
        if chunk_of(prompt) == 1:
            return facts_reply((F1, [ep("D1:1")], []))
        return facts_reply((again, [ep("D2:1"), ep("D2:1")], []))

    memory, llm = build(conv, reply)
    assert ent(F1) == ent(" ".join(again.split()))
    (fact,) = nodes(memory, FACT).values()
    assert memory.blocks["t1"].text[fact] == again
    block = memory.blocks["t1"]
    src, dst = block.edge_index.tolist()
    derived = [b for a, b, t in zip(src, dst, block.edge_type.tolist(), strict=True)
               if a == fact and t == 1]
    assert sorted(derived) == [0, 2, 2]  # E1 once, E3 twice
    assert block.covers[fact] == ("D1:1", "D2:1")
    reflection_2 = llm.prompts()[3]
    assert reflection_2.rstrip().endswith(f"[{ent(F1)}] {again}")


def test_existing_facts_are_listed_in_node_id_order(conv) -> None:
    """ltm_creator.py 258-277 lists the facts of the related episodes as get_nodes returns
    them: a SELECT ... WHERE node_id IN (...) on the TEXT PRIMARY KEY (sqlite_memory.py
    333-343), which SQLite answers in key order (checked below on SQLite itself); chunk 1 makes
    two facts of E1 whose ids sort against their order of creation."""
    pair = sorted(["Ann is in a pottery class.", "Ann likes pottery a lot."], key=ent,
                  reverse=True)  # made in this order: the later id first

    def reply(prompt: str, n: int) -> str:
        if not is_facts(prompt):
            return NO_REFLECTIONS
        if chunk_of(prompt) == 1:
            return facts_reply(*[(t, [ep("D1:1")], []) for t in pair])
        return facts_reply()

    memory, llm = build(conv, reply)
    shown = llm.prompts()[2].split("## Existing facts (do NOT duplicate these)\n\n")[1]
    assert shown.split("\n\n")[0] == "\n".join(f"[{ent(t)}] {t}" for t in sorted(pair, key=ent))
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE nodes (node_id TEXT PRIMARY KEY, payload TEXT NOT NULL)")
    db.executemany("INSERT INTO nodes VALUES (?, ?)", [(ent(t), t) for t in pair])
    ids = [ent(t) for t in pair]
    got = [r[0] for r in db.execute(f"SELECT node_id FROM nodes WHERE node_id IN "
                                    f"({','.join('?' * len(ids))})", ids)]
    assert got == sorted(ids)


def test_every_concept_of_a_reply_is_a_node_named_by_its_label(conv) -> None:
    """ltm_creator.py 320-401: no cap on concepts per episode or per fact (ours kept 3); the
    concept's text is its label as embedded (infra/serialization.py 28-31), not its words."""
    labels = ["pottery_class", "clay_work", "weekend_hobby", "new_skill"]

    def reply(prompt: str, n: int) -> str:
        if not is_facts(prompt):
            return NO_REFLECTIONS
        if chunk_of(prompt) == 1:
            return facts_reply((F1, [ep("D1:1")], labels),
                               concepts=[(c, [ep("D1:1")]) for c in labels])
        return facts_reply()

    memory, _ = build(conv, reply)
    concepts = nodes(memory, "concept")
    assert set(concepts) == set(labels)
    (fact,) = nodes(memory, FACT).values()
    assert edges(memory, 0, "HAS_CONCEPT") == set(concepts.values())
    assert edges(memory, fact, "ABOUT_CONCEPT") == set(concepts.values())
    block = memory.blocks["t1"]
    want = TopicEncoder().encode(["pottery_class"])[0]
    assert torch.allclose(block.x[concepts["pottery_class"]], want)


# ------------------------------------------------------------------------------ one store

def test_one_store_for_every_conversation(tmp_path) -> None:
    """run_create_ltm.py builds the conversations one after another into one store, and its
    search (sqlite_vector.py 178-214) takes the max(2 top_k, 20) = 20 nearest rows of the whole
    store before it keeps the conversation's. Conversation A: 21 pottery turns in one chunk, an
    empty reply (no facts): 21 episode rows at similarity 1 to any pottery text. Conversation
    B, chunk 2 (its pottery turn): the 20 nearest rows are A's (ties: the earlier row), so B's
    own older pottery turn is not found: its related episodes are "(none)" where a store of
    B's own would list it."""
    a = conversation(tmp_path, "A", [(f"D1:{i}", "Cy", f"More pottery {i}.")
                                     for i in range(1, 22)], speakers=("Cy", "Di"))
    b = conversation(tmp_path, "B", [("D1:1", "Ann", "My pottery class was fun today."),
                                     ("D2:1", "Bob", "Show me your pottery bowls now.")])

    def reply(prompt: str, n: int) -> str:
        if not is_facts(prompt):
            return NO_REFLECTIONS
        return json.dumps({"concepts": [{"concept_label": "pottery_class", "episode_ids": []}]})

    memory, llm = build([a, b], reply, chunk_tokens=8)  # one turn per chunk
    b2 = [p for p in llm.prompts() if p.rstrip().endswith("Show me your pottery bowls now.")]
    (prompt,) = b2
    related = prompt.split("## Related older episodes (for context)\n\n")[1].split("\n\n")[0]
    assert related == "(none)"
    alone, llm = build([b], reply, chunk_tokens=8)
    (prompt,) = [p for p in llm.prompts()
                 if p.rstrip().endswith("Show me your pottery bowls now.")]
    assert "My pottery class was fun today." in prompt.split(
        "## Related older episodes (for context)\n\n")[1].split("\n\n")[0]
    # B wrote A's concept label again: its row is B's now, so a search of A no longer finds
    # A's pottery_class node (the rows hold the latest write's scope, sqlite_vector.py 96-146)
    concept_a = nodes_of(memory, "A", "concept")["pottery_class"]
    concept_b = nodes_of(memory, "B", "concept")["pottery_class"]
    assert not bool(memory.blocks["A"].stored[concept_a])
    assert bool(memory.blocks["B"].stored[concept_b])
    returned = memory.store_returns(TopicEncoder().encode(["pottery_class"]), ["A", "B"])
    assert not returned["A"][concept_a].any() and returned["B"][concept_b].all()


def nodes_of(memory: GAAMAMemory, sample_id: str, kind: str) -> dict[str, int]:
    block = memory.blocks[sample_id]
    return {t: i for i, (k, t) in enumerate(zip(block.kind, block.text, strict=True))
            if k == kind}


def test_the_first_fact_request_is_the_file_filled_by_hand(conv) -> None:
    """The request of chunk 1 as before issue 61 (the file filled by str.replace), now with the
    code's sampling: a check that nothing else moved."""
    _, llm = build(conv, lambda p, n: "" if is_facts(p) else NO_REFLECTIONS)
    assert llm.prompts()[0] == by_hand(fact_md(), new_episodes=f"{line('D1:1')}\n{line('D1:2')}",
                                       related_episodes="(none)", existing_facts="(none)",
                                       existing_concepts="(none)")
    assert F2 and F3  # the shared fixtures' facts, used in the other tests
