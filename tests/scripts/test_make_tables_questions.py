"""scripts/make_tables.py over CLI runs (issue 51): runs scored on different questions are
refused in one line naming each run's count; rows are labelled by system and setting."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scripts_loader import load_script  # tests/ is on sys.path (rootdir conftest)

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "synapse_pt" / "data" / "sample" / "sample_conversation.json"


def load_make_tables():
    return load_script("make_tables")


def cli_run(folder: Path, cache: Path, *overrides: str) -> None:
    command = [sys.executable, "-m", "synapse_pt.run", "dataset=sample", "embedder=hashing",
               "device=cpu", "logger=none", f"paths.cache_dir={cache}", *overrides,
               f"hydra.run.dir={folder}"]
    proc = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TQDM_DISABLE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]


def sample_question_set(max_questions: int | None = None) -> str:
    """The sha256 (16 hex digits) of the sample's question keys, read from the raw file."""
    keys = [f"{s['sample_id']}/{i}" for s in json.loads(SAMPLE.read_text())
            for i in range(len(s["qa"][:max_questions]))]
    return hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()[:16]


def row_labels(markdown: str) -> list[str]:
    rows = [line for line in markdown.splitlines() if line.startswith("|")][2:]
    return [row.split("|")[1].strip() for row in rows]


@pytest.mark.slow
def test_rows_by_system_and_setting_and_one_question_set(tmp_path: Path, capsys) -> None:
    make_tables = load_make_tables()
    cache = tmp_path / "cache"
    cli_run(tmp_path / "runs" / "a", cache, "memory=bm25", "memory.k=5")
    cli_run(tmp_path / "runs" / "b", cache, "memory=synapse")
    assert make_tables.main([str(tmp_path / "runs"), "--out", str(tmp_path / "t1")]) == 0
    main = (tmp_path / "t1" / "main_recall@10.md").read_text()
    assert row_labels(main) == ["bm25 (memory.k=5)", "synapse"]
    runs_md = (tmp_path / "t1" / "runs.md").read_text()
    assert runs_md.count(sample_question_set()) == 2
    metrics = json.loads((tmp_path / "runs" / "a" / "metrics.json").read_text())
    assert metrics["identity"]["dataset"]["question_set"] == sample_question_set()

    # the first five questions: another question set, refused in one line naming both counts
    cli_run(tmp_path / "runs" / "c", cache, "memory=bm25", "dataset.max_questions=5")
    capsys.readouterr()
    assert make_tables.main([str(tmp_path / "runs"), "--out", str(tmp_path / "t2")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "refused" in line]
    assert len(err) == 1 and "different questions" in err[0]
    assert f"bm25 (memory.k=5): 14 questions, set {sample_question_set()}" in err[0]
    assert f"bm25 (dataset.max_questions=5): 5 questions, set {sample_question_set(5)}" in err[0]
    assert not (tmp_path / "t2").exists()
