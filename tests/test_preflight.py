"""Fail before the slow part (issue 50, item 3): what can be checked without ingesting (the answer
model's key and base URL, the objective's name and whether the questions asked can produce it,
the judge and scorer settings) stops a run before its encoder is built, in one line naming the
setting. On main a missing ``OPENAI_API_KEY`` failed after ingestion (464 s for one
conversation), a typo in ``objective=`` or ``dataset.question_categories=[5]`` under the default
objective after the whole run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from loopback import serve
from test_checks_before_writes import refuse_encoder
from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)

from synapse_pt.commands.run import run
from synapse_pt.common.errors import ConfigError
from synapse_pt.eval.qa.objective import check_objective
from synapse_pt.eval.qa.pipeline import EvalSettings, metric_columns
from synapse_pt.models.llm.openai_compat import OpenAICompatibleLLM

REPO_ROOT = Path(__file__).resolve().parents[1]
FAST = ("dataset=sample", "embedder=hashing", "logger=none", "device=cpu", "memory=bm25")
NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


@pytest.fixture
def no_encoder(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Building the run's encoder (the first step of the slow part) fails the test."""
    return refuse_encoder(monkeypatch)


@pytest.mark.parametrize(("overrides", "message"), [
    (("eval=qa", "llm=openai"),
     r"^llm\.backend\.api_key_env: https://api\.openai\.com/v1 needs an API key and the "
     r"environment variable OPENAI_API_KEY is empty; export OPENAI_API_KEY=\.\.\."),
    (("eval=qa", "llm=vllm", "llm.backend.base_url=127.0.0.1:8000/v1"),
     r"^llm\.backend\.base_url='127\.0\.0\.1:8000/v1' is not an http\(s\) URL with a host"),
    (("eval=qa", "llm=none"), r"^eval\.mode=qa needs an answer model and llm=none has none"),
    (("objective=recal@10.mean_q_1_4",),
     r"^objective=recal@10\.mean_q_1_4: 'recal@10' is not a metric of this run; this run "
     r"records the metrics recall@5, recall@10, recall@30, recall@500tok"),
    (("objective=recall@10.mean_q_1-4",),
     r"^objective=recall@10\.mean_q_1-4: recall@10 has no key 'mean_q_1-4'; its keys: "
     r"multi-hop, temporal, open-domain, single-hop, adversarial, mean_cat_1_4, mean_q_1_4, "
     r"overall$"),
    (("dataset.question_categories=[5]",),
     r"^objective=recall@10\.mean_q_1_4: mean_q_1_4 is over categories 1-4 and none of their "
     r"questions is asked \(categories asked: \[5\]; dataset\.question_categories"),
    (("dataset.question_categories=[5]", "objective=recall@10.temporal"),
     r"^objective=recall@10\.temporal: no question of category 2 \(temporal\) is asked"),
    (("objective=f1_official.overall",),
     r"^objective=f1_official\.overall: f1_official is scored in qa mode only "
     r"\(eval\.mode=retrieval; eval=qa\)"),
    (("objective=recall@20.mean_q_1_4",),
     r"^objective=recall@20\.mean_q_1_4: recall@20 is not among eval\.recall_ks=\[5, 10, 30\]"),
    (("eval=qa", "llm=vllm", "objective=judge.overall"),
     r"^objective=judge\.overall: judge needs the LLM judge \(eval\.judge_runs=0; eval=judge\)"),
    (("eval=qa", "llm=vllm", "eval.judge_runs=1", "eval.judge_protocol=mem1"),
     r"^eval\.judge_protocol must be one of"),
], ids=["openai-no-key", "base-url", "qa-without-llm", "objective-typo", "objective-key",
        "categories-5", "category-not-asked", "qa-metric-in-retrieval", "recall-k",
        "judge-metric-without-judge", "judge-protocol"])
def test_each_fails_before_the_encoder_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                no_encoder: list[str],
                                                overrides: tuple[str, ...], message: str) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg = make_cfg(*FAST, *overrides, f"paths.cache_dir={tmp_path / 'cache'}",
                   output_dir=str(tmp_path / "run"))
    with pytest.raises(ConfigError, match=message) as err:
        run(cfg)
    assert "\n" not in str(err.value)
    assert no_encoder == []
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_a_missing_key_is_one_line_in_seconds_from_the_cli(tmp_path: Path) -> None:
    """``python -m synapse_pt.run eval=qa llm=openai`` without the key, with the default encoder
    and an empty cache: one line naming the setting, exit status 1, and nothing was made: the
    check comes before the run's folder (on main: the key's error after ingestion; until issue
    58 after the folder and its log were made)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    proc = subprocess.run(
        [sys.executable, "-m", "synapse_pt.run", "dataset=sample", "eval=qa", "llm=openai",
         "logger=none", f"paths.cache_dir={tmp_path / 'cache'}",
         f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        "[synapse_pt] error: llm.backend.api_key_env: https://api.openai.com/v1 needs an API "
        "key and the environment variable OPENAI_API_KEY is empty; export OPENAI_API_KEY=... "
        "(or set llm.backend.api_key_env) (HYDRA_FULL_ERROR=1 shows the traceback)"]
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


def test_what_can_work_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key in the named variable, a local server without one, and objectives the asked
    questions produce (a category's, ``overall``, a section's) pass."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    OpenAICompatibleLLM.check_settings({"base_url": "https://api.openai.com/v1",
                                        "api_key_env": "OPENAI_API_KEY"})
    monkeypatch.delenv("OPENAI_API_KEY")
    OpenAICompatibleLLM.check_settings({"base_url": "http://127.0.0.1:8000/v1",
                                        "api_key_env": "OPENAI_API_KEY"})
    qa = EvalSettings(mode="qa")
    for name in ("f1_official.adversarial", "recall@10.overall", "retrieval.false_rejection_rate"):
        check_objective(name, qa, categories={5}, names=NAMES, answerable=(1, 2, 3, 4),
                        sections=["identity", "retrieval"])


def test_metric_columns_are_the_metrics_a_run_records(tmp_path: Path) -> None:
    """:func:`metric_columns` (what the objective is checked against) names exactly the metrics
    of ``metrics.json``: a retrieval run, and a qa run with the judge against a loopback
    server."""
    retrieval = run(make_cfg(*FAST, "smoke=true", f"paths.cache_dir={tmp_path / 'cache'}",
                             output_dir=str(tmp_path / "retrieval")))
    assert sorted(retrieval["metrics"]) == sorted(metric_columns(EvalSettings()))
    with serve() as server:
        qa = run(make_cfg(*FAST, "smoke=true", "eval=judge", "eval.judge_runs=1", "llm=vllm",
                          f"llm.backend.base_url={server.url}", "llm.backend.model=m",
                          "llm.backend.max_retries=0", f"paths.cache_dir={tmp_path / 'cache'}",
                          output_dir=str(tmp_path / "qa")))
        two = run(make_cfg(*FAST, "smoke=true", "eval=judge", "eval.judge_runs=1", "llm=vllm",
                           "eval.judges=[mem0,realtalk]", f"llm.backend.base_url={server.url}",
                           "llm.backend.model=m", "llm.backend.max_retries=0",
                           f"paths.cache_dir={tmp_path / 'cache'}",
                           output_dir=str(tmp_path / "two")))
    assert sorted(qa["metrics"]) == sorted(metric_columns(EvalSettings(mode="qa", judge_runs=1)))
    # several judges: a column each, judge_<name> (prediction_frame's naming)
    assert sorted(two["metrics"]) == sorted(metric_columns(
        EvalSettings(mode="qa", judge_runs=1, judges=("mem0", "realtalk"))))
    assert {"judge_mem0", "judge_realtalk"} <= set(two["metrics"])
