"""Chat completions over HTTP from any OpenAI-compatible server (OpenAI, vLLM, Ollama, ...).

Requests of a batch run on a bounded thread pool; each is retried with exponential backoff on 429,
5xx, timeouts, connection errors and malformed bodies. A request still failing after its retries
raises :class:`LLMError` with the status and an excerpt of the body.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import httpx

from .base import LLM, ChatRequest, ChatResponse, LLMError, OnResponse, estimate_tokens

log = logging.getLogger(__name__)

_EXCERPT = 300  # characters of a failing body quoted in errors
_MESSAGE_OVERHEAD_TOKENS = 4  # role and separators per chat message (OpenAI's accounting)


class _Retryable(Exception):
    """One attempt failed in a way worth retrying; the message says how."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class _Skipped(Exception):
    """A request not started because another request of its batch failed for good."""


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."


def _retry_after(response: httpx.Response) -> float | None:
    raw = response.headers.get("retry-after")
    try:
        return float(raw) if raw is not None else None
    except ValueError:  # an HTTP date: fall back to our own backoff
        return None


class OpenAICompatibleLLM(LLM):
    """POST ``{base_url}/chat/completions`` with bounded concurrency and retries.

    Args:
        model: model name sent to the server (e.g. ``"gpt-4o-mini"``).
        base_url: API root; ``http://localhost:8000/v1`` for vLLM, ``http://localhost:11434/v1`` for
            Ollama.
        api_key_env: environment variable holding the API key; unset -> no ``Authorization``
            header (local servers), except for api.openai.com where it is an error.
        max_concurrency: requests in flight at once.
        max_retries: retries after the first attempt (so up to ``max_retries + 1`` attempts).
        timeout_s: per-attempt timeout.
        backoff_s: first retry delay; doubles each retry (with 10% jitter), capped at
            ``max_backoff_s``; a server's ``Retry-After`` is honoured up to that cap.
        max_backoff_s: the cap on one delay.

    ``ChatResponse.latency_s`` is the request's wall time including its retries; ``meta`` holds the
    attempts, the finish reason and whether the token counts were estimated (no ``usage`` sent).
    """

    backend = "openai_compat"

    def __init__(self, model: str, base_url: str = "https://api.openai.com/v1",
                 api_key_env: str | None = "OPENAI_API_KEY", max_concurrency: int = 8,
                 max_retries: int = 5, timeout_s: float = 60.0, backoff_s: float = 1.0,
                 max_backoff_s: float = 60.0) -> None:
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
        self.max_backoff_s = max_backoff_s
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()

    # -- HTTP ---------------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        elif "api.openai.com" in self.base_url:
            raise LLMError(f"{self.url} needs an API key: environment variable "
                           f"{self.api_key_env or '<api_key_env unset>'} is empty")
        return headers

    def client(self) -> httpx.Client:
        """The shared HTTP client (connection pool sized to ``max_concurrency``)."""
        with self._client_lock:
            if self._client is None:
                limits = httpx.Limits(max_connections=self.max_concurrency,
                                      max_keepalive_connections=self.max_concurrency)
                self._client = httpx.Client(timeout=self.timeout_s, limits=limits)
            return self._client

    def payload(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body for one request (``extra`` entries override the defaults)."""
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

    def _attempt(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        """One POST; returns the parsed body or raises :class:`_Retryable` / :class:`LLMError`."""
        try:
            response = self.client().post(self.url, json=body, headers=headers)
        except httpx.TimeoutException as err:
            raise _Retryable(f"timeout after {self.timeout_s}s ({type(err).__name__})") from err
        except httpx.TransportError as err:
            raise _Retryable(f"connection error: {type(err).__name__}: {err}") from err
        status = response.status_code
        if status == 429 or status >= 500:
            raise _Retryable(f"HTTP {status}: {_excerpt(response.text)}", _retry_after(response))
        if status != 200:  # 4xx other than 429: the request itself is wrong, retrying won't help
            raise LLMError(f"{self.url} (model {self.model}) answered HTTP {status}: "
                           f"{_excerpt(response.text)}")
        try:
            data = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise _Retryable(f"HTTP 200 with a body that is not JSON: "
                             f"{_excerpt(response.text)}") from err
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices:
            raise _Retryable(f"HTTP 200 without choices: {_excerpt(response.text)}")
        message = choices[0].get("message") if isinstance(choices[0], dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise _Retryable(f"HTTP 200 without choices[0].message.content: "
                             f"{_excerpt(response.text)}")
        if not content.strip():  # an empty completion is a failure, never a scored answer
            raise _Retryable(f"HTTP 200 with an empty completion: {_excerpt(response.text)}")
        return data

    @property
    def cache_identity(self) -> str:
        """``model@base_url``: the same model name served by another endpoint (a vLLM server, a
        fine-tune behind a proxy) is another model for the response cache."""
        return f"{self.model}@{self.base_url}"

    def _delay(self, attempt: int, retry_after_s: float | None) -> float:
        delay = self.backoff_s * (2 ** attempt)
        delay += random.uniform(0.0, 0.1 * delay)
        if retry_after_s is not None:
            delay = max(delay, retry_after_s)
        return min(delay, self.max_backoff_s)

    def _one(self, request: ChatRequest, headers: dict[str, str]) -> ChatResponse:
        body = self.payload(request)
        start = time.perf_counter()
        failures: list[str] = []
        for attempt in range(self.max_retries + 1):
            try:
                data = self._attempt(body, headers)
            except _Retryable as err:
                failures.append(str(err))
                if attempt < self.max_retries:
                    delay = self._delay(attempt, err.retry_after_s)
                    log.warning("%s attempt %d/%d failed (%s); retrying in %.2fs", self.url,
                                attempt + 1, self.max_retries + 1, err, delay)
                    time.sleep(delay)
                continue
            return self._response(request, data, time.perf_counter() - start, attempt + 1)
        raise LLMError(f"{self.url} (model {self.model}): request failed after "
                       f"{self.max_retries + 1} attempts; last failure: {failures[-1]}")

    def _response(self, request: ChatRequest, data: dict[str, Any], latency_s: float,
                  attempts: int) -> ChatResponse:
        choice = data["choices"][0]
        text = choice["message"]["content"]
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        prompt_tokens = usage.get("prompt_tokens")
        completion_tokens = usage.get("completion_tokens")
        estimated = not (isinstance(prompt_tokens, int) and isinstance(completion_tokens, int))
        if estimated:
            prompt_tokens = sum(estimate_tokens(c) + _MESSAGE_OVERHEAD_TOKENS
                                for _, c in request.messages)
            completion_tokens = estimate_tokens(text)
        return ChatResponse(
            text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            latency_s=latency_s, model=self.model,
            meta={"backend": self.backend, "server_model": data.get("model"),
                  "finish_reason": choice.get("finish_reason"), "attempts": attempts,
                  "usage_estimated": estimated},
        )

    # -- LLM interface ------------------------------------------------------------------------

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        return self.generate_incremental(requests, lambda i, r: None)

    def generate_incremental(self, requests: Sequence[ChatRequest],
                             on_response: OnResponse) -> list[ChatResponse]:
        """Answer the batch on ``max_concurrency`` threads; ``on_response`` runs in the calling
        thread as answers arrive. After a request fails for good, requests not yet started are
        skipped, those in flight finish (and are reported), then the first failure is raised."""
        if not requests:
            return []
        headers = self._headers()
        failed = threading.Event()  # set by the first permanent failure: later requests skip

        def run(request: ChatRequest) -> ChatResponse:
            if failed.is_set():
                raise _Skipped
            try:
                return self._one(request, headers)
            except BaseException:
                failed.set()
                raise

        results: list[ChatResponse | None] = [None] * len(requests)
        error: BaseException | None = None
        workers = min(self.max_concurrency, len(requests))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm-http") as pool:
            futures = {pool.submit(run, req): i for i, req in enumerate(requests)}
            for future in as_completed(futures):
                exc = future.exception()
                if isinstance(exc, _Skipped):
                    continue
                if exc is not None:
                    error = error or exc
                    continue
                index = futures[future]
                results[index] = future.result()
                on_response(index, results[index])
        if error is not None:
            answered = sum(r is not None for r in results)
            raise LLMError(f"{error} ({answered}/{len(requests)} requests of the batch "
                           "answered; the rest were not sent or failed)") from error
        return [r for r in results if r is not None]

    def count_tokens(self, text: str) -> int:
        """An estimate (no tokenizer for remote models is bundled)."""
        return estimate_tokens(text)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None
