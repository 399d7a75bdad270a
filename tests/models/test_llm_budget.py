"""``llm.max_cost_usd``: the worst case decides what is sent; what arrives is cached before the
stop; the same command resumes (unit level here, the CLI in tests/test_paper_path.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from synapse_pt.models.accounting import ModelPrice
from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse
from synapse_pt.models.llm.budget import BudgetedLLM, BudgetExceeded
from synapse_pt.models.llm.cache import CachedLLM


class WordLLM(LLM):
    """Counts a token per word; answers "ok" with usage of 10 prompt and 2 completion tokens."""

    backend, model = "words", "words-1"

    def __init__(self) -> None:
        self.sent: list[str] = []

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        self.sent += [r.messages[-1][1] for r in requests]
        return [ChatResponse("ok", 10, 2, 0.1, self.model) for _ in requests]

    def count_tokens(self, text: str) -> int:
        return len(text.split())


# USD 1 per 1M prompt tokens, USD 10 per 1M completion tokens
PRICE = ModelPrice(1.0, 10.0)


def ask(text: str) -> ChatRequest:
    return ChatRequest((("user", text),), max_tokens=6)


def test_worst_case_by_hand() -> None:
    llm = BudgetedLLM(WordLLM(), 1.0, PRICE)
    # prompt: 3 words + 4 overhead = 7 tokens -> 7e-6; completion: 6 x 10e-6 = 60e-6
    assert llm.worst_case_usd(ask("one two three")) == pytest.approx(67e-6)


def test_sends_the_prefix_that_fits_then_stops() -> None:
    inner = WordLLM()
    # worst case of each "qN" request: (1 + 4) x 1e-6 + 6 x 10e-6 = 65e-6; 3 fit under 200e-6
    llm = BudgetedLLM(inner, 200e-6, PRICE)
    seen: list[int] = []
    with pytest.raises(BudgetExceeded, match=r"3 of the 5 requests of this batch sent, 2 left"):
        llm.generate_incremental([ask(f"q{i}") for i in range(5)], lambda i, r: seen.append(i))
    assert inner.sent == ["q0", "q1", "q2"] and seen == [0, 1, 2]
    # spending counts the reported usage: 3 x (10 x 1e-6 + 2 x 10e-6) = 90e-6
    assert llm.spent_usd == pytest.approx(90e-6)


def test_a_rerun_resumes_from_the_cache(tmp_path) -> None:
    inner = WordLLM()
    batch = [ask(f"q{i}") for i in range(5)]
    first = CachedLLM(BudgetedLLM(inner, 200e-6, PRICE), tmp_path / "cache.sqlite")
    with pytest.raises(BudgetExceeded):
        first.generate(batch)
    # the same batch with a higher cap: only the two unanswered requests are sent
    second = CachedLLM(BudgetedLLM(inner, 1.0, PRICE), tmp_path / "cache.sqlite")
    out = second.generate(batch)
    assert len(out) == 5 and [r.cached for r in out] == [True] * 3 + [False] * 2
    assert inner.sent == ["q0", "q1", "q2", "q3", "q4"]


def test_a_cap_of_zero_sends_nothing_and_a_negative_cap_is_refused() -> None:
    inner = WordLLM()
    with pytest.raises(BudgetExceeded, match="0 of the 1 requests"):
        BudgetedLLM(inner, 0.0, PRICE).generate([ask("q")])
    assert inner.sent == []
    with pytest.raises(ValueError, match="max_cost_usd"):
        BudgetedLLM(inner, -1.0, PRICE)


class BigBillLLM(WordLLM):
    """Like :class:`WordLLM`, but each answer reports 200,000 prompt and 100,000 completion
    tokens, far above what ``count_tokens`` estimates (a server billing more than the estimate)."""

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        self.sent += [r.messages[-1][1] for r in requests]
        return [ChatResponse("ok", 200_000, 100_000, 0.1, self.model) for _ in requests]


def test_the_default_backend_stops_reporting_at_the_cap_and_caches_what_it_has(tmp_path) -> None:
    # a backend answering the whole batch at once (LLM's default generate_incremental): every
    # answer it has is cached, then the stop; 200,000 x 1e-6 + 100,000 x 10e-6 = USD 1.2 each
    inner = BigBillLLM()
    llm = CachedLLM(BudgetedLLM(inner, 0.10, PRICE), tmp_path / "cache.sqlite")
    with pytest.raises(BudgetExceeded, match=r"\$2\.400000 spent .* 2 of the 2 requests"):
        llm.generate([ask("q0"), ask("q1")])
    assert len(llm.cache) == 2 and len(inner.sent) == 2
    again = CachedLLM(BudgetedLLM(BigBillLLM(), 0.10, PRICE), tmp_path / "cache.sqlite")
    assert [r.cached for r in again.generate([ask("q0"), ask("q1")])] == [True, True]


def test_reported_usage_stops_the_batch_at_the_concurrency(fake_server, tmp_path) -> None:
    """Issue 51: a server reporting 200,000 prompt and 100,000 completion tokens an answer
    (0.2 x 0.15 + 0.1 x 0.60 = USD 0.09 at gpt-4o-mini's prices) under a USD 0.05 cap. The
    worst-case estimate lets the whole batch of 14 through; the first answer's reported usage
    passes the cap, so nothing more is sent: only the two requests in flight at once
    (max_concurrency = 2) ever reach the server, and both answers are cached."""
    from conftest import completion_body

    from synapse_pt.models.llm.openai_compat import OpenAICompatibleLLM

    fake_server.behaviour = lambda body, n: (200, completion_body(
        "ok", {"prompt_tokens": 200_000, "completion_tokens": 100_000}), 0.05)
    backend = OpenAICompatibleLLM("gpt-4o-mini", base_url=fake_server.url, api_key_env=None,
                                  max_concurrency=2, max_retries=0)
    budget = BudgetedLLM(backend, 0.05, ModelPrice(0.15, 0.60))
    llm = CachedLLM(budget, tmp_path / "cache.sqlite")
    batch = [ask(f"q{i}") for i in range(14)]
    assert sum(budget.worst_case_usd(r) for r in batch) < 0.05  # the estimate sends them all
    with pytest.raises(BudgetExceeded, match=r"0\.05 reached: \$0\.180000 spent .* 2 of the 14 "
                                             r"requests of this batch sent, 12 left"):
        llm.generate(batch)
    assert len(fake_server.bodies) == 2 and len(llm.cache) == 2
    assert budget.spent_usd == pytest.approx(2 * 0.09)
