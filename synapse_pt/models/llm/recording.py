"""An :class:`LLM` view that keeps every response it passes on: what one step of a run (one judge of
several) was served, so its spend can be counted apart from the run's other calls."""

from __future__ import annotations

from collections.abc import Sequence

from .base import LLM, ChatRequest, ChatResponse, OnResponse


class RecordingLLM(LLM):
    """Wraps an :class:`LLM`; ``served`` holds every response returned through this view, in
    order (``cached`` as the inner LLM set it: a response cache's hits cost nothing).

    Args:
        llm: the model the requests go to (usually the run's :class:`~synapse_pt.models.llm.
            cache.CachedLLM`, so cache hits stay hits).
    """

    def __init__(self, llm: LLM) -> None:
        self.llm = llm
        self.backend = llm.backend
        self.model = llm.model
        self.served: list[ChatResponse] = []

    @property
    def cache_identity(self) -> str:
        return self.llm.cache_identity

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        responses = self.llm.generate(requests)
        self.served.extend(responses)
        return responses

    def generate_incremental(self, requests: Sequence[ChatRequest],
                             on_response: OnResponse) -> list[ChatResponse]:
        responses = self.llm.generate_incremental(requests, on_response)
        self.served.extend(responses)
        return responses

    def count_tokens(self, text: str) -> int:
        return self.llm.count_tokens(text)
