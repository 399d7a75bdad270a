"""An LLM-free GAAMA / Membox build is named as such wherever its row is read on its own."""

from __future__ import annotations

import json
from pathlib import Path

from synapse_pt.eval.records.collect import load_runs, runs_table
from synapse_pt.eval.records.record import build_label

GAAMA_FREE = {"memory": "gaama", "build": "gaama-llm-free", "llm_free": True}


def test_build_label_names_llm_free_builds_only() -> None:
    assert build_label("gaama_fused", GAAMA_FREE) == "gaama_fused (gaama-llm-free)"
    assert build_label("membox_fused", {"memory": "membox", "build": "membox-llm-free",
                                        "llm_free": True}) == "membox_fused (membox-llm-free)"
    # the LLM build, a memory without builds (SYNAPSE, the baselines) and a label that already
    # says it are left as they are
    assert build_label("gaama", {"build": "gaama-llm", "llm_free": False}) == "gaama"
    assert build_label("paper_main", {"memory": "synapse"}) == "paper_main"
    assert build_label("gaama_llm_free", GAAMA_FREE) == "gaama_llm_free"
    assert build_label("x", None) == "x"


def _write_run(folder: Path, experiment: str, memory: dict) -> None:
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({
        "identity": {"experiment": experiment, "memory": memory, "category_names": {"1": "a"}},
        "metrics": {}}))


def test_loaded_runs_and_provenance_name_the_build(tmp_path: Path) -> None:
    _write_run(tmp_path / "0", "paper_main", {"memory": "synapse"})
    _write_run(tmp_path / "1", "gaama_fused", GAAMA_FREE)
    _write_run(tmp_path / "2", "membox", {"memory": "membox", "build": "membox-llm-free",
                                          "llm_free": True})
    runs, where = load_runs([tmp_path / "0", tmp_path / "1", tmp_path / "2"],
                            baseline="paper_main")
    assert list(runs) == ["paper_main", "gaama_fused (gaama-llm-free)",
                          "membox (membox-llm-free)"]
    table = runs_table(runs, where)
    assert table.loc["gaama_fused (gaama-llm-free)", "build"] == "gaama-llm-free"
    assert bool(table.loc["membox (membox-llm-free)", "llm_free"]) is True
    # a baseline asked for by its experiment name keeps that label
    runs, _ = load_runs([tmp_path / "1"], baseline="gaama_fused")
    assert list(runs) == ["gaama_fused"]


def test_runs_table_lists_the_upstream_files_a_run_sent(tmp_path: Path) -> None:
    folder = tmp_path / "0"
    folder.mkdir()
    (folder / "metrics.json").write_text(json.dumps({"identity": {
        "experiment": "gaama", "memory": {"memory": "gaama"}, "category_names": {"1": "a"},
        "prompt_source": "upstream",
        "upstream_prompts": {"gaama/prompts/answer_from_memory.md": "ab" * 32}},
        "metrics": {}}))
    runs, where = load_runs([folder], baseline="paper_main")
    row = runs_table(runs, where).iloc[0]
    assert row["prompt_source"] == "upstream"
    assert row["upstream_prompts"] == "gaama/prompts/answer_from_memory.md " + "ab" * 6
