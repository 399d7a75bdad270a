"""Reusing a run folder (issue 31, defect 1): settings that cannot change results (spending caps,
concurrency, timeouts, retries, the tracker) are recorded but not compared; a folder that holds
only a failed start's ``config.yaml`` accepts the corrected command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)

from synapse_pt.commands.run import run
from synapse_pt.eval.records.outputs import result_neutral_changes, without_result_neutral
from synapse_pt.eval.records.run_folder import OutputDirInUse, check_output_dir

FAST = ("dataset=sample", "embedder=hashing", "smoke=true", "logger=none", "device=cpu")


def config_text(*overrides: str, output_dir: Path) -> str:
    return OmegaConf.to_yaml(make_cfg(*overrides, output_dir=str(output_dir)), resolve=True)


def finished_folder(folder: Path, text: str) -> None:
    """A folder as a finished (or budget-stopped, then resumed) run leaves it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(text)
    (folder / "metrics.json").write_text("{}\n")


PAPER = ("eval=qa", "llm=openai", "dataset=sample", "memory=bm25")


def test_a_higher_budget_cap_resumes_in_the_same_folder(tmp_path: Path) -> None:
    """The budget stop's advice ("raise it to finish") works: only the cap differs."""
    finished_folder(tmp_path, config_text(*PAPER, "llm.max_cost_usd=0.0008", output_dir=tmp_path))
    check_output_dir(tmp_path, config_text(*PAPER, "llm.max_cost_usd=0.05", output_dir=tmp_path))


@pytest.mark.parametrize("override", [
    "llm.backend.max_concurrency=2", "llm.backend.timeout_s=5", "llm.backend.max_retries=0",
    "llm.backend.backoff_s=0.1", "logger=wandb", "tags=[other]", "overwrite=false"])
def test_each_result_neutral_setting_is_not_compared(tmp_path: Path, override: str) -> None:
    finished_folder(tmp_path, config_text(*PAPER, output_dir=tmp_path))
    check_output_dir(tmp_path, config_text(*PAPER, override, output_dir=tmp_path))


@pytest.mark.parametrize(("override", "key"), [
    ("llm.backend.model=gpt-4o", "llm"), ("eval.max_answer_tokens=64", "eval"),
    ("memory=vector_rag", "memory"), ("seed=1", "seed")])
def test_a_setting_that_changes_results_is_still_refused(tmp_path: Path, override: str,
                                                         key: str) -> None:
    finished_folder(tmp_path, config_text(*PAPER, output_dir=tmp_path))
    with pytest.raises(OutputDirInUse, match=rf"differs in \[.*'{key}'"):
        check_output_dir(tmp_path, config_text(*PAPER, override, output_dir=tmp_path))


def test_neutral_changes_are_named_with_both_values() -> None:
    before = {"llm": {"max_cost_usd": 0.0008, "backend": {"model": "m", "timeout_s": 60.0}}}
    after = {"llm": {"max_cost_usd": 0.05, "backend": {"model": "m", "timeout_s": 60.0}},
             "logger": {"name": "none"}}
    assert result_neutral_changes(before, after) == {"llm.max_cost_usd": (0.0008, 0.05),
                                                     "logger": (None, {"name": "none"})}
    assert without_result_neutral(after) == {"llm": {"backend": {"model": "m"}}}
    assert "max_cost_usd" in after["llm"]  # the input is left as it was


def test_a_failed_start_folder_accepts_the_corrected_command(tmp_path: Path) -> None:
    """A run that failed before writing outputs (a missing data file) leaves nothing in its folder
    (its config.yaml is written with the outputs, issue 51); a folder that holds only a
    ``config.yaml`` (left by an earlier version's failed start) accepts the corrected command."""
    bad = make_cfg(*FAST, "memory=bm25", f"paths.cache_dir={tmp_path / 'cache'}",
                   f"dataset.path={tmp_path / 'missing.json'}", output_dir=str(tmp_path / "run"))
    with pytest.raises(Exception, match="missing.json"):
        run(bad)
    assert list((tmp_path / "run").iterdir()) == []
    (tmp_path / "run" / "config.yaml").write_text(OmegaConf.to_yaml(bad, resolve=True))
    good = make_cfg(*FAST, "memory=bm25", f"paths.cache_dir={tmp_path / 'cache'}",
                    output_dir=str(tmp_path / "run"))
    metrics = run(good)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text()) == json.loads(
        json.dumps(metrics, default=str))
    # now the folder holds outputs: another configuration is refused again
    other = make_cfg(*FAST, "memory=vector_rag", f"paths.cache_dir={tmp_path / 'cache'}",
                     output_dir=str(tmp_path / "run"))
    with pytest.raises(OutputDirInUse, match=r"differs in \['memory'\]"):
        run(other)


REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_an_unwritable_run_folder_is_one_line_naming_it(tmp_path: Path) -> None:
    """Issue 31, defect 4: a run folder that cannot be made (here under a regular file; a
    read-only folder fails the same way for a non-root user) ends in one line naming the folder
    and its config key, exit status 2, no traceback; a writable one runs."""
    import subprocess
    import sys

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    base = [sys.executable, "-m", "synapse_pt.run", *FAST, "memory=bm25",
            f"paths.cache_dir={tmp_path / 'cache'}"]
    proc = subprocess.run([*base, f"hydra.run.dir={blocker / 'run'}"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip() == (
        f"[synapse_pt] error: hydra.run.dir={blocker / 'run'}: the run's folder cannot be "
        "written (NotADirectoryError: Not a directory); choose a writable folder with "
        "hydra.run.dir=...")
    ok = subprocess.run([*base, f"hydra.run.dir={tmp_path / 'run'}"], cwd=REPO_ROOT,
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert not list((tmp_path / "run").glob(".synapse_pt-write-probe-*"))  # the probe is removed


def test_a_read_only_folder_is_named_with_the_cause(tmp_path: Path, monkeypatch) -> None:
    """The permission case, which root (these tests' user in CI containers) cannot reproduce with
    chmod: the probe write fails as it would on a read-only folder."""
    from synapse_pt.commands.hydra_app import OutputDirNotWritable, ensure_writable

    def refuse(self: Path, *args: object, **kwargs: object) -> int:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "write_text", refuse)
    with pytest.raises(OutputDirNotWritable) as err:
        ensure_writable(tmp_path / "ro", "hydra.run.dir")
    assert str(err.value) == (f"hydra.run.dir={tmp_path / 'ro'}: the run's folder cannot be "
                              "written (PermissionError: Permission denied); choose a writable "
                              "folder with hydra.run.dir=...")


def test_the_paths_of_a_config_are_not_compared(tmp_path: Path) -> None:
    """Issue 58: a moved folder, another cache, another checkout, the data file at another path
    are the same run; ``embedder=mpnet``, whose weights are in the cache
    (``${paths.cache_dir}/models/...``), too. Another model folder is another run."""
    finished_folder(tmp_path, config_text(*PAPER, "embedder=mpnet",
                                          f"paths.cache_dir={tmp_path / 'c1'}",
                                          output_dir=tmp_path / "elsewhere"))
    check_output_dir(tmp_path, config_text(
        *PAPER, "embedder=mpnet", f"paths.cache_dir={tmp_path / 'c2'}",
        f"paths.root_dir={tmp_path / 'checkout'}", f"dataset.path={tmp_path / 'copy.json'}",
        output_dir=tmp_path))
    with pytest.raises(OutputDirInUse, match=r"differs in \['embedder'\]"):
        check_output_dir(tmp_path, config_text(*PAPER, "embedder=mpnet",
                                               f"embedder.model={tmp_path / 'other'}",
                                               output_dir=tmp_path))


@pytest.mark.parametrize("text", ["a: [1,\n  b", "- just\n- a list\n"])
def test_a_config_yaml_that_cannot_be_read_is_named(tmp_path: Path, text: str) -> None:
    """Before: a YAML parser's traceback (the CLI's three-line error without the file)."""
    finished_folder(tmp_path, text)
    with pytest.raises(OutputDirInUse, match=rf"^{tmp_path / 'config.yaml'}: not a"):
        check_output_dir(tmp_path, config_text(*PAPER, output_dir=tmp_path))
