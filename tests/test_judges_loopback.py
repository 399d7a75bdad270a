"""Each benchmark's judge end to end (issue 32): a qa run on a small REALTALK or BEAM file sends
its judge prompts to a loopback OpenAI-compatible server, whose scripted verdicts come back as the
run's judge column; the estimate counts the judge calls the run really sends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from benchmark_fixtures import beam_fixture, realtalk_fixture
from loopback import completion_body, serve

REPO_ROOT = Path(__file__).resolve().parents[1]


def last_user(body: dict[str, Any]) -> str:
    return body["messages"][-1]["content"]


def run_qa(tmp_path: Path, url: str, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "TQDM_DISABLE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "synapse_pt.run", *overrides, f"llm.backend.base_url={url}",
         "llm.backend.max_retries=1", "llm.backend.backoff_s=0.01",
         f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env)


def estimate_of(*overrides: str):
    from test_configs import make_cfg

    from synapse_pt.estimate import estimate

    return estimate(make_cfg(*overrides))


BASE = ("eval=qa", "llm=openai", "memory=bm25", "memory.k=2", "embedder=hashing", "device=cpu",
        "logger=none", "eval.judge_runs=2")


@pytest.mark.slow
def test_beam_rubric_judge_end_to_end(tmp_path: Path) -> None:
    """BEAM: one judge call per rubric item and run, the abstention question judged too (its
    rubric says what it must say); the question's score is the share of items satisfied."""
    folder = beam_fixture(tmp_path / "beam")
    overrides = (*BASE, "dataset=beam_100k", f"dataset.path={folder}",
                 "eval.judge_protocol=beam_rubric")

    def behaviour(body: dict[str, Any], n: int) -> tuple[int, str, float]:
        prompt = last_user(body)
        if prompt.startswith("You check one criterion"):
            item = prompt.split("Criterion: ")[1].split("\n")[0]
            # "first" satisfied, "second" not: 1/2; "state: new" and "say none" satisfied
            text = '{"score": 0}' if item == "second" else '{"score": 1}'
        else:
            text = "an answer"
        return 200, completion_body(text, {"prompt_tokens": 1, "completion_tokens": 1}), 0.0

    with serve(behaviour) as server:
        proc = run_qa(tmp_path, server.url, *overrides)
        assert proc.returncode == 0, proc.stderr[-3000:]
        bodies = list(server.bodies)
    judge = [b for b in bodies if last_user(b).startswith("You check one criterion")]
    assert len(judge) == 2 * (1 + 2 + 1)  # two runs over the four rubric items
    preds = pd.read_parquet(tmp_path / "run" / "predictions.parquet").set_index("question")
    assert preds.loc["order?", "judge"] == 0.5
    assert preds.loc["now?", "judge"] == 1.0 and preds.loc["a?", "judge"] == 1.0
    frame, _ = estimate_of(*overrides)
    assert frame.loc["judge", "calls"] == len(judge)


@pytest.mark.slow
def test_realtalk_score_judge_end_to_end(tmp_path: Path) -> None:
    """REALTALK: one score call per question and run; an unreadable score is a counted failure,
    not a 0."""
    realtalk_fixture(tmp_path / "realtalk")
    overrides = (*BASE, "dataset=realtalk", f"dataset.path={tmp_path / 'realtalk'}",
                 "eval.judge_protocol=realtalk")

    def behaviour(body: dict[str, Any], n: int) -> tuple[int, str, float]:
        prompt = last_user(body)
        if prompt.startswith("Judge how correct"):
            text = "unsure" if "Question: q2?" in prompt else '{"score": 0.25}'
        else:
            text = "an answer"
        return 200, completion_body(text, {"prompt_tokens": 1, "completion_tokens": 1}), 0.0

    with serve(behaviour) as server:
        proc = run_qa(tmp_path, server.url, *overrides)
        assert proc.returncode == 0, proc.stderr[-3000:]
        bodies = list(server.bodies)
    judge = [b for b in bodies if last_user(b).startswith("Judge how correct")]
    assert len(judge) == 2 * 3
    preds = pd.read_parquet(tmp_path / "run" / "predictions.parquet").set_index("question")
    assert preds.loc["q0?", "judge"] == 0.25 and preds.loc["q1?", "judge"] == 0.25
    assert pd.isna(preds.loc["q2?", "judge"])
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert json.dumps(metrics).count('"judge_failures": 2.0') >= 1
    frame, _ = estimate_of(*overrides)
    assert frame.loc["judge", "calls"] == len(judge)
