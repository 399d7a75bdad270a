"""A spending cap on a paid model (``llm.max_cost_usd``).

:class:`BudgetedLLM` sits between the response cache and the backend, so cache hits cost nothing
and every answer that arrives is stored before the cap can stop the run. Two checks hold the cap:

* **Before a batch goes out** each request's worst case is priced (its prompt tokens, counted with
  the backend's ``count_tokens`` plus the per-message overhead, at the prompt price; ``max_tokens``
  at the completion price); only the longest prefix of the batch whose worst case, added to what
  was spent so far, still fits under the cap is sent. This estimate is the only guard before the
  first answer arrives.
* **As each answer arrives** its cost is priced from the token usage the server reports (an
  estimate where it sends none) and added to the spending. Once the spending passes the cap, no
  further request is sent, not even within the batch: the backend skips every request not yet
  started and lets those already in flight finish (their answers are paid for, so they are
  cached).

Either way :class:`BudgetExceeded` stops the run after what was answered has been cached: the same
command resumes where it stopped. The worst overshoot is what the requests in flight at once cost
(``llm.backend.max_concurrency`` of them for the OpenAI-compatible backend): a server that bills
more than the estimate can push the spending past the cap by at most that. The cap is per run
(what one process pays): a resumed run pays only for what is left, up to the cap again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from synapse_pt.errors import ConfigError

from ..accounting import ModelPrice
from .base import LLM, MESSAGE_OVERHEAD_TOKENS, ChatRequest, ChatResponse, LLMError, OnResponse

log = logging.getLogger(__name__)



class BudgetExceeded(LLMError):
    """The spending reached ``llm.max_cost_usd``; what was answered is cached."""


class _CapPassed(Exception):
    """Raised from the answer callback once the reported spending passes the cap: the backend
    sends nothing more and re-raises it when the requests in flight are done."""


class BudgetedLLM(LLM):
    """Wrap ``llm`` with a spending cap.

    Args:
        llm: the paid backend.
        max_cost_usd: the cap on this process's spending through this wrapper (USD).
        price: the backend model's price (USD per 1M prompt and completion tokens).

    Attributes:
        spent_usd: what the answers received so far cost (their reported usage).
    """

    def __init__(self, llm: LLM, max_cost_usd: float, price: ModelPrice) -> None:
        if max_cost_usd < 0:
            raise ConfigError(f"llm.max_cost_usd must be >= 0, got {max_cost_usd}")
        self.llm = llm
        self.max_cost_usd = float(max_cost_usd)
        self.price = price
        self.backend = llm.backend
        self.model = llm.model
        self.spent_usd = 0.0

    @property
    def cache_identity(self) -> str:
        return self.llm.cache_identity  # the cap changes nothing about the answers

    def worst_case_usd(self, request: ChatRequest) -> float:
        """The most one request can cost: its prompt and a completion of ``max_tokens``."""
        prompt = sum(self.llm.count_tokens(content) + MESSAGE_OVERHEAD_TOKENS
                     for _, content in request.messages)
        return self.price.cost(prompt, request.max_tokens)

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        return self.generate_incremental(requests, lambda i, r: None)

    def generate_incremental(self, requests: Sequence[ChatRequest],
                             on_response: OnResponse) -> list[ChatResponse]:
        allowed, reserved = 0, self.spent_usd
        for request in requests:
            cost = self.worst_case_usd(request)
            if reserved + cost > self.max_cost_usd:
                break
            reserved += cost
            allowed += 1
        answered = 0

        def paid(i: int, response: ChatResponse) -> None:
            nonlocal answered
            self.spent_usd += self.price.cost(response.prompt_tokens, response.completion_tokens)
            answered += 1
            on_response(i, response)  # cached first: a stop never loses a paid answer
            if self.spent_usd > self.max_cost_usd:
                raise _CapPassed

        try:
            responses = (self.llm.generate_incremental(list(requests[:allowed]), paid)
                         if allowed else [])
        except _CapPassed:
            raise self._exceeded(
                answered, len(requests), "the answers' reported usage passed the cap; requests "
                "not yet sent were not sent, those in flight were let finish") from None
        if allowed < len(requests):
            raise self._exceeded(
                answered, len(requests), "the next one could cost up to "
                f"${self.worst_case_usd(requests[allowed]):.6f}")
        return responses

    def _exceeded(self, answered: int, batch: int, why: str) -> BudgetExceeded:
        """The one-line stop: spent, cap, what was sent, how to resume."""
        return BudgetExceeded(
            f"llm.max_cost_usd={self.max_cost_usd:g} reached: ${self.spent_usd:.6f} spent in "
            f"this run (the server's reported usage); {answered} of the {batch} requests of this "
            f"batch sent, {batch - answered} left ({why}). Every answer received is in the "
            "response cache: the same command resumes from here (each run spends at most "
            "llm.max_cost_usd plus what the requests in flight at once cost; raise it to finish "
            "in one go); `python -m synapse_pt.estimate` with the same overrides prints what the "
            "whole run costs.")

    def count_tokens(self, text: str) -> int:
        return self.llm.count_tokens(text)
