"""One error boundary (issue 58, item 4) and no litter: an OSError anywhere is one line naming the
path and what was kept; SIGTERM takes Ctrl-C's path; a killed, interrupted or refused command
leaves no folder it made without outputs.

The command-line tests pause a run at a chosen point through a ``sitecustomize`` on the child's
path (the run waits there, having written a marker file) so that the signal lands where the issue
found the litter, whatever the machine's speed."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)

from synapse_pt.commands.hydra_app import USER_FACING_ERRORS
from synapse_pt.commands.run import run
from synapse_pt.eval.records.run_folder import OutputDirNotWritable

REPO_ROOT = Path(__file__).resolve().parents[1]
FAST = ("dataset=sample", "embedder=hashing", "smoke=true", "logger=none", "device=cpu")

# SYNAPSE_TEST_PAUSE=<module>:<function>:<n>: the n-th call of the function (as the run module
# imports it) writes SYNAPSE_TEST_MARKER and sleeps
PAUSE = '''
import os
if os.environ.get("SYNAPSE_TEST_PAUSE"):
    import importlib, pathlib, time
    module, name, nth = os.environ["SYNAPSE_TEST_PAUSE"].split(":")
    target = importlib.import_module(module)
    real, calls = getattr(target, name), [0]

    def paused(*args, **kwargs):
        calls[0] += 1
        if calls[0] == int(nth):
            pathlib.Path(os.environ["SYNAPSE_TEST_MARKER"]).write_text("paused")
            time.sleep(300)
        return real(*args, **kwargs)

    setattr(target, name, paused)
'''


def start(tmp_path: Path, args: list[str], pause: str) -> tuple[subprocess.Popen, Path]:
    """``python -m synapse_pt.run <args>`` paused at ``pause``; returns once it is there."""
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(PAUSE)
    marker = tmp_path / "paused"
    env = {**os.environ, "SYNAPSE_TEST_PAUSE": pause, "SYNAPSE_TEST_MARKER": str(marker),
           "PYTHONPATH": os.pathsep.join([str(hook), str(REPO_ROOT),
                                          os.environ.get("PYTHONPATH", "")])}
    # Ctrl-C reaches a command run from a terminal: a shell's background job (`nohup ... &`)
    # would start the suite, and so this child, with SIGINT ignored
    proc = subprocess.Popen([sys.executable, "-m", "synapse_pt.run", *args], cwd=REPO_ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the run never reached its pause"
        time.sleep(0.05)
    return proc, marker


def last_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr, stderr[-3000:]
    return lines[-1]


@pytest.mark.slow
def test_sigterm_leaves_no_stamped_folder(tmp_path: Path) -> None:
    """SIGTERM (a scheduler's stop) while a run in a stamped folder evaluates: before, the
    process died at once and left ``<stamp>/`` with ``.staging/``, ``run.lock`` and ``run.log``;
    now it takes Ctrl-C's path: exit status 143, one line, the folder removed (it held no
    outputs)."""
    parent = tmp_path / "outputs"
    proc, _ = start(tmp_path, [*FAST, "memory=bm25", f"paths.cache_dir={tmp_path / 'cache'}",
                               f"hydra.run.dir={parent}/" + "${now:%H-%M-%S_%f}"],
                    "synapse_pt.eval.records.outputs:write_run_outputs:1")
    assert [p.name for p in next(parent.iterdir()).iterdir()] != []  # claimed, being written
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    assert last_line(err).startswith("[synapse_pt] interrupted by SIGTERM: nothing of this run "
                                      "was committed")
    assert list(parent.iterdir()) == []


@pytest.mark.slow
def test_sigterm_into_a_finished_folder_leaves_it_whole(tmp_path: Path) -> None:
    """The same in a literal folder that holds a finished run (the same command resuming): its
    files stay byte for byte, and no staging folder or lock is left."""
    folder, cache = tmp_path / "run", f"paths.cache_dir={tmp_path / 'cache'}"
    run(make_cfg(*FAST, "memory=bm25", cache, output_dir=str(folder)))
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    proc, _ = start(tmp_path, [*FAST, "memory=bm25", cache, f"hydra.run.dir={folder}"],
                    "synapse_pt.eval.records.outputs:write_run_outputs:1")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    assert f"{folder} holds the outputs of the last run that finished there" in last_line(err)
    after = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    assert {k: v for k, v in after.items() if k != "run.log"} == {
        k: v for k, v in before.items() if k != "run.log"}
    assert not (folder / ".staging").exists() and not (folder / "run.lock").exists()


@pytest.mark.slow
def test_an_interrupted_multirun_leaves_no_empty_job_folder(tmp_path: Path) -> None:
    """Ctrl-C while a multirun's second job loads its data (Hydra has made its folder): before,
    the empty job folder stayed (and a ``KeyboardInterrupt`` traceback); now one line, exit 130,
    the finished job's folder kept, the interrupted one's removed."""
    sweep = tmp_path / "multirun"
    proc, _ = start(tmp_path, ["-m", *FAST, "memory=bm25,vector_rag",
                               f"paths.cache_dir={tmp_path / 'cache'}",
                               f"hydra.sweep.dir={sweep}/" + "${now:%H-%M-%S_%f}"],
                    "synapse_pt.data.resolve:build_dataset:2")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert last_line(err).startswith("[synapse_pt] interrupted by SIGINT")
    (stamp,) = sweep.iterdir()
    jobs = sorted(p.name for p in stamp.iterdir() if p.is_dir())
    assert len(jobs) == 1 and jobs[0].startswith("0_") and "memory=bm25" in jobs[0], jobs
    assert (stamp / jobs[0] / "metrics.json").is_file()


@pytest.mark.slow
def test_a_refused_search_space_leaves_no_sweep_folder(tmp_path: Path) -> None:
    """Optuna's ``interval(0.5,0.1)`` is refused before any trial: before, the stamped sweep
    folder stayed, empty."""
    sweep = tmp_path / "multirun"
    proc = subprocess.run(
        [sys.executable, "-m", "synapse_pt.run", "-m", "hparams_search=synapse_optuna", *FAST,
         "memory.params.S=interval(0.5,0.1)", f"paths.cache_dir={tmp_path / 'cache'}",
         f"hydra.sweep.dir={sweep}/" + "${now:%H-%M-%S_%f}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0, proc.stderr[-3000:]
    assert not sweep.exists() or list(sweep.iterdir()) == [], list(sweep.rglob("*"))


def cli(*args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "synapse_pt.run", *args], cwd=REPO_ROOT,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=300, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("variable", ["SYNAPSE_CACHE", "SYNAPSE_JOBS_DIR"])
def test_an_unwritable_root_is_one_line_naming_it(tmp_path: Path, variable: str) -> None:
    """A cache or jobs folder that cannot be made (here below a regular file; read-only and
    permission errors take the same path): before, ``NotADirectoryError`` in a traceback."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    folder = blocker / "below"
    env = {variable: str(folder)}
    if variable != "SYNAPSE_CACHE":
        env["SYNAPSE_CACHE"] = str(tmp_path / "cache")
    proc = cli(*FAST, "memory=bm25", f"hydra.run.dir={tmp_path / 'run'}", env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert last_line(proc.stderr) == (
        f"[synapse_pt] error: {folder}: Not a directory (ENOTDIR; {variable}={folder}); nothing "
        f"of this run was committed: {tmp_path / 'run'} holds no run's outputs; the caches keep "
        "what this run computed (the same command resumes from them) (HYDRA_FULL_ERROR=1 shows "
        "the traceback)")


def _small_files() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, 16 * 1024))


@pytest.mark.slow
def test_a_file_over_the_size_limit_is_one_line(tmp_path: Path) -> None:
    """``ulimit -f 16``: the first file to pass 16 KiB (a cache's, here) fails with EFBIG. Before:
    a traceback ending in ``sqlite3.OperationalError``; now one line naming the file."""
    proc = cli(*FAST, "memory=bm25", f"paths.cache_dir={tmp_path / 'cache'}",
               f"hydra.run.dir={tmp_path / 'run'}", preexec_fn=_small_files)
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = last_line(proc.stderr)
    assert line.startswith(f"[synapse_pt] error: {tmp_path}/"), line
    assert "nothing of this run was committed" in line


def test_pyarrows_error_is_named_by_its_file(tmp_path: Path, monkeypatch) -> None:
    """pyarrow on a full disk raises ``OSError: [Errno 28] Error writing bytes to file. Detail:
    [errno 28] No space left on device`` naming no file (injected here as pyarrow raises it):
    before, that bare line in a traceback; now the run's one error names the file and the
    folder, and what was kept."""
    import pyarrow.parquet as pq

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space "
                      "left on device")

    monkeypatch.setattr(pq, "write_table", full)
    folder = tmp_path / "run"
    with pytest.raises(USER_FACING_ERRORS) as info:
        run(make_cfg(*FAST, "memory=bm25", f"paths.cache_dir={tmp_path / 'cache'}",
                     output_dir=str(folder)))
    assert isinstance(info.value, OutputDirNotWritable)
    assert str(info.value).startswith(
        f"{folder}: the run's outputs could not be written ({folder}/.staging/"
        "predictions.parquet.tmp: No space left on device); the folder's earlier outputs are left "
        "as they were")
    assert sorted(p.name for p in folder.iterdir()) == []


CHILD_EFBIG = """
import resource, sys
from pathlib import Path
from synapse_pt.eval.records.outputs import write_json
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    write_json(Path(sys.argv[1]), {"x": "y" * 10000})
except OSError as err:
    print(err.errno, err.filename)
"""


def test_a_write_over_the_size_limit_names_its_file(tmp_path: Path) -> None:
    """``write()`` past ``ulimit -f`` raises EFBIG without a file name (Python's own writes as
    pyarrow's); the project's writers name it."""
    proc = subprocess.run([sys.executable, "-c", CHILD_EFBIG, str(tmp_path / "m.json")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == [str(errno.EFBIG), str(tmp_path / "m.json.tmp")], proc.stderr
