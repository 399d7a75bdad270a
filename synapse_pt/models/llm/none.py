"""The backend of runs without an LLM: every request is an error, never a blank answer."""

from __future__ import annotations

from collections.abc import Sequence

from .base import LLM, ChatRequest, ChatResponse, LLMError, estimate_tokens


class NoLLM(LLM):
    """``llm=none``: retrieval-only runs. Asking it for an answer raises :class:`LLMError`.

    ``count_tokens`` still works (an estimate), so context-size accounting runs without a model.
    """

    backend = "none"
    model = "none"

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        raise LLMError(
            f"this run is configured without an LLM (llm=none) but {len(requests)} chat request(s) "
            "were sent; configure an LLM backend in the llm config group, or use an LLM-free "
            "variant of the step that asked"
        )

    def count_tokens(self, text: str) -> int:
        return estimate_tokens(text)
