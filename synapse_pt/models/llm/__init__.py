"""LLM backends behind one interface (:class:`LLM`): HTTP (:mod:`.openai_compat`), local
transformers (:mod:`.transformers_local`), none (:mod:`.none`); plus the persistent response cache
(:mod:`.cache`). Backends are chosen by Hydra ``_target_``, never by model name, and imported from
their modules, so importing the interface does not pull in transformers or httpx.
"""

from .base import LLM, ChatRequest, ChatResponse, LLMError, estimate_tokens

__all__ = ["LLM", "ChatRequest", "ChatResponse", "LLMError", "estimate_tokens"]
