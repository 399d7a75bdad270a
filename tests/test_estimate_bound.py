"""The estimate's answer stage is an upper bound on what a run sends (issue 31, defect 3): every
answer request the run sends to the loopback server has no more prompt tokens (counted by the
estimate's own counter) than the estimate's bound for that question."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from loopback import completion_body, serve
from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)

from synapse_pt.data.resolve import build_dataset
from synapse_pt.estimate import _eval_settings, answer_prompt_bounds, estimate, format_estimate
from synapse_pt.eval.qa.tokens import HFTokenCounter
from synapse_pt.models.llm.base import MESSAGE_OVERHEAD_TOKENS
from synapse_pt.run import run

COUNTER = HFTokenCounter()


def sent_tokens(body: dict[str, Any]) -> int:
    """A request's prompt tokens as the estimate counts them (contents + overhead per message)."""
    contents = [m["content"] for m in body["messages"]]
    return sum(COUNTER.count_many(contents)) + MESSAGE_OVERHEAD_TOKENS * len(contents)


def answer_bodies(tmp_path: Path, monkeypatch, overrides: tuple[str, ...]) -> list[dict]:
    def behaviour(body: dict[str, Any], n: int) -> tuple[int, str, float]:
        return 200, completion_body("a pottery class",
                                    {"prompt_tokens": 1, "completion_tokens": 1}), 0.0

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("TQDM_DISABLE", "1")
    with serve(behaviour) as server:
        run(make_cfg(*overrides, f"llm.backend.base_url={server.url}",
                     "llm.backend.max_retries=0", f"paths.cache_dir={tmp_path / 'cache'}",
                     output_dir=str(tmp_path / "run")))
        return list(server.bodies)


COMMON = ("llm=openai", "eval=qa", "dataset=sample", "embedder=hashing", "device=cpu",
          "logger=none")


@pytest.mark.parametrize("memory", [
    ("memory=bm25", "memory.k=5"),
    ("memory=vector_rag", "memory.k=3", "eval.category_date_instruction=true",
     "eval.category5_options=true"),
    ("memory=synapse", "memory.params.k=8", "memory.params.tau_gate=0.0"),
    ("memory=full_context",),
], ids=["bm25-k5", "vector-k3-protocol-exceptions", "synapse-k8", "full_context"])
def test_every_answer_request_is_within_its_bound(tmp_path: Path, monkeypatch,
                                                  memory: tuple[str, ...]) -> None:
    overrides = (*COMMON, *memory)
    bodies = answer_bodies(tmp_path, monkeypatch, overrides)
    cfg = make_cfg(*overrides)
    dataset = build_dataset(cfg.dataset)
    bounds, basis = answer_prompt_bounds(cfg, dataset, COUNTER, _eval_settings(cfg))
    assert basis.startswith("upper bound")
    by_question = {q.question: q.key for q in dataset.questions()}
    answers = [b for b in bodies if b["messages"][0]["content"].startswith("You answer questions")]
    assert answers
    tight = 0
    for body in answers:
        user = body["messages"][-1]["content"]
        key = next(k for text, k in by_question.items() if f"Question: {text}" in user)
        assert sent_tokens(body) <= bounds[key], (key, sent_tokens(body), bounds[key])
        tight += sent_tokens(body) == bounds[key]
    frame, _ = estimate(cfg)
    assert frame.loc["answers", "prompt_tokens"] == sum(bounds.values())
    assert frame.loc["answers", "prompt_tokens"] >= sum(sent_tokens(b) for b in answers)
    if memory == ("memory=full_context",):  # the whole conversation: the bound is met exactly
        assert tight == len(answers)


def test_the_bound_grows_with_k_and_is_met_when_k_covers_every_turn() -> None:
    small = make_cfg(*COMMON, "memory=bm25", "memory.k=2")
    every = make_cfg(*COMMON, "memory=bm25", "memory.k=1000")
    whole = make_cfg(*COMMON, "memory=full_context")
    dataset = build_dataset(small.dataset)
    a, _ = answer_prompt_bounds(small, dataset, COUNTER, _eval_settings(small))
    b, _ = answer_prompt_bounds(every, dataset, COUNTER, _eval_settings(every))
    c, _ = answer_prompt_bounds(whole, dataset, COUNTER, _eval_settings(whole))
    assert all(a[k] < b[k] for k in a)
    assert b == c  # k past the conversation's length: every turn, as full context


def test_gaama_is_labelled_an_estimate_and_the_tokenizer_is_named() -> None:
    frame, facts = estimate(make_cfg(*COMMON, "memory=gaama"))
    assert frame.loc["answers", "basis"].startswith("estimate, not a bound")
    text = format_estimate(*estimate(make_cfg(*COMMON, "memory=bm25")))
    assert "tokens counted with" in text and "its own tokenizer and chat template" in text
