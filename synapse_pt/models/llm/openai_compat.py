"""Chat completions from any OpenAI-compatible server (OpenAI, vLLM, Ollama, ...) through the
official ``openai`` SDK.

One ``generate`` call opens an :class:`openai.AsyncOpenAI` client and answers the batch with at most
``max_concurrency`` requests in flight (an :class:`asyncio.Semaphore`).

One retry policy: a request gets at most ``max_retries + 1`` HTTP attempts, whatever failed.
Transport failures are the SDK's to retry (408/409/429/5xx, timeouts and connection errors, with
its exponential backoff, 0.5 s doubling up to 8 s, with jitter, honouring a server's
``Retry-After``); what the SDK accepts but a run must not score is re-asked here from the same
attempts: a 200 whose body is not JSON, has no ``choices``, or carries no or an empty completion
(``backoff_s`` doubling between those). A request still failing when its attempts are spent raises
:class:`LLMError` naming the status and an excerpt of the body.

Every attempt is metered (``meter``, set by :class:`~synapse_pt.models.llm.budget.BudgetedLLM`):
its worst case is held before it is sent (nothing is sent past the cap), and every reply the
server may have billed is written into the command's spend ledger: each 200 (an answer, or a reply
rejected and re-asked) at the usage it reports, an attempt that timed out after it was sent at its
worst case; an error status or a connection that never opened is not billed. A reply whose usage
is not a count of tokens (negative, not an integer) is billed at its worst case and refused.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import json
import logging
import os
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx2
import openai

from synapse_pt.common.errors import ConfigError

from .base import (
    LLM,
    MESSAGE_OVERHEAD_TOKENS,
    BatchReporter,
    ChatRequest,
    ChatResponse,
    LLMError,
    OnResponse,
    estimate_tokens,
)
from .budget import CapReached
from .ledger import ACCEPTED, REJECTED, UNANSWERED, token_count

log = logging.getLogger(__name__)

_EXCERPT = 300  # characters of a failing body quoted in errors
#: The key sent to a server that needs none (vLLM's and Ollama's convention): the SDK always sends
#: a bearer token, and local servers started without ``--api-key`` ignore it.
NO_KEY = "EMPTY"


def api_key(env: str | None) -> str | None:
    """The API key in the environment variable ``env``, without surrounding white space;
    ``None`` where it is unset, empty or blank (a blank key is a missing one: a server refuses
    it)."""
    key = os.environ.get(env, "").strip() if env else ""
    return key or None


def needs_api_key(base_url: str) -> bool:
    """Whether the server at ``base_url`` refuses requests without a key: OpenAI's API does;
    local servers (vLLM, Ollama, ``transformers serve``) accept :data:`NO_KEY`."""
    return "api.openai.com" in base_url


class _Malformed(Exception):
    """A 200 answer that cannot be scored (not JSON, no choices, no or an empty completion)."""


class _Skipped(Exception):
    """A request not started because another request of its batch failed for good."""


def _excerpt(text: object) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."


def _status_body(err: openai.APIStatusError) -> str:
    try:
        return err.response.text
    except Exception:  # a streamed body that cannot be read again: the SDK's message
        return str(err)


def _content(data: Any, accept_empty: bool = False) -> tuple[str | None, str]:
    """The completion of a parsed 200 body and, where it is none a run can score, why not.
    ``accept_empty`` (a request that takes an empty completion, as a related system's code
    does): a null or blank completion is the answer ``""``."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices:
        return None, "HTTP 200 without choices"
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if accept_empty and isinstance(message, dict) and (
            content is None or isinstance(content, str) and not content.strip()):
        message["content"] = content or ""
        return message["content"], ""
    if not isinstance(content, str):
        return None, "HTTP 200 without choices[0].message.content"
    if not content.strip():  # an empty completion is a failure, never a scored answer
        return None, "HTTP 200 with an empty completion"
    return content, ""


def _usage(data: Any, request: ChatRequest, text: str | None
           ) -> tuple[int | None, int | None, bool, str]:
    """``(prompt tokens, completion tokens, estimated, refused)`` of a 200 body: the usage the
    server reported; the estimate where it reported none (the completion at the request's
    ``max_tokens`` where no text came back: the model may have spent them unseen); ``None``
    counts and what was refused where the reported usage is no count of tokens."""
    usage = data.get("usage") if isinstance(data, dict) else None
    if isinstance(usage, dict) and ("prompt_tokens" in usage or "completion_tokens" in usage):
        prompt = token_count(usage.get("prompt_tokens"))
        completion = token_count(usage.get("completion_tokens"))
        if prompt is None or completion is None:
            return None, None, False, (
                f"usage prompt_tokens={usage.get('prompt_tokens')!r}, completion_tokens="
                f"{usage.get('completion_tokens')!r} (token counts are integers >= 0)")
        return prompt, completion, False, ""
    prompt = sum(estimate_tokens(c) + MESSAGE_OVERHEAD_TOKENS for _, c in request.messages)
    return prompt, request.max_tokens if text is None else estimate_tokens(text), True, ""


#: seconds between tries to hold a request's worst case while those in flight hold the room
_ADMIT_POLL_S = 0.02

#: connection failures before the request reached the server: nothing was billed
_UNSENT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout, httpx2.WriteError,
           httpx2.WriteTimeout)


class _Metering:
    """The attempts of one chat request, as the transport sees them (its SDK retries included):
    how many were sent, and the hold of a 2xx reply the backend has still to bill."""

    def __init__(self, meter: Any, request: ChatRequest) -> None:
        self.meter, self.request = meter, request
        self.sent = 0
        self.reply_hold: int | None = None
        self.pending = False  # a 2xx reply came back and is not billed yet

    def bill_reply(self, data: Any, text: str | None, outcome: str, note: str = "") -> str:
        """Bill the 2xx reply in hand (at its usage; the worst case where none can be read);
        what was refused of its usage."""
        if not self.pending or self.meter is None:
            self.pending = False
            return "" if data is None else _usage(data, self.request, text)[3]
        self.pending = False
        prompt, completion, estimated, refused = (
            (None, None, False, "") if data is None else _usage(data, self.request, text))
        self.meter.bill(self.reply_hold, self.request, prompt, completion, outcome=outcome,
                        estimated=estimated, note=note or refused)
        return refused


_METERING: contextvars.ContextVar[_Metering | None] = contextvars.ContextVar(
    "synapse_pt_metering", default=None)


class _MeteredTransport(httpx2.AsyncBaseTransport):
    """Every HTTP attempt the SDK makes for a chat request passes here: its worst case is held
    before it is sent (waiting while the requests in flight hold the room under the cap;
    :class:`~synapse_pt.models.llm.budget.CapReached` when it does not fit beside what was
    spent),
    an error status or a connection that never opened releases the hold, an attempt sent but not
    answered is billed at its worst case, a 2xx reply is billed by the backend once it is read."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        metering = _METERING.get()
        if metering is None:
            return await self.inner.handle_async_request(request)
        meter = metering.meter
        hold = None
        while meter is not None:  # wait while the requests in flight hold the room
            hold = meter.try_admit(metering.request)
            if hold is not None:
                break
            await asyncio.sleep(_ADMIT_POLL_S)
        metering.sent += 1
        try:
            response = await self.inner.handle_async_request(request)
        except _UNSENT:
            if meter is not None:
                meter.release(hold)
            raise
        except BaseException as err:  # sent, no reply: the server may have billed it
            if meter is not None:
                meter.bill(hold, metering.request, None, None, outcome=UNANSWERED,
                           note=f"no reply: {type(err).__name__}")
            raise
        if not 200 <= response.status_code < 300:
            if meter is not None:
                meter.release(hold)  # an error status is not billed
            return response
        metering.reply_hold, metering.pending = hold, True
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class OpenAICompatibleLLM(LLM):
    """``POST {base_url}/chat/completions`` through the ``openai`` SDK's async client.

    Args:
        model: model name sent to the server (e.g. ``"gpt-4o-mini"``).
        base_url: API root; ``http://localhost:8000/v1`` for vLLM, ``http://localhost:11434/v1`` for
            Ollama.
        api_key_env: environment variable holding the API key. The key is read when a batch is
            sent and handed to the SDK only; it is never stored on this object, in a config or a
            log. Unset or empty: :data:`NO_KEY` is sent (local servers), except to
            api.openai.com, where it is an error.
        max_concurrency: requests in flight at once.
        max_retries: retries of a request, whatever failed (so at most ``max_retries + 1``
            HTTP attempts each): the SDK's of a transport failure, and those of a 200 answer
            that cannot be scored here.
        timeout_s: per-attempt timeout.
        backoff_s: first delay before re-asking after a 200 answer that cannot be scored;
            doubles each time (with 10% jitter). Transport retries use the SDK's own backoff.

    ``ChatResponse.latency_s`` is the request's wall time including its retries; ``meta`` holds the
    attempts (every HTTP request sent, the SDK's retries included), the finish reason and whether
    the token counts were estimated (the server sent no ``usage``).
    """

    backend = "openai_compat"
    meters_attempts = True

    def __init__(self, model: str, base_url: str = "https://api.openai.com/v1",
                 api_key_env: str | None = "OPENAI_API_KEY", max_concurrency: int = 8,
                 max_retries: int = 5, timeout_s: float = 60.0, backoff_s: float = 1.0) -> None:
        if max_concurrency < 1:
            raise ValueError(f"OpenAICompatibleLLM: max_concurrency must be >= 1, "
                             f"got {max_concurrency}")
        if max_retries < 0:
            raise ValueError(f"OpenAICompatibleLLM: max_retries must be >= 0, got {max_retries}")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.api_key_env = api_key_env
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s

    @property
    def cache_identity(self) -> str:
        """``model@base_url``: the same model name served by another endpoint (a vLLM server, a
        fine-tune behind a proxy) is another model for the response cache."""
        return f"{self.model}@{self.base_url}"

    # -- the SDK ------------------------------------------------------------------------------

    @classmethod
    def check_settings(cls, settings: Mapping[str, Any]) -> None:
        """``base_url`` is an http(s) URL with a host, and a server that needs a key
        (:func:`needs_api_key`) finds one in the environment variable ``api_key_env`` names;
        nothing is sent."""
        defaults = inspect.signature(cls.__init__).parameters
        base_url = str(settings.get("base_url", defaults["base_url"].default))
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"llm.backend.base_url={base_url!r} is not an http(s) URL with a "
                              "host (e.g. https://api.openai.com/v1, http://127.0.0.1:8000/v1)")
        env = settings.get("api_key_env", defaults["api_key_env"].default)
        if needs_api_key(base_url) and api_key(env) is None:
            what = "holds only white space" if env and os.environ.get(env) else "is empty"
            raise ConfigError(f"llm.backend.api_key_env: {base_url} needs an API key and the "
                              f"environment variable {env or '(none named)'} {what}; export "
                              f"{env or 'OPENAI_API_KEY'}=... (or set llm.backend.api_key_env)")

    def _api_key(self) -> str:
        key = api_key(self.api_key_env)
        if key:
            return key
        if needs_api_key(self.base_url):
            raise LLMError(f"{self.url} needs an API key: environment variable "
                           f"{self.api_key_env or '<api_key_env unset>'} is empty")
        return NO_KEY

    def _client(self) -> openai.AsyncOpenAI:
        """A client for one batch (an async client's connections belong to one event loop),
        whose every HTTP attempt is metered (:class:`_MeteredTransport`)."""
        transport = _MeteredTransport(httpx2.AsyncHTTPTransport())
        return openai.AsyncOpenAI(api_key=self._api_key(), base_url=self.base_url,
                                  timeout=self.timeout_s, max_retries=self.max_retries,
                                  http_client=openai.DefaultAsyncHttpxClient(
                                      transport=transport, timeout=self.timeout_s))

    def payload(self, request: ChatRequest) -> dict[str, Any]:
        """The request body (``extra`` entries override the defaults); a ``None`` temperature,
        seed or ``budget_param`` is not sent."""
        body: dict[str, Any] = {"model": self.model, "messages": request.message_dicts()}
        if request.budget_param is not None:
            body[request.budget_param] = request.max_tokens
        for key in ("temperature", "seed"):
            if getattr(request, key) is not None:
                body[key] = getattr(request, key)
        if request.stop:
            body["stop"] = list(request.stop)
        body.update(dict(request.extra))
        return body

    async def _attempt(self, client: openai.AsyncOpenAI, body: dict[str, Any],
                       metering: _Metering, retries: int) -> dict[str, Any]:
        """One SDK call with at most ``retries`` SDK retries; the parsed body of its 200
        answer, billed (accepted, or rejected: :class:`_Malformed`), or :class:`LLMError`."""
        known = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature",
                 "seed", "stop"}
        extra = {k: v for k, v in body.items() if k not in known}
        try:
            raw = await client.with_options(max_retries=retries).chat.completions \
                .with_raw_response.create(**{k: v for k, v in body.items() if k in known},
                                          extra_body=extra or None)
        except openai.APITimeoutError as err:
            raise LLMError(f"{self.url} (model {self.model}): timeout after {self.timeout_s}s "
                           f"({metering.sent} attempts)") from err
        except openai.APIConnectionError as err:
            raise LLMError(f"{self.url} (model {self.model}): connection error after "
                           f"{metering.sent} attempts: {err}") from err
        except openai.APIStatusError as err:
            raise LLMError(f"{self.url} (model {self.model}): after {metering.sent} attempts; "
                           f"HTTP {err.status_code}: {_excerpt(_status_body(err))}") from err
        text = raw.http_response.text
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            metering.bill_reply(None, None, REJECTED, "a body that is not JSON")
            raise _Malformed(f"HTTP 200 with a body that is not JSON: {_excerpt(text)}") from err
        content, why = _content(data, metering.request.accept_empty)
        refused = metering.bill_reply(data, content, ACCEPTED if content is not None
                                      else REJECTED, why)
        if refused:  # no retry: a server that miscounts its bill is not asked again
            raise LLMError(f"{self.url} (model {self.model}): the server reported {refused}; "
                           "billed at the request's worst case and refused")
        if content is None:
            raise _Malformed(f"{why}: {_excerpt(text)}")
        return data

    def _delay(self, attempt: int) -> float:
        delay = self.backoff_s * (2 ** attempt)
        return delay + random.uniform(0.0, 0.1 * delay)

    async def _one(self, client: openai.AsyncOpenAI, request: ChatRequest) -> ChatResponse:
        """Ask ``request`` within its ``max_retries + 1`` HTTP attempts (the SDK's retries and
        the re-asks of a 200 that cannot be scored draw on the same attempts)."""
        body = self.payload(request)
        start = time.perf_counter()
        metering = _Metering(self.meter, request)
        token = _METERING.set(metering)
        try:
            rejected = 0
            while True:
                try:
                    data = await self._attempt(client, body, metering,
                                               self.max_retries - metering.sent)
                except _Malformed as err:
                    left = self.max_retries + 1 - metering.sent
                    if left <= 0:
                        raise LLMError(f"{self.url} (model {self.model}): request failed after "
                                       f"{metering.sent} attempts; last failure: {err}") from err
                    delay = self._delay(rejected)
                    rejected += 1
                    log.warning("%s attempt %d failed (%s); retrying in %.2fs", self.url,
                                metering.sent, err, delay)
                    await asyncio.sleep(delay)
                    continue
                return self._response(request, data, time.perf_counter() - start,
                                      metering.sent)
        finally:
            if metering.pending:  # a 2xx whose body was never read: billed at its worst case
                metering.bill_reply(None, None, UNANSWERED, "reply not read")
            _METERING.reset(token)

    def _response(self, request: ChatRequest, data: dict[str, Any], latency_s: float,
                  attempts: int) -> ChatResponse:
        choice = data["choices"][0]
        text = choice["message"]["content"]
        prompt_tokens, completion_tokens, estimated, _ = _usage(data, request, text)
        return ChatResponse(
            text=text, prompt_tokens=int(prompt_tokens or 0),
            completion_tokens=int(completion_tokens or 0),
            latency_s=latency_s, model=self.model,
            meta={"backend": self.backend, "server_model": data.get("model"),
                  "finish_reason": choice.get("finish_reason"), "attempts": attempts,
                  "usage_estimated": estimated},
        )

    async def _batch(self, requests: Sequence[ChatRequest], on_response: OnResponse
                     ) -> list[ChatResponse | None]:
        results: list[ChatResponse | None] = [None] * len(requests)
        gate = asyncio.Semaphore(self.max_concurrency)
        failed = asyncio.Event()  # set by the first permanent failure: later requests skip
        report = BatchReporter(on_response)  # stopped once on_response raises: later ones skip
        async with self._client() as client:

            async def run(i: int) -> None:
                async with gate:
                    if failed.is_set() or report.stopped:
                        raise _Skipped
                    try:
                        results[i] = await self._one(client, requests[i])
                    except BaseException:
                        failed.set()
                        raise
                    report(i, results[i])

            outcomes = await asyncio.gather(*(run(i) for i in range(len(requests))),
                                            return_exceptions=True)
        errors = [e for e in outcomes if isinstance(e, BaseException)
                  and not isinstance(e, _Skipped)]
        caps = [e for e in errors if isinstance(e, CapReached)]
        if report.stopped or caps:  # the caller or the cap stopped the batch: that reason first
            for err in errors:
                if not isinstance(err, CapReached):
                    log.warning("%s: a request in flight when the batch was stopped failed: %s",
                                self.url, err)
            report.raise_if_stopped()
            raise caps[0]
        if errors:
            answered = sum(r is not None for r in results)
            raise LLMError(f"{errors[0]} ({answered}/{len(requests)} requests of the batch "
                           "answered; the rest were not sent or failed)") from errors[0]
        return results

    # -- LLM interface ------------------------------------------------------------------------

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        return self.generate_incremental(requests, lambda i, r: None)

    def generate_incremental(self, requests: Sequence[ChatRequest],
                             on_response: OnResponse) -> list[ChatResponse]:
        """Answer the batch with ``max_concurrency`` requests in flight; ``on_response`` runs as
        answers arrive. After a request fails for good, or ``on_response`` raises, requests not
        yet started are skipped, those in flight finish (and are reported), then the first
        failure (``on_response``'s exception first) is raised."""
        if not requests:
            return []
        self._api_key()  # a missing key fails before anything is sent
        coro = self._batch(requests, on_response)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread (scripts, CLI): the usual case
            results = asyncio.run(coro)
        else:  # called from a running loop (a notebook): answer on a worker thread
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                results = pool.submit(asyncio.run, coro).result()
        return [r for r in results if r is not None]

    def count_tokens(self, text: str) -> int:
        """An estimate (no tokenizer for remote models is bundled)."""
        return estimate_tokens(text)
