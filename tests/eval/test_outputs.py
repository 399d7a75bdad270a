"""The run's outputs: predictions.parquet schema, metrics.json content, tables/ (markdown + LaTeX).

Runs :func:`synapse_pt.commands.run.run` on the real configs (composed with hydra's compose API,
shrunk to the shipped sample and the hashing encoder) with a scripted answer model in qa mode.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

import synapse_pt.commands.run as run_module
from synapse_pt.eval.qa.prompts import NO_RECORD_REPLY
from synapse_pt.eval.records.outputs import (
    PREDICTION_COLUMNS,
    config_hash,
    predictions_table,
    write_json,
    write_predictions,
)
from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
CATEGORIES = ["multi-hop", "temporal", "open-domain", "single-hop", "adversarial"]

FIXED_TYPES = {
    "sample_id": pa.string(), "qa_index": pa.int64(), "category": pa.int64(),
    "question": pa.string(), "gold": pa.string(), "prediction": pa.string(),
    "retrieved": pa.list_(pa.string()), "retrieved_turns": pa.list_(pa.string()),
    "c_ret": pa.float64(), "gate_score": pa.float64(),
    "gated": pa.bool_(), "context_tokens": pa.int64(), "prompt_tokens": pa.int64(),
    "completion_tokens": pa.int64(), "latency_s": pa.float64(),
}
NODE_ID = re.compile(r"D\d+:\d+|S:\d+")
# the peers' retrieval rules, one column each per cut-off (eval.peer_ks), in the rules' order
PEERS = [f"peer_{rule}@{k}" for rule in (
    "session_hit", "session_hit_turns", "session_recall", "turn_recall_raw", "raw_any",
    "raw_strict", "any", "strict") for k in (1, 5, 10)]


class ScriptedLLM(LLM):
    """Answers "Biscuit" to everything; labels every judge prompt CORRECT."""

    backend = "scripted"
    model = "scripted-1"

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        self.requests.extend(requests)
        out = []
        for r in requests:
            judge = "label an answer" in r.messages[-1][1]
            text = '{"label": "CORRECT"}' if judge else "Biscuit"
            out.append(ChatResponse(text, prompt_tokens=100, completion_tokens=3, latency_s=0.5,
                                    model=self.model))
        return out

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def compose_cfg(tmp_path: Path, *overrides: str) -> DictConfig:
    """The real run config on the sample with the hashing encoder; output and cache in tmp."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="run", overrides=[
            "dataset=sample", "embedder=hashing", f"paths.output_dir={tmp_path / 'run'}",
            f"paths.cache_dir={tmp_path / 'cache'}", *overrides])


@pytest.fixture(scope="module")
def retrieval_run(tmp_path_factory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("retrieval")
    metrics = run_module.run(compose_cfg(tmp))
    return tmp / "run", metrics


@pytest.fixture(scope="module")
def qa_run(tmp_path_factory) -> tuple[Path, dict, ScriptedLLM]:
    tmp = tmp_path_factory.mktemp("qa")
    llm = ScriptedLLM()
    patch = pytest.MonkeyPatch()
    patch.setattr(run_module, "build_llm", lambda cfg, ledger=None: llm)
    try:
        # a threshold inside the sample's C_ret range (0.08-0.12 at the paper's values), so the
        # run has both gated and answered questions
        metrics = run_module.run(compose_cfg(tmp, "eval=judge", "llm=smollm2",
                                             "memory.params.tau_gate=0.1"))
    finally:
        patch.undo()
    return tmp / "run", metrics, llm


def check_fixed_schema(path: Path) -> pa.Schema:
    schema = pq.read_schema(path)
    assert schema.names[:len(PREDICTION_COLUMNS)] == PREDICTION_COLUMNS
    for name, typ in FIXED_TYPES.items():
        assert schema.field(name).type == typ, name
    return schema


def test_predictions_schema_in_retrieval_mode(retrieval_run) -> None:
    folder, _ = retrieval_run
    schema = check_fixed_schema(folder / "predictions.parquet")
    # the run's build comes first (issue 30: a row read on its own names its build)
    assert schema.names[len(PREDICTION_COLUMNS)] == "build"
    assert schema.field("build").type == pa.string()
    metric_cols = schema.names[len(PREDICTION_COLUMNS) + 1:]
    assert metric_cols == ["recall@5", "recall@10", "recall@30", "recall@500tok",
                           "recall@1000tok", "recall@2000tok", *PEERS]
    assert all(schema.field(c).type == pa.float64() for c in metric_cols)
    df = pd.read_parquet(folder / "predictions.parquet")
    assert len(df) == 14
    assert df["prediction"].isna().all()
    assert list(df["qa_index"]) == list(range(14))
    assert all(NODE_ID.fullmatch(i) for ids in df["retrieved"] for i in ids)
    assert df["retrieved"].map(len).le(30).all()
    assert df.loc[df["category"] == 5, "gold"].isna().all()


def test_predictions_schema_in_qa_mode_with_judge(qa_run) -> None:
    folder, _, llm = qa_run
    schema = check_fixed_schema(folder / "predictions.parquet")
    assert schema.names[len(PREDICTION_COLUMNS)] == "build"
    metric_cols = schema.names[len(PREDICTION_COLUMNS) + 1:]
    assert metric_cols == ["f1_official", "f1_amem", "f1_membox", "bleu1", "judge", "judge_std",
                           "n_judge_failures", "recall@5", "recall@10", "recall@30",
                           "recall@500tok", "recall@1000tok", "recall@2000tok", *PEERS]
    assert schema.field("n_judge_failures").type == pa.int64()
    df = pd.read_parquet(folder / "predictions.parquet")
    assert df["prediction"].notna().all()
    answered = ~df["gated"]
    assert (df.loc[answered, "prediction"] == "Biscuit").all()
    assert (df.loc[df["gated"], "prediction"] == NO_RECORD_REPLY).all()
    assert (df.loc[answered, "prompt_tokens"] == 100).all()
    assert (df.loc[df["gated"], "prompt_tokens"] == 0).all()
    dog = df[df["question"] == "What is the name of Nora's dog?"].iloc[0]
    if not dog["gated"]:
        assert dog["f1_official"] == 1.0 and dog["f1_amem"] == 1.0 and dog["bleu1"] == 1.0
    judged = df["category"] != 5
    assert (df.loc[judged, "judge"] == 1.0).all() and df.loc[~judged, "judge"].isna().all()
    n_answers = int(answered.sum())
    # eval=judge asks the judge once a question (GAAMA's and mem0's code)
    assert len(llm.requests) == n_answers + int(judged.sum())


def test_metrics_json_identity_and_per_category_metrics(qa_run, retrieval_run) -> None:
    folder, metrics, _ = qa_run
    on_disk = json.loads((folder / "metrics.json").read_text())
    assert on_disk == json.loads(json.dumps(metrics, default=str).replace("NaN", "null"))
    ident = on_disk["identity"]
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", ident["git_commit"])
    assert re.fullmatch(r"[0-9a-f]{16}", ident["config_hash"])
    assert ident["embedder"].startswith("hashing")
    assert ident["llm"] == "smollm2:scripted-1"
    assert ident["memory"]["memory"] == "synapse"
    assert ident["scoring_protocols"] == ["official", "amem", "membox"]
    assert ident["category_date_instruction"] is False and ident["strict"] is True
    assert ident["category5_options"] is False
    assert ident["eval_mode"] == "qa"
    assert ident["dataset"]["questions"] == 14
    for metric in ("f1_official", "f1_amem", "f1_membox", "bleu1", "judge", "recall@5",
                   "recall@10", "recall@30"):
        entry = on_disk["metrics"][metric]
        for key in (*CATEGORIES, "mean_cat_1_4", "mean_q_1_4"):
            assert key in entry, (metric, key)
        assert entry["n"]["mean_q_1_4"] > 0
    assert on_disk["metrics"]["f1_membox"]["adversarial"] is None  # not scored by Membox
    f1 = on_disk["metrics"]["f1_official"]
    per_cat = [f1[c] for c in CATEGORIES[:4]]
    assert f1["mean_cat_1_4"] == pytest.approx(sum(per_cat) / 4)
    df = pd.read_parquet(folder / "predictions.parquet")
    assert f1["mean_q_1_4"] == pytest.approx(df.loc[df["category"] < 5, "f1_official"].mean())
    assert on_disk["metrics"]["judge"]["adversarial"] is None
    assert on_disk["judge"]["judge_runs"] == 1 and on_disk["judge"]["judge_failures"] == 0
    assert not any(k.startswith("judge") for k in on_disk["retrieval"])
    assert on_disk["usage"]["tokens_per_query"] > 0
    # retrieval mode: no answer metrics, no protocol, rejection figures present
    r_folder, _ = retrieval_run
    r = json.loads((r_folder / "metrics.json").read_text())
    assert r["identity"]["scoring_protocols"] == [] and r["identity"]["llm"] is None
    assert set(r["metrics"]) == {"recall@5", "recall@10", "recall@30", "recall@500tok",
                                 "recall@1000tok", "recall@2000tok"}
    for key in ("true_rejection_rate", "false_rejection_rate", "c_ret_auc_adversarial"):
        assert key in r["retrieval"]
    assert "usage" not in r
    # timings live apart from metrics.json (they would break byte-identical reruns)
    assert "retrieve_seconds" in json.loads((r_folder / "timing.json").read_text())
    assert "retrieve_seconds" not in r["retrieval"]


def test_tables_markdown_and_latex(qa_run, retrieval_run) -> None:
    folder, _, _ = qa_run
    tables = folder / "tables"
    names = {p.name for p in tables.iterdir()}
    for stem in ("main_f1_official", "main_f1_amem", "main_bleu1", "main_judge", "main_recall@10",
                 "efficiency"):
        assert {f"{stem}.md", f"{stem}.tex"} <= names, stem
    md = (tables / "main_f1_official.md").read_text()
    assert "|" in md and "multi-hop" in md and "adversarial" in md
    tex = (tables / "main_f1_official.tex").read_text()
    assert "\\begin{tabular}" in tex and "\\end{tabular}" in tex
    r_names = {p.name for p in (retrieval_run[0] / "tables").iterdir()}
    assert "main_recall@10.md" in r_names and "efficiency.md" not in r_names


def test_config_hash_is_stable_and_order_free() -> None:
    a = {"x": 1, "y": {"b": [1, 2], "a": "s"}}
    b = {"y": {"a": "s", "b": [1, 2]}, "x": 1}
    assert config_hash(a) == config_hash(b)
    assert config_hash(a) != config_hash({**a, "x": 2})


def test_writers_are_deterministic(tmp_path: Path) -> None:
    df = pd.DataFrame({
        "sample_id": ["s", "s"], "qa_index": [0, 1], "category": [4, 5],
        "question": ["q0", "q1"], "gold": ["a", None], "adversarial_answer": [None, "x"],
        "evidence": [["D1:1"], []], "prediction": [None, None], "retrieved": [["D1:1", "S:0"], []],
        "retrieved_turns": [["D1:1"], []],
        "c_ret": [0.5, 0.1], "gate_score": [0.5, 0.1], "gated": [False, True],
        "context_tokens": [3, 0],
        "prompt_tokens": [0, 0], "completion_tokens": [0, 0], "latency_s": [0.0, 0.0],
        "recall@10": [1.0, None], "recall@5": [1.0, None], "zeta": [1.0, 2.0],
    })
    write_predictions(tmp_path / "a.parquet", df)
    write_predictions(tmp_path / "b.parquet", df.sample(frac=1, axis=1, random_state=0))
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert predictions_table(df).schema.names[-3:] == ["recall@5", "recall@10", "zeta"]
    assert predictions_table(df).schema.field("prediction").type == pa.string()
    with pytest.raises(ValueError, match="lacks columns"):
        write_predictions(tmp_path / "c.parquet", df.drop(columns=["gated"]))
    write_json(tmp_path / "a.json", {"b": float("nan"), "a": (1, 2)})
    write_json(tmp_path / "b.json", {"a": [1, 2], "b": None})
    assert (tmp_path / "a.json").read_text() == (tmp_path / "b.json").read_text()
    assert json.loads((tmp_path / "a.json").read_text()) == {"a": [1, 2], "b": None}


def test_paper_rows_only_beside_locomo_runs() -> None:
    """The paper's Table 1 and efficiency rows are LoCoMo figures: a REALTALK run's tables (its
    categories 1-3, no unanswerable class) carry none of them."""
    from synapse_pt.eval.reports.report import run_tables

    def metrics(answerable, unanswerable):
        f1 = {"multi-hop": 0.5, "temporal": 0.4, "open-domain": 0.3, "single-hop": 0.2,
              "mean_cat_1_4": 0.35, "mean_q_1_4": 0.35, "overall": 0.35,
              "n": {"overall": 4, "mean_q_1_4": 4}}
        return {"identity": {"answerable_categories": list(answerable),
                             "unanswerable_category": unanswerable},
                "metrics": {"f1_official": f1},
                "usage": {"tokens_per_query": 100.0, "latency_s_per_query": 1.0,
                          "cost_per_1k_queries": 0.0}}

    names = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
    locomo = run_tables({"run": metrics((1, 2, 3, 4), 5)}, names)
    realtalk = run_tables({"run": metrics((1, 2, 3), None)}, names)
    assert any(str(i).startswith("paper: ") for i in locomo["efficiency"].index)
    assert any(str(i).startswith("paper: ") for i in locomo["main_f1_official"].index)
    assert not any(str(i).startswith("paper: ") for t in realtalk.values() for i in t.index)


def test_prompt_hashes_name_each_prompt_by_its_module_path() -> None:
    """One key for every prompt text of every prompt module, named by the module's path in the
    package: GAAMA's and Membox's modules share file names (llm_build, answer), so a key by file
    name alone would let one system's prompt hide another's."""
    import hashlib
    import importlib

    from synapse_pt.eval.records.outputs import prompt_hashes, prompt_modules

    hashes = prompt_hashes()
    expected = {}
    for name in prompt_modules():
        for attr, value in vars(importlib.import_module(name)).items():
            if attr.isupper() and not attr.startswith("_") and isinstance(value, str) and (
                    attr.endswith(("PROMPT", "TEMPLATE", "INSTRUCTION", "EVIDENCE", "REPLY"))):
                expected[f"{name[len('synapse_pt.'):]}.{attr}"] = hashlib.sha256(
                    value.encode()).hexdigest()[:12]
    assert expected and all(hashes[k] == v for k, v in expected.items())
    assert "memory.gaama.llm_build.FACT_PROMPT" in hashes
    assert "memory.membox.llm_build.BOX_PROMPT" in hashes
    assert "eval.qa.prompts.SYSTEM_PROMPT" in hashes
