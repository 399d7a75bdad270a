"""Failures a hostile new user met as tracebacks (issue 51, item 8): a conversation whose sessions
are all empty, a memory parameter of the wrong type, an unknown ``dataset.sample_ids`` entry, a
truncated embedding cache. Each is now an error of ``synapse_pt.commands.run.USER_FACING_ERRORS``
(one line on the command line) naming the file, the conversation or the key."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)

from synapse_pt.commands.run import USER_FACING_ERRORS, run
from synapse_pt.data import sample_path

REPO_ROOT = Path(__file__).resolve().parents[1]
FAST = ("dataset=sample", "embedder=hashing", "smoke=true", "logger=none", "device=cpu")


def empty_sessions(tmp_path: Path) -> Path:
    """The shipped sample with every session emptied (its dates kept)."""
    samples = json.loads(sample_path().read_text())
    conv = samples[0]["conversation"]
    for key in [k for k in conv if k.startswith("session_") and not k.endswith("_date_time")]:
        conv[key] = []
    path = tmp_path / "empty.json"
    path.write_text(json.dumps(samples))
    return path


def failure(cfg) -> BaseException:
    with pytest.raises(USER_FACING_ERRORS) as info:
        run(cfg)
    return info.value


@pytest.mark.parametrize("memory", ["synapse", "bm25"])
def test_a_conversation_without_turns_names_the_file_and_conversation(tmp_path: Path,
                                                                      memory: str) -> None:
    """Before: ``IndexError: amax(): Expected reduction dim 0 to have non-zero size`` (SYNAPSE),
    ``RuntimeError: BM25Memory.retrieve called before ingest`` (bm25)."""
    data = empty_sessions(tmp_path)
    err = failure(make_cfg("embedder=hashing", "logger=none", "device=cpu", f"memory={memory}",
                           f"dataset.path={data}", "dataset.sha256=null",
                           f"paths.cache_dir={tmp_path / 'cache'}",
                           output_dir=str(tmp_path / "run")))
    n_sessions = sum(1 for k in json.loads(data.read_text())[0]["conversation"]
                     if k.startswith("session_") and not k.endswith("_date_time"))
    assert str(err) == (f"{data}: conversation sample-1: sessions: no turns in any of its "
                        f"{n_sessions} sessions: nothing to ingest")


def test_a_memory_parameter_of_the_wrong_type_names_the_key(tmp_path: Path) -> None:
    """Before: hydra's ``InstantiationException`` around ``TypeError: new(): invalid data type
    'str'``."""
    err = failure(make_cfg(*FAST, "memory.params.beta=abc",
                           f"paths.cache_dir={tmp_path / 'cache'}",
                           output_dir=str(tmp_path / "run")))
    assert str(err) == "memory.params.beta must be a number, got 'abc'"


def test_an_unknown_sample_id_is_named_with_the_known_ones(tmp_path: Path) -> None:
    """Before: ``KeyError`` (a traceback) naming the id but not the ones the file has."""
    ids = [s["sample_id"] for s in json.loads(sample_path().read_text())]
    err = failure(make_cfg(*FAST, "dataset.sample_ids=[conv-999]",
                           f"paths.cache_dir={tmp_path / 'cache'}",
                           output_dir=str(tmp_path / "run")))
    assert str(err) == (f"dataset.sample_ids: {sample_path()} has no conversation "
                        f"['conv-999']; its sample ids: {ids}")


def test_a_truncated_embedding_cache_is_named_unwrapped(tmp_path: Path) -> None:
    """Before: the right message inside hydra's ``InstantiationException`` ("Error in call to
    target ..."), which the command line showed as a traceback."""
    cache = tmp_path / "cache" / "embeddings" / "embeddings.sqlite"
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"SQLite format 3\x00" + b"\x10\x00" * 20)  # a header, then nothing
    err = failure(make_cfg("dataset=sample", "smoke=true", "logger=none", "device=cpu",
                           "embedder=minilm", f"paths.cache_dir={tmp_path / 'cache'}",
                           output_dir=str(tmp_path / "run")))
    assert str(err).startswith(f"{cache}: this cache file is corrupt")
    assert "Error in call to target" not in str(err)


def test_a_folder_made_read_only_mid_run_is_named_not_its_lock(tmp_path: Path, monkeypatch,
                                                              caplog) -> None:
    """A folder made read-only while the run evaluates (root, who runs these tests, writes through
    ``chmod``: the failures a read-only folder gives are injected instead: the outputs' first
    write and the lock's removal raise ``PermissionError``). Before: the lock's ``PermissionError``
    replaced the run's own, blaming ``run.lock``; now one error names the folder and the file that
    could not be written, and the lock left behind is logged."""
    import errno
    import os

    import synapse_pt.eval.records.outputs as outputs

    folder = tmp_path / "run"

    def read_only(path: Path, *args, **kwargs) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    real_unlink = Path.unlink

    def unlink(self: Path, *args, **kwargs) -> None:
        if self.parent == folder:
            read_only(self)
        real_unlink(self, *args, **kwargs)

    monkeypatch.setattr(outputs, "write_predictions", read_only)
    monkeypatch.setattr(Path, "unlink", unlink)
    err = failure(make_cfg(*FAST, "memory=bm25", f"paths.cache_dir={tmp_path / 'cache'}",
                           output_dir=str(folder)))
    assert str(err) == (
        f"{folder}: the run's outputs could not be written ({folder}/.staging/"
        "predictions.parquet: Permission denied); the folder's earlier outputs are left as they "
        "were, the caches keep what this run computed; make room or make it writable and rerun, "
        "or choose another hydra.run.dir")
    assert f"{folder}/run.lock: could not remove the lock file" in caplog.text


@pytest.mark.slow
def test_the_command_line_prints_one_line(tmp_path: Path) -> None:
    """The wrong-typed parameter through ``python -m synapse_pt.run``: one line, exit status 1,
    no traceback (the other cases take the same path: their errors are user-facing)."""
    proc = subprocess.run(
        [sys.executable, "-m", "synapse_pt.run", *FAST, "memory.params.beta=abc",
         f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.strip() == ("[synapse_pt] error: memory.params.beta must be a number, got "
                                   "'abc' (HYDRA_FULL_ERROR=1 shows the traceback)")
