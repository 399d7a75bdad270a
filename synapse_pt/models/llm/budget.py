"""What a paid model costs, and the cap on it (``llm.max_cost_usd``): :class:`BudgetedLLM`.

:class:`BudgetedLLM` sits between the response cache and the backend, so cache hits cost nothing
and every answer that arrives is stored before the cap can stop the command. It writes every
reply the server bills into the command's :class:`~.ledger.SpendLedger` (shared by a study's
variants, a multirun's jobs and a resumed run), priced at the model's price:

* **Before each request is sent** (each HTTP attempt, a retry included) its worst case is held
  in the ledger: its prompt at one token per UTF-8 byte plus the per-message overhead
  (:func:`prompt_tokens_bound`: no byte-level tokenizer counts more) and a completion of its
  ``max_tokens``. It is sent only when the ledger's bills, the holds of the requests in flight
  and this worst case stay within the cap; otherwise nothing more is sent.
* **As each reply arrives** the hold is replaced by the reply's bill: the usage the server
  reported, the estimate where it reported none, or the worst case where nothing came back (a
  timeout after the request was sent) or the usage was refused. A reply the run rejects (an empty
  or ``null`` completion, as reasoning models return, or an unreadable body) is billed like an
  answer.

A backend that sends billed requests itself (``LLM.meters_attempts``: the OpenAI-compatible
backend) asks :meth:`BudgetedLLM.try_admit` before each HTTP attempt (waiting while the holds of
the requests in flight fill the room under the cap) and reports each with
:meth:`BudgetedLLM.bill`; any other backend is metered here, request by request.

At the cap :class:`BudgetExceeded` stops the command after what was answered has been cached: the
requests in flight finish (they are paid for, so they are cached), nothing else is sent. As long
as the server bills no more than a request can cost, the spending never passes the cap; a server
that bills more pushes it past by at most what the requests in flight at once were billed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from synapse_pt.models.llm.accounting import ModelPrice, usd_setting

from .base import LLM, MESSAGE_OVERHEAD_TOKENS, ChatRequest, ChatResponse, LLMError, OnResponse
from .ledger import (
    ACCEPTED,
    ESTIMATED,
    REPORTED,
    UNANSWERED,
    WORST_CASE,
    Bill,
    SpendLedger,
    token_count,
)

log = logging.getLogger(__name__)

#: tokens a chat template adds to prime the reply (OpenAI's accounting: 3), beyond each message's
REPLY_PRIMING_TOKENS = 3


def prompt_tokens_bound(messages: Sequence[tuple[str, str]]) -> int:
    """The most prompt tokens ``messages`` can be under any byte-level tokenizer (every token
    covers at least one UTF-8 byte): each message's bytes plus its overhead, plus the reply's
    priming."""
    return (sum(len(content.encode("utf-8")) + MESSAGE_OVERHEAD_TOKENS for _, content in messages)
            + REPLY_PRIMING_TOKENS)


def completion_tokens_bound(request: ChatRequest) -> int:
    """The most completion tokens ``request`` lets the server bill: its ``max_tokens``, or a
    larger ``max_completion_tokens`` set in its ``extra``."""
    extra = dict(request.extra)
    limits = [request.max_tokens] + [int(extra[k]) for k in ("max_tokens", "max_completion_tokens")
                                     if isinstance(extra.get(k), int)]
    return max(limits)


class BudgetExceeded(LLMError):
    """The spending reached ``llm.max_cost_usd``; what was answered is cached. Carries what was
    spent, the cap and the ledger, for the command's one-line stop (how to resume)."""

    def __init__(self, message: str, spent_usd: float, max_cost_usd: float, ledger: str) -> None:
        super().__init__(message)
        self.spent_usd, self.max_cost_usd, self.ledger = spent_usd, max_cost_usd, ledger


class CapReached(Exception):
    """Raised by :meth:`BudgetedLLM.admit` inside a backend: the request does not fit under the
    cap, so it is not sent; the backend sends nothing more and re-raises it once the requests in
    flight are done."""

    def __init__(self, worst_usd: float) -> None:
        super().__init__(f"the next request could cost up to ${worst_usd:.6f}")
        self.worst_usd = worst_usd


class BudgetedLLM(LLM):
    """Meter ``llm`` into ``ledger`` at ``price``, capped at ``max_cost_usd`` (None: no cap).

    Attributes:
        spent_usd: what the replies this object metered cost (this run's part of the ledger).
        billed, rejected, unanswered: how many replies it billed, how many of them the run
            rejected (and re-asked), how many timed out after they were sent.
    """

    def __init__(self, llm: LLM, price: ModelPrice, ledger: SpendLedger,
                 max_cost_usd: float | None = None) -> None:
        self.llm = llm
        self.price = price
        self.ledger = ledger
        self.max_cost_usd = (None if max_cost_usd is None
                             else usd_setting(max_cost_usd, "llm.max_cost_usd"))
        self.backend = llm.backend
        self.model = llm.model
        self.spent_usd = 0.0
        self.billed = self.rejected = self.unanswered = 0
        if llm.meters_attempts:
            llm.meter = self

    @property
    def cache_identity(self) -> str:
        return self.llm.cache_identity  # the cap changes nothing about the answers

    # -- the meter a backend calls -------------------------------------------------------------

    def worst_case_usd(self, request: ChatRequest) -> float:
        """The most one request can be billed: its prompt at one token per byte and a
        completion of its ``max_tokens``."""
        return self.price.cost(prompt_tokens_bound(request.messages),
                               completion_tokens_bound(request))

    def try_admit(self, request: ChatRequest) -> int | None:
        """Hold ``request``'s worst case in the ledger before it is sent (the hold's id); None
        while only the holds of requests in flight keep it from fitting (wait for them);
        :class:`CapReached` when it does not fit under the cap beside what was spent."""
        worst = self.worst_case_usd(request)
        hold = self.ledger.hold(worst, self.max_cost_usd)
        if hold is not None:
            return hold
        if self.max_cost_usd is None or self.ledger.spent() + worst > self.max_cost_usd:
            raise CapReached(worst)
        return None

    def admit(self, request: ChatRequest) -> int:
        """:meth:`try_admit` without waiting: :class:`CapReached` unless it fits now."""
        hold = self.try_admit(request)
        if hold is None:
            raise CapReached(self.worst_case_usd(request))
        return hold

    def bill(self, hold: int | None, request: ChatRequest, prompt_tokens: int | None,
             completion_tokens: int | None, *, outcome: str = ACCEPTED, estimated: bool = False,
             note: str = "") -> None:
        """Write one billed reply into the ledger in place of its hold: at its token counts
        (estimated or reported), or at the request's worst case where they are None."""
        if prompt_tokens is None or completion_tokens is None:
            prompt_tokens = prompt_tokens_bound(request.messages)
            completion_tokens = completion_tokens_bound(request)
            usage = WORST_CASE
        else:
            usage = ESTIMATED if estimated else REPORTED
        usd = self.price.cost(prompt_tokens, completion_tokens)
        self.ledger.settle(hold, Bill(self.llm.model, prompt_tokens, completion_tokens, usd,
                                      outcome, usage, note))
        self.spent_usd += usd
        self.billed += 1
        self.rejected += outcome != ACCEPTED and outcome != UNANSWERED
        self.unanswered += outcome == UNANSWERED

    def release(self, hold: int | None) -> None:
        """Drop a hold unbilled (the server refused the request with an error status, or it
        never reached the server)."""
        if hold is not None:
            self.ledger.settle(hold, None)

    # -- LLM interface --------------------------------------------------------------------------

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        return self.generate_incremental(requests, lambda i, r: None)

    def generate_incremental(self, requests: Sequence[ChatRequest],
                             on_response: OnResponse) -> list[ChatResponse]:
        if self.llm.meters_attempts:
            try:
                return self.llm.generate_incremental(requests, on_response)
            except CapReached as stop:
                raise self.exceeded(str(stop)) from None
        return self._metered_here(requests, on_response)

    def _metered_here(self, requests: Sequence[ChatRequest],
                      on_response: OnResponse) -> list[ChatResponse]:
        """A backend that does not meter itself: each request's worst case held before the
        batch goes out (the longest prefix that fits), each answer billed as it arrives."""
        holds: list[int | None] = []
        stop: CapReached | None = None
        for request in requests:
            try:
                holds.append(self.admit(request))
            except CapReached as err:
                stop = err
                break
        sent = list(requests[:len(holds)])
        billed: set[int] = set()

        def paid(i: int, response: ChatResponse) -> None:
            self.bill(holds[i], sent[i], token_count(response.prompt_tokens),
                      token_count(response.completion_tokens),
                      estimated=bool(response.meta.get("usage_estimated")))
            billed.add(i)
            on_response(i, response)  # cached before anything can stop the batch

        try:
            responses = self.llm.generate_incremental(sent, paid) if sent else []
        finally:
            for i, hold in enumerate(holds):
                if i not in billed:
                    self.release(hold)
        if stop is not None:
            raise self.exceeded(f"{len(sent)} of the {len(requests)} requests of this batch "
                                f"sent; {stop}")
        return responses

    def exceeded(self, why: str) -> BudgetExceeded:
        """The one-line stop: spent, cap, what the ledger holds (the command adds how to
        resume)."""
        totals = self.ledger.totals()
        spent = totals["usd"]
        cap = self.max_cost_usd if self.max_cost_usd is not None else float("inf")
        rejected = f", {totals['rejected']} of them rejected and re-asked" if totals[
            "rejected"] else ""
        unanswered = f", {totals['unanswered']} timed out" if totals["unanswered"] else ""
        return BudgetExceeded(
            f"llm.max_cost_usd={cap:g} reached: ${spent:.6f} spent by this command "
            f"({totals['billed']} billed replies{rejected}{unanswered}; ledger {self.ledger}); "
            f"nothing more was sent ({why}); every answer received is in the response cache",
            spent, cap, str(self.ledger))

    def count_tokens(self, text: str) -> int:
        return self.llm.count_tokens(text)


def find_budget(llm: Any) -> BudgetedLLM | None:
    """The :class:`BudgetedLLM` inside a chain of wrappers (the response cache, a judge's
    recording view), or None."""
    seen = 0
    while llm is not None and seen < 8:
        if isinstance(llm, BudgetedLLM):
            return llm
        llm, seen = getattr(llm, "llm", None), seen + 1
    return None


def ledger_spend(llm: Any) -> dict[str, Any]:
    """The ledger's part of ``spend.json`` for a run's ``llm``: what every reply this run was
    billed cost (``cost_usd_spent``: answers, replies rejected and re-asked, requests that timed
    out), how many of each, and the command's ledger with its total (a study's variants, a
    multirun's jobs, earlier runs of the folder); ``{}`` for an unmetered model."""
    meter = find_budget(llm)
    if meter is None:
        return {}
    return {"cost_usd_spent": meter.spent_usd, "billed_replies": meter.billed,
            "rejected_replies": meter.rejected, "unanswered_requests": meter.unanswered,
            "max_cost_usd": meter.max_cost_usd,
            "ledger": {"path": str(meter.ledger), "command_usd_spent": meter.ledger.spent()}}
