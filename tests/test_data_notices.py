"""What a run says of its data (issue 51): the sample notice for the shipped sample only; a LoCoMo
file that is not the release is named as changed, in one line saying what differs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from synapse_pt.eval.reports.console import SAMPLE_WARNING

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_on(data: Path, tmp_path: Path) -> str:
    """A bm25 retrieval run on the first conversation of ``data`` (unpinned); its stdout."""
    command = [sys.executable, "-m", "synapse_pt.run", "memory=bm25", "embedder=hashing",
               "device=cpu", "logger=none", f"dataset.path={data}", "dataset.sha256=null",
               "dataset.max_conversations=1", "dataset.allow_sample=false",
               f"paths.cache_dir={tmp_path / 'cache'}",
               f"hydra.run.dir={tmp_path / ('run_' + data.stem)}"]
    proc = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TQDM_DISABLE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.locomo
def test_a_changed_locomo_file_is_named_as_changed_not_as_the_sample(locomo_path, tmp_path):
    samples = json.loads(locomo_path.read_text())
    first = samples[0]["sample_id"]
    missing = tmp_path / "missing.json"  # the first conversation left out
    missing.write_text(json.dumps(samples[1:]))
    edited = tmp_path / "edited.json"  # one answer edited
    samples[0]["qa"][0]["answer"] = "something else"
    edited.write_text(json.dumps(samples))
    for data, what in ((missing, f"conversations missing: {first}"),
                       (edited, f"content edited: {first} (qa)")):
        out = run_on(data, tmp_path)
        assert SAMPLE_WARNING not in out and "SAMPLE DATA" not in out
        lines = [line for line in out.splitlines() if line.startswith("CHANGED DATA:")]
        assert len(lines) == 1, out[-3000:]
        assert str(data) in lines[0] and "manifests/locomo10.json" in lines[0]
        assert lines[0].endswith(what)
        assert "[CHANGED DATA: not the locomo10 release]" in out  # the table's title


@pytest.mark.locomo
def test_the_release_and_the_sample_get_their_own_notices(locomo_path, tmp_path):
    out = run_on(locomo_path, tmp_path)
    assert "CHANGED DATA" not in out and SAMPLE_WARNING not in out
    sample = REPO_ROOT / "synapse_pt" / "data" / "sample" / "sample_conversation.json"
    out = run_on(sample, tmp_path)
    assert SAMPLE_WARNING in out and "CHANGED DATA" not in out
