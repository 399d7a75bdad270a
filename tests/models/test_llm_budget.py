"""``llm.max_cost_usd`` and the spend ledger (issue 58): the worst case of each request is held
before it is sent; every reply the server bills (accepted, rejected and re-asked, timed out) is
written into the ledger the command shares; what arrives is cached before the stop; money that
is not a finite number >= 0 is refused in one line (unit level here, the CLI in
tests/test_spend_ledger_cli.py)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any

import pytest
from conftest import completion_body

from synapse_pt.common.errors import ConfigError
from synapse_pt.models.llm.accounting import ModelPrice, usd_setting
from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse, LLMError
from synapse_pt.models.llm.budget import BudgetedLLM, BudgetExceeded, prompt_tokens_bound
from synapse_pt.models.llm.cache import CachedLLM
from synapse_pt.models.llm.ledger import SpendLedger, holds_spending
from synapse_pt.models.llm.openai_compat import OpenAICompatibleLLM


class WordLLM(LLM):
    """Answers "ok" with usage of 10 prompt and 2 completion tokens (a backend that does not
    meter its own attempts: metered per answer)."""

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
MINI = ModelPrice(0.15, 0.60)  # gpt-4o-mini's list prices


def ask(text: str, max_tokens: int = 6) -> ChatRequest:
    return ChatRequest((("user", text),), max_tokens=max_tokens)


def budget(inner: LLM, cap: float | None, ledger: SpendLedger | None = None,
           price: ModelPrice = PRICE) -> BudgetedLLM:
    return BudgetedLLM(inner, price, ledger or SpendLedger(None), cap)


def openai_llm(server, **kw: Any) -> OpenAICompatibleLLM:
    params = {"api_key_env": None, "max_retries": 0, "backoff_s": 0.01, "timeout_s": 5.0}
    params.update(kw)
    return OpenAICompatibleLLM("gpt-4o-mini", base_url=server.url, **params)


def test_worst_case_by_hand() -> None:
    # "one two three": 13 UTF-8 bytes + 4 overhead + 3 priming = 20 tokens at most (no
    # byte-level tokenizer makes more tokens than bytes) -> 20e-6; completion 6 x 10e-6 = 60e-6
    assert prompt_tokens_bound([("user", "one two three")]) == 20
    assert budget(WordLLM(), 1.0).worst_case_usd(ask("one two three")) == pytest.approx(80e-6)
    # "é" is 2 bytes
    assert prompt_tokens_bound([("system", "é"), ("user", "")]) == 2 + 4 + 0 + 4 + 3


def test_sends_the_prefix_that_fits_then_stops() -> None:
    inner = WordLLM()
    # worst case of each "qN": (2 + 4 + 3) x 1e-6 + 6 x 10e-6 = 69e-6; two fit under 150e-6
    llm = budget(inner, 150e-6)
    seen: list[int] = []
    with pytest.raises(BudgetExceeded, match=r"2 of the 5 requests of this batch sent"):
        llm.generate_incremental([ask(f"q{i}") for i in range(5)], lambda i, r: seen.append(i))
    assert inner.sent == ["q0", "q1"] and seen == [0, 1]
    # the ledger counts the reported usage: 2 x (10 x 1e-6 + 2 x 10e-6) = 60e-6; holds released
    assert llm.ledger.spent() == pytest.approx(60e-6) == llm.spent_usd
    assert llm.ledger.hold(0.0, 60e-6) is not None  # nothing else held


def test_a_rerun_resumes_from_the_cache_and_counts_what_was_spent(tmp_path) -> None:
    """A resumed command: the same ledger file, so the cap counts what the first run spent."""
    inner = WordLLM()
    batch = [ask(f"q{i}") for i in range(5)]
    path = tmp_path / "spend_ledger.sqlite"
    first = CachedLLM(budget(inner, 150e-6, SpendLedger(path)), tmp_path / "cache.sqlite")
    with pytest.raises(BudgetExceeded):
        first.generate(batch)
    # the same cap again: 60e-6 spent + 69e-6 < 150e-6 lets one more through, no more
    again = CachedLLM(budget(inner, 150e-6, SpendLedger(path)), tmp_path / "cache.sqlite")
    with pytest.raises(BudgetExceeded, match=r"\$0\.000090 spent by this command"):
        again.generate(batch)
    assert inner.sent == ["q0", "q1", "q2"]
    # a higher cap: only the two unanswered requests are sent
    done = CachedLLM(budget(inner, 1.0, SpendLedger(path)), tmp_path / "cache.sqlite")
    out = done.generate(batch)
    assert [r.cached for r in out] == [True] * 3 + [False] * 2
    assert inner.sent == ["q0", "q1", "q2", "q3", "q4"]
    assert SpendLedger(path).spent() == pytest.approx(5 * 30e-6)
    assert holds_spending(tmp_path) and not holds_spending(tmp_path / "elsewhere")


def test_two_runs_of_one_command_share_the_cap(tmp_path) -> None:
    """A study's variants (or a multirun's jobs): two wrappers on one ledger, one cap."""
    ledger = SpendLedger(tmp_path / "spend_ledger.sqlite")
    a, b = WordLLM(), WordLLM()
    budget(a, 150e-6, ledger).generate([ask("a0"), ask("a1")])  # 60e-6
    with pytest.raises(BudgetExceeded, match="1 of the 2 requests"):
        budget(b, 150e-6, ledger).generate([ask("b0"), ask("b1")])  # room for one worst case
    assert b.sent == ["b0"] and ledger.spent() == pytest.approx(90e-6)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, "$1", "abc", True, None])
def test_money_that_is_not_a_finite_number_at_least_zero_is_refused(value: Any) -> None:
    with pytest.raises(ConfigError, match=r"^llm\.max_cost_usd=.*(dollars|number)"):
        budget(WordLLM(), value) if value is not None else usd_setting(value, "llm.max_cost_usd")


def test_a_cap_of_zero_sends_nothing() -> None:
    inner = WordLLM()
    with pytest.raises(BudgetExceeded, match="0 of the 1 requests"):
        budget(inner, 0.0).generate([ask("q")])
    assert inner.sent == []


class BigBillLLM(WordLLM):
    """Each answer reports 200,000 prompt and 100,000 completion tokens (USD 1.2 at PRICE): a
    bill far above what a request can cost."""

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        self.sent += [r.messages[-1][1] for r in requests]
        return [ChatResponse("ok", 200_000, 100_000, 0.1, self.model) for _ in requests]


def test_an_odd_bill_is_counted_as_billed_and_nothing_more_is_sent(tmp_path) -> None:
    inner = BigBillLLM()
    llm = CachedLLM(budget(inner, 0.10), tmp_path / "cache.sqlite")
    llm.generate([ask("q0"), ask("q1")])  # both fit by their worst case; billed USD 2.40
    assert llm.llm.ledger.spent() == pytest.approx(2.4)
    with pytest.raises(BudgetExceeded, match=r"\$2\.400000 spent by this command"):
        llm.generate([ask("q2")])
    assert inner.sent == ["q0", "q1"] and len(llm.cache) == 2


def test_reported_usage_stops_the_batch_at_the_concurrency(fake_server, tmp_path) -> None:
    """Issue 51: a server reporting 200,000 prompt and 100,000 completion tokens an answer
    (USD 0.09) under a USD 0.05 cap. Each request's worst case fits, so two go out at once
    (max_concurrency = 2); their bills pass the cap, so nothing more is sent; both answers are
    cached."""
    fake_server.behaviour = lambda body, n: (200, completion_body(
        "ok", {"prompt_tokens": 200_000, "completion_tokens": 100_000}), 0.05)
    meter = budget(openai_llm(fake_server, max_concurrency=2), 0.05, price=MINI)
    llm = CachedLLM(meter, tmp_path / "cache.sqlite")
    with pytest.raises(BudgetExceeded, match=r"0\.05 reached: \$0\.180000 spent by this command "
                                             r"\(2 billed replies"):
        llm.generate([ask(f"q{i}") for i in range(14)])
    assert len(fake_server.bodies) == 2 and len(llm.cache) == 2
    assert meter.ledger.spent() == pytest.approx(2 * 0.09)


def empty_then(content: str | None, usage: dict | None, good_from: int = 10**9):
    """A server answering 200 with ``content`` (empty, null) and ``usage`` until attempt
    ``good_from``, then a real answer."""
    def behaviour(body: dict, n: int) -> tuple[int, str, float]:
        if n >= good_from:
            return 200, completion_body("fine", {"prompt_tokens": 10, "completion_tokens": 2}), 0
        doc = json.loads(completion_body("x", usage))
        doc["choices"][0]["message"]["content"] = content
        return 200, json.dumps(doc), 0.0
    return behaviour


@pytest.mark.parametrize("content", ["", None], ids=["empty", "null"])
def test_rejected_replies_are_billed_and_the_cap_stops_their_retries(fake_server, content
                                                                     ) -> None:
    """The issue's probe: replies billed but rejected (empty or null content, as reasoning models
    return) were not counted. Each is billed 1,000 prompt + 1,000 completion tokens (USD
    0.00075, more than the request can cost). Under a cap of USD 0.002 the third attempt's bill
    passes the cap and the fourth is not sent: spent at most the cap plus one bill (one request
    in flight). On 492016d all six attempts were sent and the run counted nothing."""
    fake_server.behaviour = empty_then(content, {"prompt_tokens": 1000,
                                                 "completion_tokens": 1000})
    meter = budget(openai_llm(fake_server, max_retries=5), 0.002, price=MINI)
    with pytest.raises(BudgetExceeded, match=r"3 billed replies, 3 of them rejected"):
        meter.generate([ask("q", max_tokens=32)])
    assert fake_server.requests_for("q") == 3
    totals = meter.ledger.totals()
    assert (totals["billed"], totals["rejected"]) == (3, 3)
    assert totals["usd"] == pytest.approx(3 * 0.00075)
    assert 0.002 < totals["usd"] <= 0.002 + 0.00075


def test_one_retry_policy_counts_every_attempt(fake_server) -> None:
    """``max_retries`` bounds the HTTP attempts of a request whatever failed: a 500 (the SDK's
    retry, not billed), an empty 200 (re-asked here, billed), a 500 again: three attempts with
    max_retries=2, then the error. On 492016d each re-ask got the SDK's retries anew (up to
    (max_retries + 1)^2 attempts)."""
    def behaviour(body: dict, n: int) -> tuple[int, str, float]:
        if n % 2 == 1:
            return 500, '{"error": "busy"}', 0.0
        return 200, completion_body("", {"prompt_tokens": 7, "completion_tokens": 1}), 0.0

    fake_server.behaviour = behaviour
    meter = budget(openai_llm(fake_server, max_retries=2), None, price=MINI)
    with pytest.raises(LLMError, match=r"after 3 attempts.*HTTP 500"):
        meter.generate([ask("q")])
    assert fake_server.requests_for("q") == 3
    totals = meter.ledger.totals()
    assert (totals["billed"], totals["rejected"], totals["prompt_tokens"]) == (1, 1, 7)


def test_a_timed_out_attempt_is_billed_at_its_worst_case(fake_server) -> None:
    """A request that timed out after it was sent may have been billed: its worst case is in the
    ledger, beside the answer of the retry."""
    fake_server.behaviour = lambda body, n: (
        (200, completion_body("late"), 1.0) if n == 1 else
        (200, completion_body("on time", {"prompt_tokens": 5, "completion_tokens": 1}), 0.0))
    meter = budget(openai_llm(fake_server, max_retries=1, timeout_s=0.3), None, price=MINI)
    (r,) = meter.generate([ask("q", max_tokens=4)])
    assert r.text == "on time"
    totals = meter.ledger.totals()
    assert (totals["billed"], totals["unanswered"], totals["worst_case"]) == (2, 1, 1)
    worst = prompt_tokens_bound([("user", "q")])
    assert totals["prompt_tokens"] == worst + 5 and totals["completion_tokens"] == 4 + 1


def test_negative_usage_from_a_server_is_refused_and_billed_at_the_worst_case(fake_server):
    """The issue's probe: a server reporting negative usage gave cost_usd_spent: -52.41."""
    fake_server.behaviour = lambda body, n: (200, completion_body(
        "ok", {"prompt_tokens": -87_000_000, "completion_tokens": 3}), 0.0)
    meter = budget(openai_llm(fake_server, max_retries=3), None, price=MINI)
    with pytest.raises(LLMError, match=r"reported usage prompt_tokens=-87000000.*refused"):
        meter.generate([ask("q", max_tokens=8)])
    assert fake_server.requests_for("q") == 1  # not re-asked
    spent = meter.ledger.spent()
    assert spent > 0 and spent == pytest.approx(MINI.cost(prompt_tokens_bound([("user", "q")]), 8))


def test_usage_absent_is_estimated_and_said_so(fake_server) -> None:
    fake_server.behaviour = lambda body, n: (200, completion_body("a" * 40), 0.0)
    meter = budget(openai_llm(fake_server), None, price=MINI)
    (r,) = meter.generate([ask("b" * 80)])
    assert r.meta["usage_estimated"]
    totals = meter.ledger.totals()
    assert (totals["usage_estimated"], totals["prompt_tokens"],
            totals["completion_tokens"]) == (1, 20 + 4, 10)


def test_an_error_status_is_not_billed(fake_server) -> None:
    fake_server.behaviour = lambda body, n: ((429, "slow down", 0.0) if n == 1 else
                                             (200, completion_body("ok", {
                                                 "prompt_tokens": 3, "completion_tokens": 1}),
                                              0.0))
    meter = budget(openai_llm(fake_server, max_retries=2), None, price=MINI)
    meter.generate([ask("q")])
    assert meter.ledger.totals()["billed"] == 1


def test_holds_of_a_dead_process_are_dropped(tmp_path) -> None:
    ledger = SpendLedger(tmp_path / "l.sqlite")
    assert ledger.hold(1.0, 1.5) is not None
    assert ledger.hold(1.0, 1.5) is None  # this process's hold counts
    conn = ledger._connect()
    conn.execute("UPDATE holds SET pid = ?", (_dead_pid(),))
    conn.commit()
    assert ledger.hold(1.0, 1.5) is not None  # a dead process holds nothing


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_prices_that_are_not_finite_numbers_at_least_zero_are_refused() -> None:
    from synapse_pt.models.llm.accounting import price_table

    for bad in ({"prompt": -5, "completion": 0.6}, {"prompt": math.nan, "completion": 0.6},
                {"prompt": "$1", "completion": 0.6}):
        with pytest.raises(ConfigError, match=r"^llm\.prices\.gpt-4o-mini\.prompt="):
            price_table({"gpt-4o-mini": bad})
