"""Each benchmark's judge end to end (issue 32): a qa run on a small REALTALK or BEAM file sends
its judge prompts to a loopback OpenAI-compatible server, whose scripted verdicts come back as the
run's judge column; the estimate counts the judge calls the run really sends. Judge sensitivity
(issue 53): a study of two systems under two judges on the shipped sample, its tables checked
against the predictions by hand."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from itertools import combinations
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from benchmark_fixtures import beam_fixture, realtalk_fixture
from loopback import completion_body, serve
from upstream_files import needs_upstream

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

    from synapse_pt.commands.estimate import estimate

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


# -- judge sensitivity (issue 53): two systems x two judges over the same answers ---------------

ANSWERED = re.compile(r"^n(\d+)$")


def answer_for(prompt: str) -> str:
    """The scripted answer: ``n<lines of the answer prompt>`` (differs with the context)."""
    return f"n{len(prompt.splitlines())}"


def mem0_verdict(generated: str) -> float:
    """The scripted mem0 judge: CORRECT (1) for an even line count, else WRONG (0)."""
    match = ANSWERED.match(generated)
    return 1.0 if match and int(match.group(1)) % 2 == 0 else 0.0


def gaama_reward(generated: str) -> float:
    """The scripted GAAMA judge: 0.25 where mem0's says CORRECT, else 0.75 (orders reversed)."""
    return 0.25 if mem0_verdict(generated) == 1.0 else 0.75


def sensitivity_behaviour(body: dict[str, Any], n: int) -> tuple[int, str, float]:
    prompt = last_user(body)
    if prompt.startswith("\nYour task is to label an answer"):
        generated = prompt.split("Generated answer: ")[1].split("\n")[0]
        text = json.dumps({"label": "CORRECT" if mem0_verdict(generated) else "WRONG"})
    elif prompt.startswith("You are an evaluator."):
        generated = prompt.split("Generated Response: ")[1].split("\n")[0]
        text = json.dumps({"reward": gaama_reward(generated), "justification": "scripted"})
    else:
        text = answer_for(prompt)
    return 200, completion_body(text, {"prompt_tokens": 3, "completion_tokens": 2}), 0.0


def markdown_rows(text: str) -> dict[str, dict[str, str]]:
    """``{first cell: {header: cell}}`` of a Markdown table."""
    lines = [ln for ln in text.strip().splitlines() if ln.startswith("|")]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    header = cells[0]
    return {row[0]: dict(zip(header, row, strict=True)) for row in cells[2:]}


@pytest.mark.slow
@needs_upstream
def test_judge_sensitivity_study_end_to_end(tmp_path: Path) -> None:
    """eval.judges=[mem0,gaama] over a study of two systems on the shipped sample: every answer
    asked once, each judge once a judged question (its calls in spend.json and the estimate),
    a column and a metric per judge, and the study's judges tables equal to what the
    predictions give by hand."""
    base = ["dataset=sample", "embedder=hashing", "device=cpu", "logger=none", "llm=openai",
            "eval=judge", "eval.judges=[mem0,gaama]", "llm.backend.max_retries=1",
            "llm.backend.backoff_s=0.01", f"paths.cache_dir={tmp_path / 'cache'}"]
    systems = {"bm25": ["memory=bm25", "memory.k=2"], "dense": ["memory=vector_rag", "memory.k=3"]}
    study = tmp_path / "judges.yaml"
    study.write_text(json.dumps({"base": base, "variants": systems}))  # JSON is YAML
    out = tmp_path / "out"
    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "TQDM_DISABLE": "1"}
    with serve(sensitivity_behaviour) as server:
        proc = subprocess.run(
            [sys.executable, "scripts/run_study.py", str(study), "--out", str(out),
             f"llm.backend.base_url={server.url}"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        bodies = list(server.bodies)

    prompts = [last_user(b) for b in bodies]
    judge_marks = ("\nYour task is to label an answer", "You are an evaluator.")
    answers = [p for p in prompts if not p.startswith(judge_marks)]
    assert len(answers) == len(set(answers))  # no answer asked twice

    by_hand: dict[str, dict[str, float]] = {}
    for i, (label, overrides) in enumerate(systems.items()):
        folder = out / f"{i}_{label}"
        preds = pd.read_parquet(folder / "predictions.parquet")
        assert "judge" not in preds.columns  # several judges: a column each
        judged = preds["category"] != 5
        n_judged = int(judged.sum())
        expected_mem0 = preds.loc[judged, "prediction"].map(mem0_verdict)
        expected_gaama = preds.loc[judged, "prediction"].map(gaama_reward)
        assert preds.loc[judged, "judge_mem0"].tolist() == expected_mem0.tolist()
        assert preds.loc[judged, "judge_gaama"].tolist() == expected_gaama.tolist()
        assert preds.loc[~judged, ["judge_mem0", "judge_gaama"]].isna().all().all()
        answerable = preds["category"].between(1, 4)
        by_hand[label] = {
            "judge_mem0": 100 * expected_mem0.mean(), "judge_gaama": 100 * expected_gaama.mean(),
            "f1_official": 100 * preds.loc[answerable, "f1_official"].mean(),
            "bleu1": 100 * preds.loc[answerable, "bleu1"].mean(),
            "recall@5": 100 * preds.loc[answerable, "recall@5"].mean()}
        metrics = json.loads((folder / "metrics.json").read_text())
        assert metrics["identity"]["judges"] == ["mem0", "gaama"]
        assert metrics["identity"]["judge_protocol"] is None
        assert metrics["metrics"]["judge_mem0"]["mean_q_1_4"] == pytest.approx(
            expected_mem0.mean())
        assert metrics["judge"]["judge_gaama_runs"] == 1
        spend = json.loads((folder / "spend.json").read_text())
        for protocol in ("mem0", "gaama"):
            mine = spend["judges"][protocol]
            assert mine["n_responses"] == n_judged  # one call a judged question, no retry
            assert mine["n_paid"] + mine["n_cached"] == n_judged
        frame, _ = estimate_of(*base, *overrides)
        assert frame.loc["judge_mem0", "calls"] == n_judged
        assert frame.loc["judge_gaama", "calls"] == n_judged
    # judge calls the server saw: every paid one of both runs (a cached one cost no call)
    paid = sum(json.loads((out / f"{i}_{label}" / "spend.json").read_text())["judges"][p]["n_paid"]
               for i, label in enumerate(systems) for p in ("mem0", "gaama"))
    assert sum(p.startswith(judge_marks) for p in prompts) == paid

    a, b = by_hand["bm25"], by_hand["dense"]
    assert a["judge_mem0"] != b["judge_mem0"]  # the systems differ: the orders mean something
    scores = markdown_rows((out / "tables" / "judges_scores.md").read_text())
    for label, values in by_hand.items():
        for measure, value in values.items():
            assert float(scores[label][measure]) == pytest.approx(value, abs=0.05), \
                (label, measure)
    orders = markdown_rows((out / "tables" / "judges_orders.md").read_text())
    tau = markdown_rows((out / "tables" / "judges_tau.md").read_text())
    swaps = markdown_rows((out / "tables" / "judges_swaps.md").read_text())
    swapped = {(r["measure A"], r["measure B"]) for r in swaps.values()}
    for m in by_hand["bm25"]:
        top, low = ("bm25", "dense") if a[m] >= b[m] else ("dense", "bm25")
        assert orders[m]["order (best first)"] == f"{top} {'=' if a[m] == b[m] else '>'} {low}"
    for m1, m2 in combinations(list(by_hand["bm25"]), 2):
        d1, d2 = a[m1] - b[m1], a[m2] - b[m2]
        # two systems: tau-b is +1 when both order them alike, -1 when they swap, else undefined
        expected = "-" if d1 * d2 == 0 else ("1.00" if d1 * d2 > 0 else "-1.00")
        assert tau[m1][m2] == expected, (m1, m2)
        assert ((m1, m2) in swapped or (m2, m1) in swapped) == (d1 * d2 < 0), (m1, m2)
    # the scripted GAAMA judge reverses mem0's order: they swap
    assert tau["judge_mem0"]["judge_gaama"] == "-1.00"
    assert (out / "judges.md").read_text().startswith("# judge sensitivity: study")


# -- LoCoMo-Plus (issue 59): the authors' judge over the evidence, no gold ------------------------

PLUS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo_plus"


@pytest.mark.slow
@pytest.mark.skipif(not (PLUS / "prompts.json").is_file(),
                    reason="the LoCoMo-Plus data is not beside the checkout")
def test_locomo_plus_judge_end_to_end(tmp_path: Path) -> None:
    """eval=judge on three items of LoCoMo-Plus (packed, conv-26): the benchmark's own judge
    (the authors' Cognitive template from prompts.json) asked once per item with the item's cue
    as evidence; correct 1, partial 0.5, an unreadable reply 0 and counted; no F1 (no reference
    answer); the estimate counts the calls sent; the run records prompts.json's sha256."""
    overrides = ("eval=judge", "llm=openai", "memory=bm25", "memory.k=2", "embedder=hashing",
                 "device=cpu", "logger=none", "dataset=locomo_plus_packed",
                 "dataset.sample_ids=[conv-26]", "dataset.max_questions=3")
    items = json.loads((PLUS / "locomo_plus.json").read_text())
    # conv-26 is item i mod 10 == 0: items 0, 10, 20 are its first three
    expected = []
    for i in (0, 10, 20):
        a, b = items[i]["cue_dialogue"].replace("\\n", "\n").split("\n")
        expected.append(f"Caroline\uff1a{a.removeprefix('A:').strip()}\n"
                        f"Melanie\uff1a{b.removeprefix('B:').strip()}")
    # each item's reply by its evidence (the judge's requests are sent concurrently: their order
    # of arrival varies)
    replies = dict(zip(expected, ('{"label": "correct", "reason": "linked"}',
                                  '```json\n{"label": "partial", "reason": "vague"}\n```',
                                  "I cannot tell"), strict=True))
    judged: list[str] = []

    def behaviour(body: dict[str, Any], n: int) -> tuple[int, str, float]:
        prompt = last_user(body)
        if prompt.startswith("\nYou are a Memory Awareness Judge."):
            evidence = prompt.split("Memory/Evidence:\n")[1].split("\n\nModel Prediction:")[0]
            judged.append(evidence)
            text = replies.get(evidence, "not one of the three items' cues")
        else:
            text = "a reply"
        return 200, completion_body(text, {"prompt_tokens": 1, "completion_tokens": 1}), 0.0

    with serve(behaviour) as server:
        proc = run_qa(tmp_path, server.url, *overrides)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(judged) == sorted(expected)  # each item judged once, against its own cue
    preds = pd.read_parquet(tmp_path / "run" / "predictions.parquet").set_index("qa_index")
    assert preds.loc[[0, 10, 20], "judge"].tolist() == [1.0, 0.5, 0.0]
    assert preds.loc[[0, 10, 20], "n_judge_failures"].tolist() == [0, 0, 1]
    assert preds["f1_official"].isna().all() and preds["gold"].isna().all()
    assert preds.loc[0, "question"] == "Caroline: " + items[0]["trigger_query"][2:].strip()
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    identity = metrics["identity"]
    assert identity["judge_protocol"] == "locomo_plus"
    assert identity["upstream_prompts"] == {"locomo_plus/prompts.json": {
        "sha256": "dead03372effaf0c2fd9aa986ab54fb42b9f7d7ec7e1492eb02e0f7f15056d2f",
        "read_from": "data"}}
    assert metrics["judge"]["judge_failures"] == 1.0
    frame, _ = estimate_of(*overrides)
    assert frame.loc["judge", "calls"] == 3
