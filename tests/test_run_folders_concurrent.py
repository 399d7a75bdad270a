"""One run, one folder (issue 42, items 1 and 2): runs started at once get their own folders, a
run locks its folder while it writes it, and ``overwrite=true`` leaves none of the replaced run's
files beside the new run's."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)

from synapse_pt.commands.run import run

REPO_ROOT = Path(__file__).resolve().parents[1]
FAST = ("dataset=sample", "embedder=hashing", "smoke=true", "logger=none", "device=cpu")

# Hydra's ${now:} resolver reads hydra.core.utils.datetime: frozen here, every process started
# with this file on its path stamps its run folder with the same instant (to the microsecond),
# as two runs started together can
FROZEN_CLOCK = '''
import datetime as _dt
import hydra.core.utils as _utils


class _Frozen(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return cls(2026, 1, 2, 3, 4, 5, 678901)


_utils.datetime = _Frozen
'''


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "synapse_pt.run", *args], cwd=cwd,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_runs_started_in_the_same_instant_get_their_own_folders(tmp_path: Path) -> None:
    """The issue's probe: two runs of different memories started together with the default
    folder name. On main both wrote ``outputs/run/<the same stamp>``; now the second gets
    ``<stamp>-2`` and each folder holds one run's config, metrics and predictions."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FROZEN_CLOCK)
    env = {"PYTHONPATH": os.pathsep.join([str(hook), str(REPO_ROOT),
                                          os.environ.get("PYTHONPATH", "")])}
    procs = {m: cli(*FAST, f"memory={m}", f"paths.cache_dir={tmp_path / 'cache'}",
                    cwd=tmp_path, env=env) for m in ("bm25", "vector_rag")}
    for m, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, (m, err[-3000:])
    folders = sorted(p for p in (tmp_path / "outputs" / "run").iterdir())
    assert [p.name for p in folders] == ["2026-01-02_03-04-05_678901",
                                         "2026-01-02_03-04-05_678901-2"]
    targets = set()
    for folder in folders:
        saved = OmegaConf.load(folder / "config.yaml")
        assert saved.paths.output_dir == str(folder.resolve())
        assert (folder / "metrics.json").is_file() and (folder / "predictions.parquet").is_file()
        targets.add(saved.memory._target_.rsplit(".", 1)[-1])
        assert not (folder / "run.lock").exists()  # released at the end
    assert len(targets) == 2  # one folder per memory


def test_threads_claiming_the_same_stamp_get_different_folders(tmp_path: Path) -> None:
    from synapse_pt.eval.records.run_folder import claim_new_folder

    stamp = tmp_path / "outputs" / "run" / "2026-01-02_03-04-05_678901"
    barrier = threading.Barrier(8)
    claimed: list[Path] = []

    def claim() -> None:
        barrier.wait()
        claimed.append(claim_new_folder(stamp))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(p.name for p in claimed) == sorted(
        [stamp.name] + [f"{stamp.name}-{n}" for n in range(2, 9)])


# a process that holds a folder's lock (the project's own, as a run holds it) until killed
HOLDER = """
import sys, time
from pathlib import Path
from synapse_pt.eval.records.commit import holding
with holding(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(600)
"""


def hold(folder: Path) -> subprocess.Popen:
    """A process holding ``folder``'s lock (returned once it holds it)."""
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_run_into_a_locked_folder_is_refused_naming_the_holder(tmp_path: Path) -> None:
    """A process writing a folder holds its lock (``filelock``: an OS lock on ``run.lock``);
    another run into it (the CLI, an explicit ``hydra.run.dir``) ends in one line naming the
    holder's pid and host, writes nothing, and leaves the lock to its holder."""
    folder = tmp_path / "run"
    holder = hold(folder)
    try:
        proc = cli(*FAST, "memory=bm25", f"paths.cache_dir={tmp_path / 'cache'}",
                   f"hydra.run.dir={folder}", cwd=REPO_ROOT)
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 1, err[-3000:]
        lines = err.strip().splitlines()
        assert len(lines) == 1, err[-3000:]
        assert lines[0].startswith(f"[synapse_pt] error: {folder} is being written by another "
                                   f"process (pid {holder.pid} on {socket.gethostname()}, "
                                   "started "), lines[0]
        assert sorted(p.name for p in folder.iterdir()) == ["run.lock"]
        assert json.loads((folder / "run.lock").read_text())["pid"] == holder.pid
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_runs_lock_does_not_block_the_next(tmp_path: Path) -> None:
    """The lock dies with its process: a holder killed with SIGKILL (no ``finally`` runs; its
    ``run.lock`` stays, naming it) does not block the next run, which takes the lock, writes the
    folder and removes the lock file at the end. Before (issue 58): a pid-file lock that the next
    run took over only after checking that the pid was dead on this host."""
    folder = tmp_path / "run"
    holder = hold(folder)
    holder.kill()
    holder.wait()
    assert json.loads((folder / "run.lock").read_text())["pid"] == holder.pid  # left behind
    run(make_cfg(*FAST, "memory=bm25", f"paths.cache_dir={tmp_path / 'cache'}",
                 output_dir=str(folder)))
    assert (folder / "metrics.json").is_file() and not (folder / "run.lock").exists()


def test_a_lock_file_naming_a_live_process_that_holds_no_lock_does_not_block(
        tmp_path: Path) -> None:
    """A run killed with SIGKILL leaves ``run.lock`` naming its pid; once that pid is reused by
    an unrelated process (here a ``sleep``), the old pid-file lock refused every later run into
    the folder ("being written by another run"). The OS lock is not held by anyone: the run goes
    ahead."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        folder = tmp_path / "run"
        folder.mkdir()
        (folder / "run.lock").write_text(json.dumps(
            {"pid": other.pid, "host": socket.gethostname(), "started": "2026-01-02 03:04:05"}))
        run(make_cfg(*FAST, "memory=bm25", f"paths.cache_dir={tmp_path / 'cache'}",
                     output_dir=str(folder)))
        assert (folder / "metrics.json").is_file() and not (folder / "run.lock").exists()
    finally:
        other.kill()
        other.wait()


def test_two_processes_never_hold_one_folder(tmp_path: Path) -> None:
    """Eight processes started together try to take one folder's lock, each holding it for a
    while: at no moment do two hold it (each records when it held it; the spans never overlap),
    and every one that was refused was refused while another held it."""
    folder = tmp_path / "shared"
    folder.mkdir()
    script = """
import json, sys, time
from pathlib import Path
from synapse_pt.eval.records.commit import FolderLocked, holding
folder, n = Path(sys.argv[1]), sys.argv[2]
deadline = time.time() + 60
while time.time() < deadline:
    try:
        with holding(folder):
            start = time.time(); time.sleep(0.05); end = time.time()
        print(json.dumps([start, end])); break
    except FolderLocked:
        time.sleep(0.001)
"""
    procs = [subprocess.Popen([sys.executable, "-c", script, str(folder), str(i)],
                              cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
             for i in range(8)]
    spans = sorted(json.loads(p.communicate(timeout=120)[0]) for p in procs)
    assert len(spans) == 8
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end <= start, spans
    assert sorted(p.name for p in folder.iterdir()) == []  # the last one removed the lock file


def test_the_lock_is_released_when_a_run_fails(tmp_path: Path) -> None:
    bad = make_cfg(*FAST, "memory=bm25", f"paths.cache_dir={tmp_path / 'cache'}",
                   f"dataset.path={tmp_path / 'missing.json'}", output_dir=str(tmp_path / "run"))
    with pytest.raises(Exception, match="missing.json"):
        run(bad)
    assert not (tmp_path / "run" / "run.lock").exists()


def qa_run_folder(folder: Path) -> None:
    """What a QA run leaves (the issue's probe: spend.json and the answer tables among them)."""
    text = OmegaConf.to_yaml(make_cfg("eval=qa", "llm=openai", *FAST, "memory=bm25",
                                      output_dir=str(folder)), resolve=True)
    (folder / "tables").mkdir(parents=True)
    (folder / "config.yaml").write_text(text)
    for name in ("metrics.json", "timing.json"):
        (folder / name).write_text("{}\n")
    (folder / "spend.json").write_text(json.dumps({"n_paid": 14, "cost_usd_spent": 0.002}))
    (folder / "predictions.parquet").write_bytes(b"PAR1")
    for name in ("main_f1_official", "main_bleu1", "efficiency"):
        for suffix in (".md", ".tex"):
            (folder / "tables" / f"{name}{suffix}").write_text("| QA |\n")
    (folder / "notes.txt").write_text("mine\n")  # not a run's file: left alone


def test_overwrite_leaves_none_of_the_replaced_runs_files(tmp_path: Path) -> None:
    """``overwrite=true`` over a QA run's folder with a retrieval run: the folder then holds
    exactly what the retrieval run writes into an empty folder (no answer tables, the retrieval
    run's own zero spend), plus files no run writes."""
    fresh, replaced = tmp_path / "fresh", tmp_path / "replaced"
    common = (*FAST, "memory=vector_rag", f"paths.cache_dir={tmp_path / 'cache'}")
    run(make_cfg(*common, output_dir=str(fresh)))
    qa_run_folder(replaced)
    run(make_cfg(*common, "overwrite=true", output_dir=str(replaced)))

    def listing(folder: Path) -> set[str]:
        return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}

    assert listing(replaced) == listing(fresh) | {"notes.txt"}
    assert not (replaced / "tables" / "main_f1_official.md").exists()
    assert json.loads((replaced / "spend.json").read_text())["n_paid"] == 0
    for name in ("predictions.parquet", "spend.json"):
        assert (replaced / name).read_bytes() == (fresh / name).read_bytes(), name
