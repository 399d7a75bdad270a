"""Chat completions from any OpenAI-compatible server (OpenAI, vLLM, Ollama, ...) through the
official ``openai`` SDK.

One ``generate`` call opens an :class:`openai.AsyncOpenAI` client and answers the batch with at most
``max_concurrency`` requests in flight (an :class:`asyncio.Semaphore`). Transport failures are the
SDK's to retry: 408/409/429/5xx, timeouts and connection errors, ``max_retries`` times with its
exponential backoff (0.5 s doubling up to 8 s, with jitter), honouring a server's ``Retry-After``.
What the SDK accepts but a run must not score is retried here, up to ``max_retries`` more
attempts: a 200 whose body is not JSON, has no ``choices``, or carries no or an empty completion.
A request still failing after its retries raises :class:`LLMError` naming the status and an
excerpt of the body.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import logging
import os
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import openai

from synapse_pt.errors import ConfigError

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
        max_retries: the SDK's retries of a transport failure, and the retries of a malformed
            answer here (so up to ``max_retries + 1`` attempts of each kind).
        timeout_s: per-attempt timeout.
        backoff_s: first delay before re-asking after a malformed answer; doubles each time
            (with 10% jitter). Transport retries use the SDK's own backoff.

    ``ChatResponse.latency_s`` is the request's wall time including its retries; ``meta`` holds the
    attempts (every HTTP request sent, the SDK's retries included), the finish reason and whether
    the token counts were estimated (the server sent no ``usage``).
    """

    backend = "openai_compat"

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
        """A client for one batch (an async client's connections belong to one event loop)."""
        return openai.AsyncOpenAI(api_key=self._api_key(), base_url=self.base_url,
                                  timeout=self.timeout_s, max_retries=self.max_retries)

    def payload(self, request: ChatRequest) -> dict[str, Any]:
        """The request body (``extra`` entries override the defaults)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": request.message_dicts(),
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "seed": request.seed,
        }
        if request.stop:
            body["stop"] = list(request.stop)
        body.update(dict(request.extra))
        return body

    async def _attempt(self, client: openai.AsyncOpenAI,
                       body: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """One SDK call (with the SDK's retries); returns the parsed body and the HTTP requests
        it took, or raises :class:`_Malformed` / :class:`LLMError`."""
        known = {"model", "messages", "max_tokens", "temperature", "seed", "stop"}
        extra = {k: v for k, v in body.items() if k not in known}
        try:
            raw = await client.chat.completions.with_raw_response.create(
                **{k: v for k, v in body.items() if k in known}, extra_body=extra or None)
        except openai.APITimeoutError as err:
            raise LLMError(f"{self.url} (model {self.model}): timeout after {self.timeout_s}s "
                           f"({self.max_retries + 1} attempts)") from err
        except openai.APIConnectionError as err:
            raise LLMError(f"{self.url} (model {self.model}): connection error after "
                           f"{self.max_retries + 1} attempts: {err}") from err
        except openai.APIStatusError as err:
            retried = err.status_code == 429 or err.status_code >= 500 or err.status_code in (
                408, 409)
            tries = f"after {self.max_retries + 1} attempts; " if retried else ""
            raise LLMError(f"{self.url} (model {self.model}): {tries}HTTP {err.status_code}: "
                           f"{_excerpt(_status_body(err))}") from err
        attempts = raw.retries_taken + 1
        text = raw.http_response.text
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise _Malformed(f"HTTP 200 with a body that is not JSON: {_excerpt(text)}") from err
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices:
            raise _Malformed(f"HTTP 200 without choices: {_excerpt(text)}")
        message = choices[0].get("message") if isinstance(choices[0], dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise _Malformed(f"HTTP 200 without choices[0].message.content: {_excerpt(text)}")
        if not content.strip():  # an empty completion is a failure, never a scored answer
            raise _Malformed(f"HTTP 200 with an empty completion: {_excerpt(text)}")
        return data, attempts

    def _delay(self, attempt: int) -> float:
        delay = self.backoff_s * (2 ** attempt)
        return delay + random.uniform(0.0, 0.1 * delay)

    async def _one(self, client: openai.AsyncOpenAI, request: ChatRequest) -> ChatResponse:
        body = self.payload(request)
        start = time.perf_counter()
        attempts = 0
        for retry in range(self.max_retries + 1):
            try:
                data, sent = await self._attempt(client, body)
            except _Malformed as err:
                attempts += 1
                if retry == self.max_retries:
                    raise LLMError(f"{self.url} (model {self.model}): request failed after "
                                   f"{attempts} attempts; last failure: {err}") from err
                delay = self._delay(retry)
                log.warning("%s attempt %d failed (%s); retrying in %.2fs", self.url, attempts,
                            err, delay)
                await asyncio.sleep(delay)
                continue
            return self._response(request, data, time.perf_counter() - start, attempts + sent)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _response(self, request: ChatRequest, data: dict[str, Any], latency_s: float,
                  attempts: int) -> ChatResponse:
        choice = data["choices"][0]
        text = choice["message"]["content"]
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        prompt_tokens = usage.get("prompt_tokens")
        completion_tokens = usage.get("completion_tokens")
        estimated = not (isinstance(prompt_tokens, int) and isinstance(completion_tokens, int))
        if estimated:
            prompt_tokens = sum(estimate_tokens(c) + MESSAGE_OVERHEAD_TOKENS
                                for _, c in request.messages)
            completion_tokens = estimate_tokens(text)
        return ChatResponse(
            text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
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
        if report.stopped:  # the caller stopped the batch: its reason first, failures logged
            for err in errors:
                log.warning("%s: a request in flight when the batch was stopped failed: %s",
                            self.url, err)
            report.raise_if_stopped()
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
