"""The package as a user installs it (issue 57): a wheel built from the repo, installed into a
clean environment, run from an empty folder elsewhere.

The wheel is built without build isolation (the set-up environment's setuptools) and installed
into a new virtual environment that sees the set-up environment's packages (torch, hydra, the
bundled models) through a ``.pth`` line, so nothing is downloaded: the environment's own
``synapse_pt`` is the wheel's, not the checkout (asserted). From an empty folder the commands
find their configs and studies inside the package, write their run folders there, and record
the package's version where no git commit is at hand.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import tomllib

REPO_ROOT = Path(__file__).resolve().parents[1]


def sh(*command: str | Path, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SYNAPSE_", "PYTHONPATH"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="offline",
               TQDM_DISABLE="1")
    proc = subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert proc.returncode == 0, f"{command}: {proc.stdout[-1500:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a new environment holding the wheel built from this checkout."""
    tmp = tmp_path_factory.mktemp("installed")
    source = tmp / "source"  # the package's sources, copied: the build leaves the checkout alone
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "synapse_pt", "configs", "studies"):
        if (REPO_ROOT / name).is_dir():
            shutil.copytree(REPO_ROOT / name, source / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(REPO_ROOT / name, source / name)
    sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
       "-w", tmp / "dist", source, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("synapse_pt-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("configs", "studies"):  # every config and study file travels in the wheel
        files = {f"synapse_pt/{folder}/{p.relative_to(REPO_ROOT / folder)}"
                 for p in (REPO_ROOT / folder).rglob("*.yaml")}
        assert files and files <= shipped, sorted(files - shipped)[:5]
    venv = tmp / "venv"
    sh(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp)
    python = venv / "bin" / "python"
    purelib = sh(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                 cwd=tmp).stdout.strip()
    # --target, not --prefix: pip then leaves the set-up environment's own synapse_pt (the
    # checkout's editable install) where it is
    sh(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", purelib, wheel,
       cwd=tmp)
    # the set-up environment's packages (its site folder; its .pth files, the checkout's
    # editable install among them, are not read from there)
    Path(purelib, "_setup_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


@pytest.mark.slow
def test_the_installed_wheel_runs_from_an_empty_folder(installed: Path, tmp_path: Path) -> None:
    where = tmp_path / "elsewhere"
    where.mkdir()
    found = sh(installed, "-c", "import synapse_pt.retrieval.spreading as m, synapse_pt; "
               "print(synapse_pt.__file__)", cwd=where).stdout.strip()
    assert Path(found).is_relative_to(installed.parents[1]), found  # the wheel, not the checkout
    sh(installed, "-m", "synapse_pt.run", "dataset=sample", "memory=bm25", cwd=where)
    sh(installed, "-m", "synapse_pt.run", "experiment=paper_main", "dataset=sample", cwd=where)
    version = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    runs = sorted(where.glob("outputs/*/*/metrics.json"))
    assert [p.parents[1].name for p in runs] == ["paper_main", "run"]
    for path in runs:
        identity = json.loads(path.read_text())["identity"]
        assert identity["git_commit"] == "unknown" and identity["version"] == version
    # a user's own config folder on the search path: their experiment composes over ours
    own = tmp_path / "my_configs" / "experiment"
    own.mkdir(parents=True)
    (own / "mine.yaml").write_text("# @package _global_\nmemory:\n  params:\n    beta: 0.25\n")
    job = sh(installed, "-m", "synapse_pt.run", f"hydra.searchpath=[file://{own.parent}]",
             "experiment=mine", "dataset=sample", "--cfg", "job", cwd=where).stdout
    assert "beta: 0.25" in job and "name: sample" in job
    estimate = sh(installed, "-m", "synapse_pt.estimate", "llm=openai", "eval=qa",
                  "dataset=sample", cwd=where).stdout
    assert estimate.strip().splitlines()[-1].startswith("estimate_usd_max: ")
    # a study named as the checkout names it, from the installed package's studies/ (its GAAMA
    # and Membox variants read their prompts from the upstream folder a user names)
    from synapse_pt.data import upstream

    study = sh(installed, "-m", "synapse_pt.study", "paper_table", "--estimate", "llm=openai",
               "dataset=sample", f"eval.upstream_path={upstream.default_root()}",
               cwd=where).stdout
    assert study.strip().splitlines()[-1].startswith("study_estimate_usd_max: ")
