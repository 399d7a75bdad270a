"""The LLM response cache (a codec of :class:`ChatResponse` over the shared
:class:`~synapse_pt.cache.store.KeyValueStore`) and the :class:`CachedLLM` wrapper that uses it.

Key = sha256 of the canonical JSON of (backend, model, messages, parameters: the budget, sampling
settings, stops and extras of the request); ``model`` is the
backend's :attr:`~synapse_pt.models.llm.base.LLM.cache_identity` (its model name plus, for local
weights, a content fingerprint). Each answer is stored
the moment it arrives, so a crashed or interrupted run resumes without asking again; several
processes may read and write one file at once (WAL, busy timeout, one statement per write).
It lives here, not in synapse_pt/cache/, because its codec builds :class:`ChatResponse`: the
cache room sits below models/ and knows none of its types.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from synapse_pt.cache.store import KeyValueStore, Table

from .base import LLM, ChatRequest, ChatResponse, LLMError, OnResponse

RESPONSES = Table("responses", """CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY, request TEXT NOT NULL, response TEXT NOT NULL, created REAL NOT NULL)""",
                  written=("request", "response", "created"), read=("response",),
                  keep_first=True)
#: what a rebuilt response cache loses (named when the file is corrupt)
RESPONSES_LOST = ("it holds money, not only time: every answer in it was paid for, and each is "
                  "asked and paid for again; keep the corrupt file until the run is done")


def canonical_request(backend: str, model: str, request: ChatRequest) -> str:
    """The canonical JSON that identifies a request (sorted keys, no whitespace)."""
    doc = {
        "backend": backend,
        "model": model,
        "messages": [[role, content] for role, content in request.messages],
        "parameters": {"max_tokens": request.max_tokens, "temperature": request.temperature,
                       "seed": request.seed, "stop": list(request.stop),
                       "extra": {k: v for k, v in request.extra}},
    }
    # entered only where they differ from the defaults, so the keys of earlier requests hold
    if request.budget_param != "max_tokens":
        doc["parameters"]["budget_param"] = request.budget_param
    if request.accept_empty:
        doc["parameters"]["accept_empty"] = True
    try:
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except TypeError as err:
        raise TypeError(f"ChatRequest.extra must hold JSON values to be cached: {err}") from err


class ResponseCache(KeyValueStore[ChatResponse]):
    """LLM responses on disk, shared by threads and processes: a row is ``(key, request,
    response, created)``, the canonical request, the response as JSON (without ``cached``) and
    the time it was stored; an existing key keeps its first answer. A response is stored with
    its request (:meth:`put`), so :meth:`put_many` is not offered.

    Args:
        path: the SQLite file (its folder is created).
    """

    table = RESPONSES
    lost = RESPONSES_LOST

    def decode(self, key: str, row: tuple[Any, ...]) -> ChatResponse:
        """The stored response (``cached=True``); an unreadable one is an error naming the file
        and key."""
        try:
            return ChatResponse(cached=True, **json.loads(row[0]))
        except (json.JSONDecodeError, TypeError) as err:
            raise ValueError(f"{self.path} key {key}: unreadable cached response ({err})") from err

    def get(self, key: str) -> ChatResponse | None:
        return self.get_many([key]).get(key)

    def put(self, key: str, request_json: str, response: ChatResponse) -> None:
        """Store one response (committed at once; an existing key keeps its first answer)."""
        doc = dataclasses.asdict(response)
        doc.pop("cached")
        row = (key, request_json, json.dumps(doc, sort_keys=True, ensure_ascii=False, default=str),
               time.time())
        self.put_rows([row])


class CachedLLM(LLM):
    """Wraps an :class:`LLM`: answers found in the cache are served (``cached=True``, original
    token counts and latency); only the misses go to the inner backend, as one batch, and each
    answer is stored as soon as the backend reports it.

    Args:
        llm: the inner backend (its ``backend`` and ``model`` enter the key).
        cache: a :class:`ResponseCache` or the path of its SQLite file.

    Attributes:
        hits: requests served from the cache (in this process).
        misses: distinct requests sent to the inner backend.
        served: every response this wrapper returned, in order, ``cached=True`` for those that
            cost no call (a cache hit, or a duplicate of another request of the same batch): what
            :func:`~synapse_pt.models.llm.accounting.summarize_usage` turns into this run's spend.
    """

    def __init__(self, llm: LLM, cache: ResponseCache | str | Path) -> None:
        self.llm = llm
        self.cache = cache if isinstance(cache, ResponseCache) else ResponseCache(cache)
        self.backend = llm.backend
        self.model = llm.model
        self.hits = 0
        self.misses = 0
        self.served: list[ChatResponse] = []

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        return self.generate_incremental(requests, lambda i, r: None)

    def generate_incremental(self, requests: Sequence[ChatRequest],
                             on_response: OnResponse) -> list[ChatResponse]:
        identity = self.llm.cache_identity
        docs = [canonical_request(self.llm.backend, identity, r) for r in requests]
        keys = [hashlib.sha256(d.encode()).hexdigest() for d in docs]
        found = self.cache.get_many(keys)
        results: list[ChatResponse | None] = [None] * len(requests)
        waiting: dict[str, list[int]] = {}  # key -> indices answered by its one inner request
        for i, key in enumerate(keys):
            if key in found:
                results[i] = dataclasses.replace(found[key], meta=dict(found[key].meta))
                self.hits += 1
                on_response(i, results[i])
            else:
                waiting.setdefault(key, []).append(i)
        miss_keys = list(waiting)
        self.misses += len(miss_keys)

        def store(j: int, response: ChatResponse) -> None:
            key = miss_keys[j]
            first = waiting[key][0]
            self.cache.put(key, docs[first], response)
            for n, i in enumerate(waiting[key]):
                results[i] = response if n == 0 else dataclasses.replace(
                    response, meta=dict(response.meta), cached=True)
                on_response(i, results[i])

        if miss_keys:
            self.llm.generate_incremental([requests[waiting[k][0]] for k in miss_keys], store)
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            raise LLMError(f"CachedLLM: inner backend {self.llm.backend}/{self.llm.model} "
                           f"returned without answering requests {missing[:10]}")
        answered = [r for r in results if r is not None]
        self.served.extend(answered)
        return answered

    @property
    def cache_identity(self) -> str:
        return self.llm.cache_identity

    def count_tokens(self, text: str) -> int:
        return self.llm.count_tokens(text)
