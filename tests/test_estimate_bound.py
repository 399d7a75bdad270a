"""The estimate's answer stage is an upper bound on what a run sends (issue 31, defect 3): every
answer request the run sends to the loopback server has no more prompt tokens (counted by the
estimate's own counter) than the estimate's bound for that question."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from loopback import completion_body, serve
from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)

from synapse_pt.commands.estimate import (
    _eval_settings,
    answer_prompt_bounds,
    estimate,
    format_estimate,
)
from synapse_pt.commands.run import run
from synapse_pt.data.resolve import build_dataset
from synapse_pt.eval.qa.tokens import HFTokenCounter
from synapse_pt.models.llm.base import MESSAGE_OVERHEAD_TOKENS

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
    assert "tokens counted with" in text and "own tokenizer and chat template" in text
    assert "at most $" in text and "50% more tokens than counted" in text


def test_the_dollars_carry_the_tokenizer_margin() -> None:
    """Issue 58: the tokenizer gap of "some tens of per cent" was left open; the dollars price
    each prompt at 50 % more tokens than the offline counter gives."""
    frame, facts = estimate(make_cfg(*COMMON, "memory=bm25"))
    row = frame.loc["answers"]
    prompt = math.ceil(row["prompt_tokens"] * 1.5)
    assert row["usd_max"] == pytest.approx((0.15 * prompt + 0.60 * row["completion_tokens_max"])
                                           / 1e6)
    assert facts["bound"] == "at most"


def test_a_part_that_cannot_be_bounded_is_named_and_not_called_at_most() -> None:
    """Issue 58: "at most $33.92" left out the GAAMA and Membox LLM builds and was still called
    "at most"."""
    cfg = make_cfg(*COMMON, "memory=gaama", "extractor=llm")
    text = format_estimate(*estimate(cfg))
    line = next(t for t in text.splitlines() if t.startswith("at most $"))
    assert "for the stages it bounds; more is spent" in line
    assert "LLM build: not bounded" in line


def test_synapse_extraction_repairs_bound_the_repairs_a_run_sends(tmp_path: Path,
                                                                  monkeypatch) -> None:
    """Issue 58: a garbled reply's repair round was not counted. A server that garbles every
    extraction reply gets one repair per window; each repair request is within the row's
    bound (per window: the request, the reply at max_tokens, the instruction)."""
    def garble(body: dict[str, Any], n: int) -> tuple[int, str, float]:
        return 200, completion_body("not a list at all", {"prompt_tokens": 1,
                                                          "completion_tokens": 1}), 0.0

    overrides = ("experiment=paper_main", "llm=openai", "extractor=llm", "dataset=sample",
                 "embedder=hashing", "device=cpu", "logger=none")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("TQDM_DISABLE", "1")
    with serve(garble) as server:
        run(make_cfg(*overrides, f"llm.backend.base_url={server.url}",
                     "llm.backend.max_retries=0", f"paths.cache_dir={tmp_path / 'cache'}",
                     output_dir=str(tmp_path / "run")))
        bodies = list(server.bodies)
    repairs = [b for b in bodies if any(m["role"] == "assistant" for m in b["messages"])]
    frame, _ = estimate(make_cfg(*overrides))
    row = frame.loc["extraction repairs"]
    assert len(repairs) == row["calls"] == frame.loc["extraction", "calls"] == 8
    assert sum(sent_tokens(b) for b in repairs) <= row["prompt_tokens"]


def test_the_bare_estimate_is_one_line() -> None:
    """Issue 58: the bare `python -m synapse_pt.estimate` (llm=none) was a traceback ("Input cfg
    is not an OmegaConf config object")."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "synapse_pt.estimate"], capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().count("\n") == 0 and "sends no request to a model" in proc.stdout
    assert "Traceback" not in proc.stderr
