"""docs/adding_a_memory.md: its example memory runs exactly as written, ranks a hand-built
conversation as worked out by hand, and its config, composed from the guide's YAML, runs through
every command the guide names (run, estimate, a sweep, held-out search) on the shipped sample."""

from __future__ import annotations

import json
import re
import sys
import types
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from scripts_loader import load_script  # tests/ is on sys.path (rootdir conftest)
from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)
from two_conversations import COPY_ID, write_two_conversations

from synapse_pt.data.locomo import load_locomo
from synapse_pt.data.schema import Conversation, Question, Session, Turn
from synapse_pt.data.source import sample_path
from synapse_pt.eval.qa.pipeline import EvalSettings, blind, evaluate
from synapse_pt.eval.qa.tokens import HFTokenCounter
from synapse_pt.models.hashing import HashingEncoder

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "adding_a_memory.md"
#: where the guide tells a reader to put the class (its YAML's _target_ names it)
MODULE = "synapse_pt.memory.recency_dense"


def guide_block(language: str) -> str:
    """The first ``language`` code block of the guide's example section."""
    text = GUIDE.read_text()
    example = text[text.index("## The example"):]
    return re.search(rf"```{language}\n(.*?)```", example, flags=re.S).group(1)


@pytest.fixture(scope="module")
def RecencyDenseMemory():  # noqa: N802 (the class the guide defines)
    module = types.ModuleType(MODULE)
    exec(compile(guide_block("python"), str(GUIDE), "exec"), module.__dict__)
    return module.RecencyDenseMemory


@pytest.fixture
def guide_config(tmp_path, monkeypatch, RecencyDenseMemory) -> str:  # noqa: N803
    """The ``hydra.searchpath`` override under which ``memory=recency_dense`` composes the
    guide's YAML, with the guide's class importable where the YAML's ``_target_`` says."""
    module = types.ModuleType(MODULE)
    module.RecencyDenseMemory = RecencyDenseMemory
    monkeypatch.setitem(sys.modules, MODULE, module)
    folder = tmp_path / "configs" / "memory"
    folder.mkdir(parents=True)
    (folder / "recency_dense.yaml").write_text(guide_block("yaml"))
    return f"hydra.searchpath=[file://{tmp_path / 'configs'}]"


def _conversation() -> tuple[Conversation, Question]:
    when = datetime(2023, 5, 8, 13, 0)
    texts = ["I adopted a puppy named Rex", "the weather is nice", "I adopted a puppy named Rex"]
    turns = tuple(Turn("c", f"D1:{i + 1}", "Ann", t, 1, i, when) for i, t in enumerate(texts))
    question = Question("c", 0, "Ann: I adopted a puppy named Rex", "Rex", 4, ("D1:3",),
                        ("D1:3",))
    conv = Conversation("c", "Ann", "Bob", (Session(1, when, "1:00 pm on 8 May, 2023", turns),),
                        (question,))
    return conv, question


def test_recency_breaks_a_tie_towards_the_later_turn(RecencyDenseMemory):  # noqa: N803
    conv, question = _conversation()
    # turns 1 and 3 are the same text: equal cosine; positions 0, 0.5, 1 -> turn 3 gains 0.5
    memory = RecencyDenseMemory(HashingEncoder(64), k=2, recency=0.5)
    memory.ingest([conv])
    result = memory.retrieve([blind(question)])
    assert result.node_ids() == [["D1:3", "D1:1"]]
    without = RecencyDenseMemory(HashingEncoder(64), k=2, recency=0.0)
    without.ingest([conv])
    assert without.retrieve([blind(question)]).node_ids() == [["D1:1", "D1:3"]]  # lower index


def test_the_example_runs_in_the_harness_on_the_sample(RecencyDenseMemory):  # noqa: N803
    dataset = load_locomo(sample_path(), name="sample")
    memory = RecencyDenseMemory(HashingEncoder(64), k=5)
    memory.ingest(dataset.conversations)
    df, summary = evaluate(memory, dataset, settings=EvalSettings(mode="retrieval"),
                           token_counter=HFTokenCounter(None))
    assert len(df) == dataset.num_questions
    assert df["retrieved"].map(len).max() == 5
    assert 0.0 <= df["recall@5"].dropna().mean() <= 1.0
    assert summary["gated_rate"] == 0.0


FAST = ("dataset=sample", "embedder=hashing", "device=cpu", "logger=none")


def test_the_guide_yaml_runs_through_run_estimate_sweep_and_heldout(tmp_path, guide_config):
    from synapse_pt.commands.estimate import estimate
    from synapse_pt.commands.run import run

    def cfg(name: str, *overrides: str):
        return make_cfg(*FAST, "memory=recency_dense", guide_config,
                        f"paths.cache_dir={tmp_path / 'cache'}", *overrides,
                        output_dir=str(tmp_path / name))

    # run: the composed YAML builds the guide's class, which retrieves its k turns
    composed = cfg("unused")
    assert composed.memory._target_ == f"{MODULE}.RecencyDenseMemory"
    first = run(cfg("run"))
    assert first["identity"]["memory"]["memory"] == "recency_dense"
    assert first["identity"]["memory"]["prior"] == "recency"
    predictions = pd.read_parquet(tmp_path / "run" / "predictions.parquet")
    assert predictions["retrieved"].map(len).max() == 30

    # estimate: its declared rule (k turns) bounds the context as BM25's does at the same k
    common = ("llm=openai", "eval=qa")
    mine, _ = estimate(cfg("unused", *common, "memory.k=12"))
    bm25, _ = estimate(make_cfg(*FAST, *common, "memory=bm25", "memory.k=12"))
    assert mine.loc["answers", "prompt_tokens"] == bm25.loc["answers", "prompt_tokens"]
    assert "k=12 longest turns" in mine.loc["answers", "basis"]

    # a sweep: a job that changes only retrieval settings reconfigures the ingested memory
    # (configure_retrieval) and retrieves as a fresh build with those settings does
    swept = run(cfg("swept", "memory.recency=0.5", "memory.prior=primacy", "memory.k=5"))
    timing = json.loads((tmp_path / "swept" / "timing.json").read_text())
    assert timing["ingest_reused"] == 1.0
    fresh = run(cfg("fresh", "memory.recency=0.5", "memory.prior=primacy", "memory.k=5",
                    "reuse_ingested=false"))
    assert json.loads((tmp_path / "fresh" / "timing.json").read_text())["ingest_reused"] == 0.0
    assert swept["retrieval"] == fresh["retrieval"]
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "swept" / "predictions.parquet"),
                                  pd.read_parquet(tmp_path / "fresh" / "predictions.parquet"))
    with pytest.raises(ValueError, match=r"memory.prior must be one of"):
        run(cfg("bad", "memory.prior=Recency"))  # its choices, checked on reuse too

    # held-out search over its declared space, on the sample and a copy of it
    data = write_two_conversations(tmp_path)
    tune = load_script("tune_heldout")
    out = tmp_path / "heldout"
    assert tune.main(["--out", str(out), "--folds", "kfold2", "--combinations", "4",
                      "--per-combination", "2", "--", *FAST, "memory=recency_dense",
                      guide_config, f"dataset.path={data}",
                      f"paths.cache_dir={tmp_path / 'cache'}"]) == 0
    records = json.loads((out / "folds.json").read_text())["schemes"][0]["records"]
    assert [r["test"] for r in records] == [["sample-1"], [COPY_ID]]
    assert json.loads((out / "folds.json").read_text())["candidates"] == 8
    # fold 0 is read with the candidate chosen on the copy: a run with that configuration on
    # the sample conversation scores each question as the search did
    chosen = records[0]["config"]
    assert set(chosen) == {"prior", "k", "recency"}
    check = run(cfg("check", f"dataset.path={data}", "dataset.sample_ids=[sample-1]",
                    *(f"memory.{k}={v}" for k, v in chosen.items())))
    assert check["identity"]["memory"]["prior"] == chosen["prior"]
    per_q = pd.read_parquet(out / "per_question_kfold2.parquet")
    held = per_q[per_q["sample_id"] == "sample-1"]["recall@10"].to_numpy()
    ran = pd.read_parquet(tmp_path / "check" / "predictions.parquet")["recall@10"].to_numpy()
    pd.testing.assert_series_equal(pd.Series(held, dtype=float), pd.Series(ran, dtype=float))
