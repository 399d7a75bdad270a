"""The LLM interface: a batch of chat requests in, texts with usage and latency out."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Called with (index in the batch, response) as soon as one answer of a batch is ready. If it
#: raises, the batch stops: no further request is sent, the answers of requests already sent are
#: still reported, then its first exception is raised (the spending cap stops a batch this way).
OnResponse = Callable[[int, "ChatResponse"], None]


#: Tokens a chat message costs beyond its content (role and separators; OpenAI's accounting).
MESSAGE_OVERHEAD_TOKENS = 4


def estimate_tokens(text: str) -> int:
    """Token count estimate where no tokenizer is at hand: about 4 characters per token
    (OpenAI's rule of thumb for English under its BPE tokenizers); 0 for an empty text."""
    return math.ceil(len(text) / 4)


class LLMError(RuntimeError):
    """A backend failed for good (after its retries), or was asked for something it cannot do."""


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion request. Temperature 0 and a fixed seed by default (reproducible
    runs).

    ``temperature`` / ``seed`` ``None``: not sent, the server's default (OpenAI: temperature
    1.0, no seed), as a related system's code sends them. ``budget_param``: the name
    ``max_tokens`` is sent under (``"max_tokens"``, ``"max_completion_tokens"``), ``None`` for
    none (the model's own limit; ``max_tokens`` still bounds what the request may cost).
    ``accept_empty``: an empty completion is an answer (``""``), not a malformed reply.
    """

    messages: tuple[tuple[str, str], ...]  # ((role, content), ...); a tuple so requests hash
    max_tokens: int = 64
    temperature: float | None = 0.0
    seed: int | None = 0
    stop: tuple[str, ...] = ()
    extra: tuple[tuple[str, Any], ...] = ()  # further backend parameters, sorted (key, value)
    budget_param: str | None = "max_tokens"
    accept_empty: bool = False

    @classmethod
    def from_messages(cls, messages: Sequence[dict[str, str]], **params: Any) -> ChatRequest:
        extra = params.pop("extra", {}) or {}
        return cls(tuple((m["role"], m["content"]) for m in messages),
                   extra=tuple(sorted(extra.items())), **params)

    def message_dicts(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]


@dataclass
class ChatResponse:
    """A completion with its accounting. ``cached`` is True when served from the response cache."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    model: str
    cached: bool = False
    meta: dict[str, Any] = field(default_factory=dict)


class BatchReporter:
    """Hands each answer of a batch to ``on_response``; the first exception it raises stops the
    batch (the :data:`OnResponse` contract).

    A backend calls the reporter for every answer that arrives, checks :attr:`stopped` before
    sending a request, and calls :meth:`raise_if_stopped` once the requests in flight are done.
    """

    def __init__(self, on_response: OnResponse) -> None:
        self.on_response = on_response
        self.error: Exception | None = None

    @property
    def stopped(self) -> bool:
        """True once ``on_response`` has raised: send nothing more."""
        return self.error is not None

    def __call__(self, i: int, response: ChatResponse) -> None:
        try:
            self.on_response(i, response)
        except Exception as err:  # kept, and raised by raise_if_stopped once the batch is done
            if self.error is None:
                self.error = err

    def raise_if_stopped(self) -> None:
        if self.error is not None:
            raise self.error


class LLM(ABC):
    """A chat model backend.

    ``generate`` answers every request of the batch, in order. Backends raise :class:`LLMError` for
    a request that fails after their retries; they never return an empty string in place of an
    answer, unless the request says it accepts one (``accept_empty``).
    """

    backend: str = "base"
    model: str = ""
    #: True for a backend that sends billed requests itself: it asks its ``meter`` (set by
    #: :class:`~synapse_pt.models.llm.budget.BudgetedLLM`) before each HTTP attempt and reports
    #: every billed reply to it; any other backend is metered per answer by that wrapper
    meters_attempts: bool = False
    meter: Any = None

    @property
    def cache_identity(self) -> str:
        """What the response cache keys on besides ``backend``: ``model`` by default; backends
        whose answers also depend on local weights or precision add a fingerprint of those."""
        return self.model

    @classmethod
    def check_settings(cls, settings: Mapping[str, Any]) -> None:
        """Check what can be checked of this backend's config (``llm.backend``) without building
        it, loading weights or opening a connection (a run does it before anything is embedded);
        raise :class:`~synapse_pt.common.errors.ConfigError` naming the setting. Nothing to check by
        default."""
        return None

    @abstractmethod
    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]: ...

    def generate_incremental(self, requests: Sequence[ChatRequest],
                             on_response: OnResponse) -> list[ChatResponse]:
        """Like :meth:`generate`, and calls ``on_response(i, response)`` as each answer is ready.

        A caller that stores answers in ``on_response`` keeps those that arrived before a failure
        (the response cache resumes a crashed run this way). If ``on_response`` raises, no further
        request is sent and that exception is raised once the answers in hand are reported. This
        default reports the answers once the whole batch is done; backends that answer piecewise
        override it.
        """
        responses = self.generate(requests)
        report = BatchReporter(on_response)
        for i, response in enumerate(responses):
            report(i, response)
        report.raise_if_stopped()
        return responses

    @abstractmethod
    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under this model's tokenizer (an estimate where none is available)."""
