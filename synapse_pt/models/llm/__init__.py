"""LLM backends behind one interface (:class:`LLM`): HTTP (OpenAI-compatible), local transformers,
none; plus the persistent response cache. Backends are chosen by Hydra ``_target_``, never by
model name.

The interface is imported eagerly; backends load on first access, so importing
``synapse_pt.models.llm.base`` does not pull in torch, transformers or httpx.
"""

from __future__ import annotations

import importlib
from typing import Any

from .base import LLM, ChatRequest, ChatResponse, LLMError, estimate_tokens

_LAZY = {
    "CachedLLM": ".cache",
    "ResponseCache": ".cache",
    "NoLLM": ".none",
    "OpenAICompatibleLLM": ".openai_compat",
    "TransformersLLM": ".transformers_local",
}

__all__ = ["LLM", "ChatRequest", "ChatResponse", "LLMError", "estimate_tokens", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
