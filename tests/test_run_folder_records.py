"""A run folder's records say what is in it (issue 51): a failed replacement leaves the replaced
run whole, a refused run writes nothing into the folder it was refused from, a rerun on changed
data is refused like a changed configuration, a stamped folder of a failed start is not left
behind, and two multiruns started at once get two sweep folders."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from test_cli_messages import closed_port
from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)

from synapse_pt.commands.hydra_app import WritableRunDir
from synapse_pt.commands.run import run
from synapse_pt.data import sample_path
from synapse_pt.eval.records.commit import STAGING
from synapse_pt.eval.records.run_folder import OutputDirInUse
from synapse_pt.models.llm.base import LLMError

REPO_ROOT = Path(__file__).resolve().parents[1]
FAST = ("dataset=sample", "embedder=hashing", "smoke=true", "logger=none", "device=cpu")


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes)."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_failed_replacement_leaves_the_replaced_run_whole(tmp_path: Path,
                                                            monkeypatch) -> None:
    """``overwrite=true`` with a run that fails (an LLM server nobody listens on) leaves every
    file of the replaced run as it was; a replacement that succeeds leaves only its own files."""
    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    cache, folder = f"paths.cache_dir={tmp_path / 'cache'}", tmp_path / "run"
    run(make_cfg(*FAST, cache, output_dir=str(folder)))
    before = snapshot(folder)
    assert {"config.yaml", "metrics.json", "predictions.parquet",
            "tables/main_recall@10.md"} <= set(before)
    failing = make_cfg(*FAST, cache, "memory=bm25", "eval=qa", "llm=openai",
                       f"llm.backend.base_url=http://127.0.0.1:{closed_port()}/v1",
                       "llm.backend.max_retries=0", "overwrite=true", output_dir=str(folder))
    with pytest.raises(LLMError, match="connection error"):
        run(failing)
    assert snapshot(folder) == before
    assert not (folder / STAGING).exists()
    # a replacement that succeeds: the folder holds the new run's files only
    run(make_cfg(*FAST, cache, "memory=bm25", "overwrite=true", output_dir=str(folder)))
    after = snapshot(folder)
    assert "BM25Memory" in after["config.yaml"].decode()
    assert set(after) == set(before)  # the same files, none left over, the staging folder gone
    assert after["predictions.parquet"] != before["predictions.parquet"]


def test_a_rerun_on_changed_data_is_refused(tmp_path: Path) -> None:
    """A user's own data file (``dataset.sha256=null``) edited between two runs of the same
    command: the second is refused naming both hashes, the first run's outputs are left; with
    ``overwrite=true`` it replaces them."""
    data = tmp_path / "mine.json"
    data.write_text(sample_path().read_text())
    cache, folder = f"paths.cache_dir={tmp_path / 'cache'}", tmp_path / "run"
    overrides = ("embedder=hashing", "logger=none", "device=cpu", "memory=bm25",
                 f"dataset.path={data}", "dataset.sha256=null", cache)
    first = run(make_cfg(*overrides, output_dir=str(folder)))
    before = snapshot(folder)
    samples = json.loads(data.read_text())
    samples[0]["qa"] = samples[0]["qa"][:5]  # fewer questions
    data.write_text(json.dumps(samples))
    with pytest.raises(OutputDirInUse, match=r"another data file \(content sha256 [0-9a-f]{12}"
                                             r"\.\.\., this run's [0-9a-f]{12}\.\.\.\)"):
        run(make_cfg(*overrides, output_dir=str(folder)))
    assert snapshot(folder) == before
    replaced = run(make_cfg(*overrides, "overwrite=true", output_dir=str(folder)))
    assert replaced["identity"]["dataset"]["sha256"] != first["identity"]["dataset"]["sha256"]
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["identity"]["dataset"]["sha256"] == replaced["identity"]["dataset"]["sha256"]


def cli(*overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "synapse_pt.run", *overrides], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_refused_run_writes_nothing_into_the_folder(tmp_path: Path) -> None:
    """The CLI refused by a folder of another configuration's outputs leaves every file there
    (Hydra's ``.hydra/`` records and the log included) as it was."""
    cache, folder = f"paths.cache_dir={tmp_path / 'cache'}", tmp_path / "run"
    first = cli(*FAST, cache, f"hydra.run.dir={folder}")
    assert first.returncode == 0, first.stderr[-2000:]
    before = snapshot(folder)
    assert ".hydra/overrides.yaml" in before and "run.log" in before
    assert "dataset=sample" in before[".hydra/overrides.yaml"].decode()
    refused = cli(*FAST, cache, "memory=bm25", f"hydra.run.dir={folder}")
    assert refused.returncode == 1, refused.stderr[-2000:]
    assert "holds the outputs of another configuration" in refused.stderr
    assert snapshot(folder) == before


@pytest.mark.slow
def test_a_failed_start_leaves_no_stamped_folder(tmp_path: Path) -> None:
    """A run in a stamped folder (``${now:...}``, the default) that fails before writing outputs
    (a data file that does not exist) leaves no folder: nothing could reuse it."""
    parent = tmp_path / "outputs"
    proc = cli(*FAST, f"paths.cache_dir={tmp_path / 'cache'}",
               f"dataset.path={tmp_path / 'missing.json'}",
               f"hydra.run.dir={parent}/" + "${now:%H-%M-%S_%f}")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "missing.json" in proc.stderr
    assert list(parent.iterdir()) == []


def test_two_multiruns_of_the_same_stamp_get_two_sweep_folders(tmp_path: Path) -> None:
    """The sweep folder is stamped to the microsecond and claimed as a run folder is: a multirun
    whose stamped folder another made first gets ``<stamp>-2``, and its jobs (composed anew from
    the multirun's hydra overrides) are told so."""
    default = OmegaConf.load(REPO_ROOT / "configs" / "hydra" / "default.yaml")
    assert OmegaConf.to_container(default.sweep)["dir"].endswith("_%H-%M-%S_%f}")
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    stamp = tmp_path / "multirun" / "${now:%Y-%m-%d_%H-%M-%S_%f}"
    with initialize_config_dir(config_dir=str(REPO_ROOT / "configs"), version_base="1.3"):
        cfg = compose("run", overrides=[*FAST, f"hydra.sweep.dir={stamp}"],
                      return_hydra_config=True)
    taken = Path(OmegaConf.select(cfg, "hydra.sweep.dir"))
    taken.mkdir(parents=True)  # the other multirun, started in the same microsecond
    WritableRunDir().on_multirun_start(cfg)
    ours = Path(str(cfg.hydra.sweep.dir))
    assert ours == taken.with_name(f"{taken.name}-2") and ours.is_dir()
    assert cfg.hydra.overrides.hydra[-1] == f"hydra.sweep.dir='{ours}'"


RUN_CHILD = """
import os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from test_configs import make_cfg
from synapse_pt.commands.run import run

folder = Path(sys.argv[1]).resolve()
real, moves = os.replace, [0]

def replace(src, dst, *args, **kwargs):
    dst_path = Path(os.fsdecode(dst)).resolve()
    if dst_path.is_relative_to(folder) and ".staging" not in dst_path.parts:
        moves[0] += 1
        if moves[0] == 2:  # the second move into the run's folder: the swap under way
            os._exit(9)
    return real(src, dst, *args, **kwargs)

os.replace = replace
run(make_cfg(*sys.argv[3:], output_dir=str(folder)))
"""

def test_a_run_killed_while_replacing_a_folder_leaves_one_whole_run(tmp_path: Path) -> None:
    """The issue's probe: run A into D, then B with ``overwrite=true`` killed (SIGKILL: no
    ``finally`` runs) in the middle of its commit. Before: A's outputs were deleted and B's half
    moved in; a third run of another configuration was accepted and deleted B's staged outputs.
    Now the next start completes B's commit: D holds B whole (as B alone writes it), and the third
    configuration is refused."""
    cache = f"paths.cache_dir={tmp_path / 'cache'}"
    folder, fresh = tmp_path / "D", tmp_path / "fresh"
    run(make_cfg(*FAST, cache, "memory=vector_rag", output_dir=str(folder)))
    b = (*FAST, cache, "memory=bm25")
    proc = subprocess.run([sys.executable, "-c", RUN_CHILD, str(folder),
                           str(REPO_ROOT / "tests"), *b, "overwrite=true"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 9, proc.stderr[-3000:]
    with pytest.raises(OutputDirInUse, match=r"another configuration \(differs in \['memory'\]"):
        run(make_cfg(*FAST, cache, "memory=synapse", output_dir=str(folder)))
    run(make_cfg(*b, output_dir=str(fresh)))
    got, want = snapshot_bytes(folder), snapshot_bytes(fresh)
    assert set(got) == set(want)
    for name in ("predictions.parquet", "metrics.json", "spend.json"):
        if name == "metrics.json":
            assert json.loads(got[name])["metrics"] == json.loads(want[name])["metrics"]
        else:
            assert got[name] == want[name], name
    assert "BM25Memory" in got["config.yaml"].decode()


def snapshot_bytes(folder: Path) -> dict[str, bytes]:
    """The run's files (the folder's own hidden bookkeeping, e.g. its manifest, left out)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not (p.parent == folder and p.name.startswith("."))}


# --- the resumes a run's identity must allow (issue 58, item 5) -------------------------------

def test_a_moved_run_folder_resumes(tmp_path: Path) -> None:
    """Before: ``D holds the outputs of another configuration (differs in ['paths'])``: the
    folder's own path was compared. Now the paths are not part of what a run computes."""
    cache = f"paths.cache_dir={tmp_path / 'cache'}"
    first = run(make_cfg(*FAST, cache, "memory=bm25", output_dir=str(tmp_path / "D")))
    before = snapshot(tmp_path / "D")
    (tmp_path / "D").rename(tmp_path / "moved")
    again = run(make_cfg(*FAST, cache, "memory=bm25", output_dir=str(tmp_path / "moved")))
    assert again["identity"]["config_hash"] == first["identity"]["config_hash"]
    after = snapshot(tmp_path / "moved")
    assert after["predictions.parquet"] == before["predictions.parquet"]
    assert set(after) == set(before)


def test_another_cache_folder_resumes(tmp_path: Path, monkeypatch) -> None:
    """The same command with another ``SYNAPSE_CACHE`` (a cold cache: everything is computed
    again) resumes in the same folder. Before: refused, differing in ``dataset`` (its cache
    folder) and ``paths``."""
    monkeypatch.setenv("SYNAPSE_CACHE", str(tmp_path / "cache1"))
    run(make_cfg(*FAST, "memory=bm25", output_dir=str(tmp_path / "D")))
    before = snapshot(tmp_path / "D")
    monkeypatch.setenv("SYNAPSE_CACHE", str(tmp_path / "cache2"))
    run(make_cfg(*FAST, "memory=bm25", output_dir=str(tmp_path / "D")))
    assert snapshot(tmp_path / "D")["predictions.parquet"] == before["predictions.parquet"]
    assert (tmp_path / "cache2").is_dir()


def test_the_same_data_written_out_again_resumes(tmp_path: Path) -> None:
    """A user's data file written out again with the same content (indented, keys reordered:
    another file sha256, the same content sha256) resumes; before it was refused as another data
    file. An edit is still refused (:func:`test_a_rerun_on_changed_data_is_refused`)."""
    data = tmp_path / "mine.json"
    samples = json.loads(sample_path().read_text())
    data.write_text(json.dumps(samples))
    overrides = ("embedder=hashing", "logger=none", "device=cpu", "memory=bm25",
                 f"dataset.path={data}", "dataset.sha256=null",
                 f"paths.cache_dir={tmp_path / 'cache'}")
    first = run(make_cfg(*overrides, output_dir=str(tmp_path / "D")))
    data.write_text(json.dumps([dict(reversed(s.items())) for s in samples], indent=2))
    again = run(make_cfg(*overrides, output_dir=str(tmp_path / "D")))
    assert again["identity"]["dataset"]["sha256"] != first["identity"]["dataset"]["sha256"]
    assert (again["identity"]["dataset"]["content_sha256"]
            == first["identity"]["dataset"]["content_sha256"])
    assert again["metrics"] == first["metrics"]
