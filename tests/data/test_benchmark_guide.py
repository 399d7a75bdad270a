"""docs/adding_a_benchmark.md: its example module and config, exactly as written, load the guide's
file into the records worked out by hand and run through ``synapse_pt.commands.run`` like any
benchmark."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)

from synapse_pt.data import DataFormatError
from synapse_pt.data.benchmark import benchmark
from synapse_pt.data.resolve import build_dataset, dataset_categories

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "adding_a_benchmark.md"
#: where the guide tells a reader to put the module (its YAML's format names it)
MODULE = "synapse_pt.data.minichat"


def guide_block(language: str) -> str:
    text = GUIDE.read_text()
    example = text[text.index("## The example"):]
    return re.search(rf"```{language}\n(.*?)```", example, flags=re.S).group(1)


@pytest.fixture
def minichat(tmp_path, monkeypatch) -> Path:
    """The guide's module importable where ``format: minichat`` looks; the guide's data file."""
    module = types.ModuleType(MODULE)
    exec(compile(guide_block("python"), str(GUIDE), "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, MODULE, module)
    folder = tmp_path / "configs" / "dataset"
    folder.mkdir(parents=True)
    (folder / "minichat.yaml").write_text(guide_block("yaml"))
    data = tmp_path / "chats.json"
    data.write_text(guide_block("json"))
    return data


def test_the_declaration_is_found_by_its_format(minichat):
    assert benchmark("minichat") is sys.modules[MODULE].BENCHMARK
    assert dataset_categories({"format": "minichat"}) == {1: "single-hop", 2: "recent"}
    dataset = build_dataset({"name": "minichat", "format": "minichat", "path": str(minichat)})
    (conv,) = dataset.conversations
    assert [t.dia_id for t in conv.turns()] == ["D1:1", "D1:2", "D1:3"]
    assert [(t.speaker, t.timestamp.second) for t in conv.turns()] == [
        ("Ann", 0), ("Bob", 0), ("Ann", 0)] and list(conv.turns())[1].timestamp.minute == 1
    assert [(q.category, q.evidence, q.answer) for q in conv.questions] == [
        (1, ("D1:1",), "Rex"), (2, ("D1:3",), "running shoes")]
    assert dataset.upstream == "no_manifest"


def test_a_category_outside_the_declaration_is_named(minichat, tmp_path):
    chats = json.loads(minichat.read_text())
    chats[0]["questions"][1]["category"] = 7
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(chats))
    with pytest.raises(DataFormatError, match=r"questions\[1\].*category"):
        build_dataset({"name": "minichat", "format": "minichat", "path": str(bad)})


def test_the_guide_config_runs(minichat, tmp_path):
    from synapse_pt.commands.estimate import estimate
    from synapse_pt.commands.run import run

    searchpath = f"hydra.searchpath=[file://{tmp_path / 'configs'}]"
    common = ("dataset=minichat", searchpath, f"dataset.path={minichat}", "memory=bm25",
              "embedder=hashing", "logger=none", f"paths.cache_dir={tmp_path / 'cache'}")
    metrics = run(make_cfg(*common, output_dir=str(tmp_path / "run")))
    predictions = pd.read_parquet(tmp_path / "run" / "predictions.parquet")
    assert predictions["category"].tolist() == [1, 2]
    assert [r[0] for r in predictions["retrieved"]] == ["D1:1", "D1:3"]  # worked by hand
    recall = metrics["metrics"]["recall@10"]
    assert recall["mean_q_1_2"] == 1.0 and recall["n"]["single-hop"] == recall["n"]["recent"] == 1
    table, _ = estimate(make_cfg(*common, "llm=openai", "eval=qa"))  # the cost, beforehand
    assert table.loc["answers", "prompt_tokens"] > 0
