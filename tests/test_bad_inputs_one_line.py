"""Bad inputs a hostile new user tried (issue 42, items 4 and 10): subset sizes, config values, a
BEAM folder missing a file, a data file that is not the configured one, a dataset folder given
to ``python -m synapse_pt.data``, a half-assembled mpnet folder, overrides after ``--out``,
``spend.json`` without an LLM, ``--help`` and the package's license metadata. Each ends in one
clear line naming the setting, the file or the command, or does what the README says."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_fixtures import beam_fixture, realtalk_fixture
from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)

from synapse_pt.common.errors import ConfigError
from synapse_pt.data import DataFormatError
from synapse_pt.data.resolve import build_dataset
from synapse_pt.data.source import sample_path

REPO_ROOT = Path(__file__).resolve().parents[1]
FAST = ("dataset=sample", "embedder=hashing", "logger=none", "device=cpu", "memory=bm25")


def cli(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "synapse_pt.run", *overrides,
         f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(("key", "value"), [
    ("max_conversations", -2), ("max_conversations", 0), ("max_questions", -5),
    ("max_questions", 0), ("max_questions", True)])
def test_subset_sizes_must_be_positive(key: str, value: object) -> None:
    """On main ``-2`` kept all but the last two conversations, ``-5`` dropped the last five
    questions of each, and ``0`` ran on nothing; now each is refused, naming the setting."""
    cfg = {"name": "sample", "path": "sample", key: value}
    with pytest.raises(ConfigError, match=rf"^dataset\.{key} must be an integer >= 1 \(null: "
                                          rf"all\), got {value!r}$"):
        build_dataset(cfg)
    if not isinstance(value, bool):  # smoke runs cap the sizes (int(True) is 1), then check
        with pytest.raises(ConfigError, match=rf"dataset\.{key}"):
            build_dataset(cfg, smoke=True)


def test_positive_subset_sizes_still_subset() -> None:
    full = build_dataset({"name": "sample", "path": "sample"})
    small = build_dataset({"name": "sample", "path": "sample", "max_conversations": 1,
                           "max_questions": 3})
    assert len(small) == 1 and small.num_questions == 3 < full.num_questions


@pytest.mark.parametrize(("override", "line"), [
    ("dataset.max_conversations=-2",
     "dataset.max_conversations must be an integer >= 1 (null: all), got -2"),
    ("memory.k=-3", "memory.k must be an integer >= 1, got -3"),
    ("eval.recall_ks=[0]", "eval.recall_ks must be integers >= 1, got [0]"),
])
def test_a_config_error_is_one_line(tmp_path: Path, override: str, line: str) -> None:
    """Config validation raises :class:`ConfigError` (a named user-facing type; hydra's
    instantiation wrapper is removed): one line, exit status 1, no traceback. On main: a
    traceback."""
    proc = cli(tmp_path, *FAST, override)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.strip() == (f"[synapse_pt] error: {line} (HYDRA_FULL_ERROR=1 shows the "
                                   "traceback)")


def test_a_beam_folder_missing_a_file_names_it(tmp_path: Path) -> None:
    folder = beam_fixture(tmp_path)
    missing = folder / "1" / "probing_questions" / "probing_questions.json"
    missing.unlink()
    with pytest.raises(DataFormatError, match=rf"^{missing}: file: <top level>: missing "
                                              r"\(every BEAM conversation folder holds "
                                              r"chat.json and probing_questions/"):
        build_dataset({"name": "beam_100k", "format": "beam", "path": str(folder)})


def test_a_missing_beam_file_is_one_line_on_the_cli(tmp_path: Path) -> None:
    folder = beam_fixture(tmp_path)
    (folder / "1" / "chat.json").unlink()
    proc = cli(tmp_path, "dataset=beam_100k", f"dataset.path={folder}", "embedder=hashing",
               "logger=none", "device=cpu", "memory=bm25")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.strip() == (
        f"[synapse_pt] error: {folder / '1' / 'chat.json'}: file: <top level>: missing (every "
        "BEAM conversation folder holds chat.json and probing_questions/probing_questions.json) "
        "(HYDRA_FULL_ERROR=1 shows the traceback)")


def test_dataset_sha256_is_checked_against_a_local_file(tmp_path: Path) -> None:
    """``dataset.sha256`` was compared with a download only; a local file of other bytes ran
    under the configured hash. Now the error names the file and both hashes."""
    other = tmp_path / "locomo10.json"
    shutil.copy(sample_path(), other)
    actual = hashlib.sha256(other.read_bytes()).hexdigest()
    expected = "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"
    cfg = {"name": "locomo10", "path": str(other), "sha256": expected, "allow_download": False}
    with pytest.raises(DataFormatError, match=rf"^{other}: file: sha256: {actual}, not "
                                              rf"dataset.sha256={expected} \(another file"):
        build_dataset(cfg)
    assert len(build_dataset({**cfg, "sha256": None})) == 1  # null: any file, as it says
    assert len(build_dataset({**cfg, "sha256": actual})) == 1


@pytest.mark.locomo
def test_another_serialisation_of_the_release_passes_the_hash_check(locomo_path, tmp_path):
    """The same content in other bytes (re-indented JSON) is the release: accepted, noted."""
    from synapse_pt.data.source import LOCOMO_SHA256

    copy = tmp_path / "locomo10.json"
    copy.write_text(json.dumps(json.loads(locomo_path.read_text()), indent=1))
    assert hashlib.sha256(copy.read_bytes()).hexdigest() != LOCOMO_SHA256
    dataset = build_dataset({"name": "locomo10", "path": str(copy), "sha256": LOCOMO_SHA256,
                             "allow_download": False})
    assert dataset.upstream == "same_content" and len(dataset) == 10
    assert any(str(copy) in note for note in dataset.notes)


def test_the_configured_locomo_hash_is_the_upstream_files() -> None:
    from synapse_pt.data.source import LOCOMO_SHA256

    assert make_cfg("dataset=locomo10").dataset.sha256 == LOCOMO_SHA256


def data_cli(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "synapse_pt.data", str(path)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)


def test_the_data_summary_reads_realtalk_and_beam_folders(tmp_path: Path) -> None:
    """``python -m synapse_pt.data <folder>`` said "no such file" for a folder that exists."""
    realtalk = realtalk_fixture(tmp_path / "rt").parent
    proc = data_cli(realtalk)
    assert proc.returncode == 0, proc.stderr
    assert f"file:          {realtalk}" in proc.stdout and "conversations: 1" in proc.stdout
    assert "(multi-hop)" in proc.stdout  # REALTALK's own category names
    beam = beam_fixture(tmp_path / "beam")
    proc = data_cli(beam)
    assert proc.returncode == 0, proc.stderr
    assert "(abstention)" in proc.stdout  # BEAM's abilities
    proc = data_cli(beam.parent)  # the folder of scales
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: {beam.parent}: a folder with no REALTALK conversation (Chat_*.json) and no BEAM "
        f"conversation (<n>/chat.json); it holds the BEAM scales ['100K']: give one of them, "
        f"e.g. {beam}")


def test_a_half_assembled_mpnet_folder_names_make_mpnet(tmp_path: Path) -> None:
    from synapse_pt.models.assemble import ModelNotAssembled
    from synapse_pt.models.embedder import HFEmbedder

    folder = tmp_path / "models" / "all-mpnet-base-v2"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["MPNetForMaskedLM"]}))
    with pytest.raises(ModelNotAssembled, match=r"all-mpnet-base-v2 is only partly assembled at "
                                                rf"{folder}: .*`make mpnet`"):
        HFEmbedder(model=str(folder))


def test_run_study_takes_overrides_after_out(tmp_path: Path, monkeypatch) -> None:
    import synapse_pt.commands.study as study_module

    seen = {}

    def stop(study, out, overrides):
        seen.update(out=out, overrides=list(overrides))
        raise SystemExit(0)

    monkeypatch.setattr(study_module, "run_study", stop)
    monkeypatch.setattr(study_module, "load_study", lambda name: {"path": name})
    with pytest.raises(SystemExit):
        study_module.main(["readings", "memory=bm25", "--out", str(tmp_path), "seed=1"])
    assert seen == {"out": tmp_path, "overrides": ["memory=bm25", "seed=1"]}


def test_spend_json_is_written_without_an_llm(tmp_path: Path) -> None:
    """README: every run writes ``spend.json``; a retrieval run wrote none."""
    from synapse_pt.commands.run import run

    run(make_cfg(*FAST, "smoke=true", f"paths.cache_dir={tmp_path / 'cache'}",
                 output_dir=str(tmp_path / "run")))
    assert json.loads((tmp_path / "run" / "spend.json").read_text()) == {
        "n_responses": 0, "n_cached": 0, "n_paid": 0, "prompt_tokens_paid": 0,
        "completion_tokens_paid": 0, "cost_usd_spent": 0.0, "cost_usd_if_uncached": 0.0,
        "unpriced_models": []}


def test_help_names_every_dataset() -> None:
    proc = subprocess.run([sys.executable, "-m", "synapse_pt.run", "--help"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    header = proc.stdout.split("Config groups")[0]
    for name in ("LoCoMo-10", "REALTALK", "BEAM", "dataset=realtalk", "dataset=beam_100k"):
        assert name in header, name


def test_the_license_is_an_spdx_string() -> None:
    """setuptools deprecates the ``{text = ...}`` table (builds stop after 2027-02-18); the
    string form needs setuptools >= 77 at build time."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"
    assert "setuptools>=77" in project["build-system"]["requires"]
