"""experiments/misses_found.py on two hand-made runs: counts worked out by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from scripts_loader import load_script  # tests/ is on sys.path (rootdir conftest)

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "misses_found.py"


def load():
    return load_script("misses_found", "experiments")


def frame(retrieved: list[list[str]]) -> pd.DataFrame:
    # q0 multi-hop (cat 1), evidence D1:1, D1:2; q1 temporal (cat 2), evidence D1:3;
    # q2 unanswerable (cat 5, left out); q3 single-hop (cat 4) without evidence (left out)
    return pd.DataFrame({
        "sample_id": ["c1", "c1", "c1", "c2"], "qa_index": [0, 1, 2, 0],
        "category": [1, 2, 5, 4],
        "evidence": [["D1:1", "D1:2"], ["D1:3"], ["D1:4"], []],
        "retrieved_turns": retrieved,
    })


def test_counts_by_hand():
    m = load()
    base = frame([["D1:9", "D1:1", "D1:2"], ["D1:3", "D1:8"], ["D1:5"], ["D1:1"]])
    other = frame([["D1:2", "D1:7", "D1:1"], ["D1:8", "D1:9"], ["D1:4"], []])
    # k = 2: base misses D1:2 (q0); other misses D1:1 (q0) and D1:3 (q1)
    table = m.misses_found(base, other, k=2)
    assert table.loc[1].tolist()[:4] == [1, 1, 1, 1]   # other finds D1:2; base finds D1:1
    assert table.loc[2].tolist()[:4] == [0, 0, 1, 1]   # base finds D1:3
    assert table.loc["all"].tolist() == [1, 1, 2, 2, 1.0]
    # k = 3: base misses nothing; other misses D1:3 only
    assert m.misses_found(base, other, k=3).loc["all"].tolist()[:4] == [0, 0, 1, 1]


def test_refuses_different_questions():
    m = load()
    base = frame([["D1:1"], ["D1:3"], [], []])
    other = base.copy()
    other.loc[0, "qa_index"] = 7
    with pytest.raises(ValueError, match="same answerable questions"):
        m.misses_found(base, other, k=1)


def test_command_line(tmp_path):
    for name, ret in [("a", [["D1:9", "D1:1"], ["D1:8"], [], []]),
                      ("b", [["D1:2", "D1:1"], ["D1:3"], [], []])]:
        (tmp_path / name).mkdir()
        frame(ret).to_parquet(tmp_path / name / "predictions.parquet")
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "a"), str(tmp_path / "b"),
                          "--k", "2"], capture_output=True, text=True, check=True).stdout
    # a misses D1:2 and D1:3, b finds both
    assert out.strip().splitlines()[-1] == "share_of_base_misses_found_at_2: 1.000"
