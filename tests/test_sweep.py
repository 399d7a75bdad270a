"""Sweeps through the CLI: a real two-trial Optuna study (hydra-optuna-sweeper 1.2.0, optuna 2.10,
SQLAlchemy 1.4) that resumes from its SQLite storage, and a two-job multirun through Hydra's
submitit launcher in its local variant (``hydra/launcher=local``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from synapse_pt.eval.records.record import lookup_metric

REPO_ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # every test here runs a sweep in subprocesses (seconds each)
FAST = ("dataset=sample", "embedder=hashing", "smoke=true", "logger=none", "device=cpu")
OBJECTIVE = "recall@10.mean_q_1_4"


def cli(*args: str, timeout: int = 600, module: str = "synapse_pt.run"
        ) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (f"exit code {proc.returncode}\nstdout: {proc.stdout[-2000:]}"
                                  f"\nstderr: {proc.stderr[-4000:]}")
    return proc


def optuna_sweep(tmp_path: Path, sweep_dir: Path) -> subprocess.CompletedProcess:
    return cli("-m", "hparams_search=synapse_optuna", "hydra.sweeper.n_trials=2", *FAST,
               f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep_dir}")


def test_optuna_sweep_runs_and_resumes(tmp_path):
    optuna = pytest.importorskip("optuna")
    first = tmp_path / "sweep1"
    optuna_sweep(tmp_path, first)

    results = yaml.safe_load((first / "optimization_results.yaml").read_text())
    assert results["name"] == "optuna"
    # the one declared space (synapse_pt/retrieval/search_space.py): every reading and setting
    assert set(results["best_params"]) == {f"memory.params.{k}" for k in (
        "S", "delta", "beta", "gamma", "theta", "lambda1", "lambda2", "lambda3", "tau_gate",
        "fan", "T")} | {f"memory.readings.{k}" for k in (
        "k_anchor", "rank_episodic_only", "energy", "inhibition", "inhibition_scope",
        "pagerank_scale", "fire_zero")}
    # the value Optuna maximised is each trial's objective from its metrics.json
    objectives = []
    for job in sorted(p for p in first.iterdir() if p.is_dir() and p.name.isdigit()):
        metrics = json.loads((job / "metrics.json").read_text())
        objectives.append(lookup_metric(metrics, OBJECTIVE))
        overrides = yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text())
        assert any(o.startswith("memory.params.S=") for o in overrides)
    assert len(objectives) == 2
    assert results["best_value"] == pytest.approx(max(objectives))

    storage = f"sqlite:///{tmp_path / 'cache' / 'optuna.sqlite'}"
    # one study, named by the content hash of what its trials compute
    # (synapse_pt/commands/study_key.py)
    names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
    assert len(names) == 1 and names[0].startswith(f"synapse_optuna_sample_{OBJECTIVE}_"), names
    study_name = names[0]
    study = optuna.load_study(study_name=study_name, storage=storage)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 2
    assert sorted(t.value for t in done) == pytest.approx(sorted(objectives))

    # the same command again resumes the study: two more trials in the same storage
    optuna_sweep(tmp_path, tmp_path / "sweep2")
    study = optuna.load_study(study_name=study_name, storage=storage)
    assert len([t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]) == 4
    assert len(optuna.get_all_study_summaries(storage)) == 1


def test_submitit_local_launcher(tmp_path):
    """Two jobs, each in its own process started by submitit (as on SLURM, without SLURM)."""
    pytest.importorskip("submitit")
    sweep = tmp_path / "multi"
    cli("-m", "hydra/launcher=local", "experiment=paper_main,no_gate", *FAST,
        f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}")
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name[0].isdigit())
    assert [p.name.split("_", 1)[0] for p in jobs] == ["0", "1"]
    labels = {json.loads((j / "metrics.json").read_text())["identity"]["experiment"]
              for j in jobs}
    assert labels == {"paper_main", "no_gate"}
    assert (sweep / ".submitit").is_dir()  # submitit's own job folders: logs, pickled results


def sweep_cli(*args: str) -> subprocess.CompletedProcess:
    return cli(*args, module="synapse_pt.sweep")


def test_sweep_split_into_submitit_jobs_merges_into_the_single_job_table(tmp_path):
    """``python -m synapse_pt.sweep``: seven configurations in three jobs through submitit's
    local launcher give one merged table equal to the same sweep run as a single job."""
    pytest.importorskip("submitit")
    import pandas as pd

    common = ("experiment=paper_main", "dataset=sample", "embedder=hashing", "device=cpu",
              f"paths.cache_dir={tmp_path / 'cache'}", "sweep.configs=7", "sweep.batch=2")
    single = tmp_path / "single"
    sweep_cli(*common, f"hydra.run.dir={single}")
    whole = pd.read_parquet(single / "sweep.parquet")
    assert whole["config"].tolist() == list(range(7))
    timing = json.loads((single / "timing.json").read_text())
    assert timing["configs"] == 7 and timing["batch"] == 2

    multi = tmp_path / "multi"
    proc = sweep_cli("-m", "hydra/launcher=local", *common, "sweep.chunks=3", "sweep.chunk=0,1,2",
                     f"hydra.sweep.dir={multi}")
    assert "sweep table:" in proc.stdout
    parts = sorted(multi.glob("*/sweep.parquet"))
    assert [len(pd.read_parquet(p)) for p in parts] == [3, 2, 2]  # near-equal slices
    merged = pd.read_parquet(multi / "sweep.parquet")
    pd.testing.assert_frame_equal(merged, whole)
    assert (multi / ".submitit").is_dir()


def test_sweep_refuses_a_memory_that_is_not_synapse(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "synapse_pt.sweep", "memory=bm25",
                           "dataset=sample", "embedder=hashing", "sweep.configs=2",
                           f"paths.cache_dir={tmp_path / 'cache'}",
                           f"hydra.run.dir={tmp_path / 'run'}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "has no batched sweep" in proc.stderr
