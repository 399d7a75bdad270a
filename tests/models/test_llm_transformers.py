"""TransformersLLM with the bundled SmolLM2-135M-Instruct GGUF on the CPU."""

from __future__ import annotations

import pytest

from synapse_pt.models.llm.base import ChatRequest, LLMError
from synapse_pt.models.llm.transformers_local import TransformersLLM, resolve_llm

PROMPTS = [
    ChatRequest((("user", "What is the capital of France?"),), max_tokens=12),
    ChatRequest((("system", "Answer in one short sentence."),
                 ("user", "Name the colour of the sky on a clear day, please.")), max_tokens=12),
]


def test_resolve_bundled_and_errors(tmp_path):
    spec = resolve_llm("bundled:smollm2")
    assert spec.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf" and len(spec.fingerprint) == 64
    with pytest.raises(ValueError, match="unknown bundled LLM"):
        resolve_llm("bundled:gpt5")
    with pytest.raises(FileNotFoundError, match="holds no config.json"):
        resolve_llm(str(tmp_path))
    (tmp_path / "w.bin").write_bytes(b"x")
    with pytest.raises(ValueError, match="not a .gguf file"):
        resolve_llm(str(tmp_path / "w.bin"))
    with pytest.raises(ValueError, match=r"llm\.backend\.dtype=float16 is allowed on CUDA only"):
        TransformersLLM(dtype="float16")


def test_identity_names_model_and_weights():
    llm = TransformersLLM()
    assert llm.model == "bundled:smollm2"
    assert llm.cache_identity.startswith("SmolLM2-135M-Instruct-Q4_1@")
    assert llm.cache_identity.endswith("|float32")


@pytest.fixture(scope="module")
def smollm2() -> TransformersLLM:
    return TransformersLLM(batch_size=8)


@pytest.mark.slow
def test_generates_deterministic_batched_equals_single(smollm2):
    seen: list[int] = []
    batched = smollm2.generate_incremental(PROMPTS, lambda i, r: seen.append(i))
    assert sorted(seen) == [0, 1]
    for request, r in zip(PROMPTS, batched, strict=True):
        assert r.text.strip() and r.model == "bundled:smollm2" and not r.cached
        assert 0 < r.completion_tokens <= request.max_tokens
        assert r.prompt_tokens == smollm2.count_tokens(smollm2.render(request)) > 10
        assert r.latency_s > 0 and r.meta["batch_size"] == 2
    assert "Paris" in batched[0].text
    # the two prompts differ in length, so the batch really was left-padded
    assert batched[0].prompt_tokens != batched[1].prompt_tokens

    again = smollm2.generate(PROMPTS)
    single = [smollm2.generate([p])[0] for p in PROMPTS]
    assert [r.text for r in again] == [r.text for r in batched]
    assert [r.text for r in single] == [r.text for r in batched]
    assert [r.completion_tokens for r in single] == [r.completion_tokens for r in batched]
    assert smollm2.loaded.load_seconds > 0


@pytest.mark.slow
def test_stop_string_and_input_limit(smollm2):
    (r,) = smollm2.generate([ChatRequest((("user", "Count from 1 to 10 separated by commas."),),
                                         max_tokens=16, stop=("4",))])
    assert "4" not in r.text and "3" in r.text and r.meta["finish_reason"] == "stop"

    limited = TransformersLLM(max_input_tokens=40)
    assert limited.loaded is smollm2.loaded  # the per-process model cache: no second load
    with pytest.raises(LLMError, match=r"request 1 has a \d+-token prompt, over the 40-token"):
        limited.generate([ChatRequest((("user", "hi"),)), ChatRequest((("user", "word " * 40),))])


@pytest.mark.slow
def test_a_request_with_a_json_mode_extra_is_answered(smollm2):
    """``extra`` may hold a dict (Membox's box extraction asks ``response_format=json_object``):
    requests are grouped by it as JSON, so it need not hash; the local model ignores it."""
    json_mode = ChatRequest((("user", "Say hi."),), max_tokens=4,
                            extra=(("response_format", {"type": "json_object"}),))
    plain, asked = smollm2.generate([PROMPTS[0], json_mode])
    assert plain.text.strip() and asked.text.strip()
    assert asked.meta["batch_size"] == 1  # not batched with a request of other parameters
