"""OpenAICompatibleLLM (the openai SDK) against a local fake server: payload, usage, retries,
concurrency, the key."""

from __future__ import annotations

import time

import pytest
from conftest import completion_body

from synapse_pt.models.llm.base import ChatRequest, LLMError
from synapse_pt.models.llm.openai_compat import OpenAICompatibleLLM


def make_llm(server, **kw) -> OpenAICompatibleLLM:
    params = {"max_retries": 3, "timeout_s": 5.0, "backoff_s": 0.01, "api_key_env": None}
    params.update(kw)
    return OpenAICompatibleLLM("fake-model", base_url=server.url, **params)


def ask(content: str, **kw) -> ChatRequest:
    return ChatRequest((("system", "be brief"), ("user", content)), **kw)


def test_answers_in_order_with_payload_and_server_usage(fake_server):
    llm = make_llm(fake_server)
    out = llm.generate([ask("one", max_tokens=7, stop=("\n",)), ask("two")])
    assert [r.text for r in out] == ["echo: one", "echo: two"]
    assert [(r.prompt_tokens, r.completion_tokens) for r in out] == [(11, 3), (11, 3)]
    assert all(r.latency_s > 0 and not r.cached and r.meta["attempts"] == 1 for r in out)
    assert not out[0].meta["usage_estimated"]
    body = next(b for b in fake_server.bodies if b["messages"][-1]["content"] == "one")
    assert body == {"model": "fake-model", "max_tokens": 7, "temperature": 0.0, "seed": 0,
                    "stop": ["\n"], "messages": [{"role": "system", "content": "be brief"},
                                                 {"role": "user", "content": "one"}]}


def test_extra_parameters_reach_the_server(fake_server):
    make_llm(fake_server).generate([ChatRequest.from_messages(
        [{"role": "user", "content": "x"}], extra={"response_format": {"type": "json_object"}})])
    assert fake_server.bodies[0]["response_format"] == {"type": "json_object"}


def test_usage_estimated_when_server_sends_none(fake_server):
    fake_server.behaviour = lambda body, n: (200, completion_body("a" * 40), 0.0)
    (r,) = make_llm(fake_server).generate([ask("b" * 80)])
    assert r.meta["usage_estimated"]
    assert r.completion_tokens == 10  # 40 characters / 4
    # "be brief" (8 chars) and 80 chars, each plus the per-message overhead
    assert r.prompt_tokens == (2 + 4) + (20 + 4)


def test_retries_500_then_succeeds(fake_server):
    def flaky(body, n):
        if n == 1:
            return 500, '{"error": "overloaded"}', 0.0
        return 200, completion_body("fine", {"prompt_tokens": 5, "completion_tokens": 1}), 0.0

    fake_server.behaviour = flaky
    (r,) = make_llm(fake_server).generate([ask("q")])
    assert r.text == "fine"
    assert r.meta["attempts"] == 2
    assert fake_server.requests_for("q") == 2


def test_retries_429(fake_server):
    fake_server.behaviour = lambda body, n: ((429, "slow down", 0.0) if n <= 2 else
                                             (200, completion_body("ok"), 0.0))
    (r,) = make_llm(fake_server).generate([ask("q")])
    assert (r.text, r.meta["attempts"]) == ("ok", 3)


def test_permanent_500_raises_llm_error_with_status_and_body(fake_server):
    fake_server.behaviour = lambda body, n: (503, '{"error": "model is down for maintenance"}', 0.0)
    llm = make_llm(fake_server, max_retries=2)
    with pytest.raises(LLMError, match=r"after 3 attempts.*HTTP 503.*down for maintenance"):
        llm.generate([ask("q")])
    assert fake_server.requests_for("q") == 3


def test_client_error_is_not_retried(fake_server):
    fake_server.behaviour = lambda body, n: (400, '{"error": "bad max_tokens"}', 0.0)
    with pytest.raises(LLMError, match=r"HTTP 400.*bad max_tokens"):
        make_llm(fake_server).generate([ask("q")])
    assert fake_server.requests_for("q") == 1


def test_timeout_is_retried_then_succeeds(fake_server):
    fake_server.behaviour = lambda body, n: ((200, completion_body("late"), 1.0) if n == 1 else
                                             (200, completion_body("on time"), 0.0))
    (r,) = make_llm(fake_server, timeout_s=0.3).generate([ask("q")])
    assert (r.text, r.meta["attempts"]) == ("on time", 2)


def test_timeout_every_time_raises(fake_server):
    fake_server.behaviour = lambda body, n: (200, completion_body("late"), 1.0)
    with pytest.raises(LLMError, match="timeout after 0.2s"):
        make_llm(fake_server, timeout_s=0.2, max_retries=1).generate([ask("q")])


@pytest.mark.parametrize("body", ["<html>502 bad gateway</html>", '{"choices": []}',
                                  '{"object": "chat.completion"}',
                                  '{"choices": [{"message": {"content": null}}]}',
                                  '{"choices": [{"message": {"content": ""}}]}',
                                  '{"choices": [{"message": {"content": " \\n "}}]}'])
def test_malformed_body_counts_as_failure(fake_server, body):
    fake_server.behaviour = lambda b, n: (200, body, 0.0) if n == 1 else (
        200, completion_body("good"), 0.0)
    (r,) = make_llm(fake_server).generate([ask("q")])
    assert (r.text, r.meta["attempts"]) == ("good", 2)


def test_malformed_body_every_time_raises(fake_server):
    fake_server.behaviour = lambda b, n: (200, "not json at all", 0.0)
    with pytest.raises(LLMError, match="not JSON.*not json at all"):
        make_llm(fake_server, max_retries=1).generate([ask("q")])


def test_connection_refused_raises_after_retries():
    llm = OpenAICompatibleLLM("m", base_url="http://127.0.0.1:9/v1", api_key_env=None,
                              max_retries=1, backoff_s=0.01, timeout_s=2.0)
    with pytest.raises(LLMError, match="connection error"):
        llm.generate([ask("q")])


def test_concurrency_is_bounded_and_used(fake_server):
    fake_server.behaviour = lambda body, n: (200, completion_body("x"), 0.15)
    llm = make_llm(fake_server, max_concurrency=3)
    start = time.perf_counter()
    out = llm.generate([ask(f"q{i}") for i in range(9)])
    elapsed = time.perf_counter() - start
    assert len(out) == 9
    assert fake_server.max_in_flight == 3  # reached, never exceeded
    assert elapsed < 9 * 0.15  # requests really overlapped


def test_failure_mid_batch_reports_answers_that_arrived(fake_server):
    fake_server.behaviour = lambda body, n: (
        (500, "boom", 0.0) if body["messages"][-1]["content"] == "bad" else
        (200, completion_body("ok"), 0.0))
    llm = make_llm(fake_server, max_concurrency=1, max_retries=0)
    seen = []
    with pytest.raises(LLMError, match=r"HTTP 500.*1/3 requests of the batch answered; the rest"):
        llm.generate_incremental([ask("good"), ask("bad"), ask("never")],
                                 lambda i, r: seen.append((i, r.text)))
    assert seen == [(0, "ok")]
    assert fake_server.requests_for("never") == 0  # cancelled, not sent


def test_api_key_header_and_missing_openai_key(fake_server, monkeypatch):
    from synapse_pt.models.llm.openai_compat import NO_KEY

    monkeypatch.setenv("FAKE_KEY", "sk-test")
    make_llm(fake_server, api_key_env="FAKE_KEY").generate([ask("q1")])
    # no key configured (a local server): the placeholder, never another variable's key
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-this-one")
    make_llm(fake_server, api_key_env=None).generate([ask("q2")])
    assert fake_server.authorization == ["Bearer sk-test", f"Bearer {NO_KEY}"]
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(LLMError, match="OPENAI_API_KEY"):
        OpenAICompatibleLLM("gpt-4o-mini").generate([ask("q")])
    # the key is read when a batch goes out, never kept on the object (configs, pickles, logs)
    monkeypatch.setenv("FAKE_KEY", "sk-test")
    llm = make_llm(fake_server, api_key_env="FAKE_KEY")
    llm.generate([ask("q3")])
    assert "sk-test" not in repr(vars(llm))


def test_called_from_a_running_event_loop(fake_server):
    # a notebook runs an event loop in the calling thread: the batch still answers
    import asyncio

    async def inside() -> list[str]:
        return [r.text for r in make_llm(fake_server).generate([ask("nb")])]

    assert asyncio.run(inside()) == ["echo: nb"]


def test_empty_batch_sends_nothing(fake_server):
    assert make_llm(fake_server).generate([]) == []
    assert fake_server.bodies == []


def test_empty_completion_every_time_raises(fake_server):
    fake_server.behaviour = lambda b, n: (200, completion_body(""), 0.0)
    with pytest.raises(LLMError, match="empty completion"):
        make_llm(fake_server, max_retries=1).generate([ask("q")])


def test_cache_identity_names_the_endpoint(fake_server):
    # the same model name on another base_url must not be served the first one's answers
    a = make_llm(fake_server)
    b = OpenAICompatibleLLM("fake-model", base_url="http://127.0.0.1:9/v1", api_key_env=None)
    assert a.cache_identity != b.cache_identity
    assert a.cache_identity == f"fake-model@{fake_server.url}"


def first_user(body: dict) -> str:
    """The original user message of a request (a repair request appends more turns)."""
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def test_gaama_and_membox_llm_builds_through_a_loopback_server(fake_server):
    """The LLM builds of the related systems against an OpenAI-compatible server: the prompts
    reach it, its replies are parsed into the graph, and a garbled reply is counted."""
    from scripted_memory import scripted_reply

    from synapse_pt.data import load_locomo, sample_path
    from synapse_pt.graph.extraction import LLMConceptExtractor
    from synapse_pt.memory.gaama.memory import FACT, GAAMAMemory
    from synapse_pt.memory.membox.memory import MemboxMemory
    from synapse_pt.models.hashing import HashingEncoder

    conv = load_locomo(sample_path()).conversations[0]
    first = next(conv.turns()).dia_id

    def behaviour(body, n):
        prompt = first_user(body)
        text = scripted_reply(prompt, garble=f"date:\n[{first}]")  # the first chunk's prompt
        return 200, completion_body(text, {"prompt_tokens": 50, "completion_tokens": 20}), 0.0

    fake_server.behaviour = behaviour
    encoder = HashingEncoder(64)
    gaama = GAAMAMemory(encoder, LLMConceptExtractor(make_llm(fake_server)), chunk_tokens=120,
                        prompts="ours")  # the scripted replies answer our wordings
    gaama.ingest([conv])
    block = gaama.blocks[conv.sample_id]
    assert block.kind.count(FACT) > 0
    assert gaama.describe()["extraction_failures"] == 1  # the garbled first chunk, counted
    membox = MemboxMemory(encoder, LLMConceptExtractor(make_llm(fake_server)),
                          prompts="ours")  # the scripted replies answer our wordings
    membox.ingest([conv])
    assert membox.describe()["build"] == "membox-llm" and membox.boxes
    prompts = [first_user(b) for b in fake_server.bodies]
    assert any("Write the atomic facts" in p for p in prompts)
    assert any("Does the new message continue" in p for p in prompts)
    assert any("3-8 keywords" in p for p in prompts)
