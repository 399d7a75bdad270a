"""With no LoCoMo file, only a single run may fall back to the shipped sample (SPEC §3 data)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from synapse_pt.data import DatasetNotFoundError
from synapse_pt.data.resolve import build_dataset

REPO = Path(__file__).resolve().parents[1]


def nowhere(tmp_path: Path) -> dict:
    """A dataset config that finds no LoCoMo file: no path, no candidates, empty cache, no
    download."""
    return OmegaConf.create({"name": "locomo10", "path": None, "candidates": [],
                             "cache_dir": str(tmp_path / "cache"), "url": None, "sha256": None,
                             "allow_download": False, "allow_sample": True,
                             "turn_offset_seconds": 60})


def test_single_run_falls_back_and_says_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SYNAPSE_DATA", raising=False)
    dataset = build_dataset(nowhere(tmp_path))
    assert dataset.name == "sample" and dataset.num_questions == 14
    assert any("fell back" in n for n in dataset.notes)


@pytest.mark.parametrize("what", ["a multirun", "a study", "held-out tuning"])
def test_multiruns_studies_and_tuning_refuse(tmp_path: Path, monkeypatch, what: str) -> None:
    monkeypatch.delenv("SYNAPSE_DATA", raising=False)
    with pytest.raises(DatasetNotFoundError, match=f"{what} never falls back.*dataset=sample"):
        build_dataset(nowhere(tmp_path), refuse_fallback=what)


def test_explicit_sample_is_allowed_everywhere(tmp_path: Path) -> None:
    cfg = nowhere(tmp_path)
    cfg.path = "sample"
    assert build_dataset(cfg, refuse_fallback="a multirun").num_questions == 14


@pytest.mark.slow
def test_a_hydra_multirun_refuses_the_fallback(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SYNAPSE_DATA"}
    proc = subprocess.run(
        [sys.executable, "-m", "synapse_pt.run", "-m", "memory=bm25,vector_rag",
         "embedder=hashing", "dataset.candidates=[]", "dataset.allow_download=false",
         f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "a multirun never falls back" in proc.stderr
