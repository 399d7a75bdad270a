"""NoLLM: asking a run configured without an LLM for text is an error, never an empty answer."""

from __future__ import annotations

import pytest

from synapse_pt.models.llm.base import ChatRequest, LLMError
from synapse_pt.models.llm.none import NoLLM
from synapse_pt.models.structured import generate_structured


def test_generate_raises():
    with pytest.raises(LLMError, match=r"configured without an LLM \(llm=none\).*1 chat request"):
        NoLLM().generate([ChatRequest((("user", "hi"),))])


def test_structured_generation_raises_too():
    with pytest.raises(LLMError, match="without an LLM"):
        generate_structured(NoLLM(), [ChatRequest((("user", "hi"),))])


def test_count_tokens_estimates():
    assert NoLLM().count_tokens("") == 0
    assert NoLLM().count_tokens("abcdefgh") == 2
