"""One commit protocol for every folder the project writes (issue 58, item 2): the commit is
killed at each of its steps in turn and the folder, once the next process has taken its lock,
holds the old outputs or the new ones, whole; the project deletes only the files its manifest
lists.

The kill is real: a child process commits with every file-system call that changes the folder
(``os.replace``, ``os.rename``, ``os.unlink``, ``os.rmdir``, ``os.mkdir``, ``os.fsync``) counted,
and at the k-th it ends with ``os._exit`` (no ``finally`` runs: a SIGKILL, a power cut after the
flush) or raises ``OSError(ENOSPC)`` (a full disk, in process). k runs from 1 until the commit
completes untouched."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from synapse_pt.eval.records.commit import (
    JOURNAL,
    MANIFEST,
    REPLACED,
    STAGING,
    CommitInterrupted,
    commit,
    holding,
    staging,
)

REPO_ROOT = Path(__file__).resolve().parents[1]

#: the folder before: the project's earlier outputs (listed by the legacy rule: no manifest yet),
#: a user's files, one of them under a name the new outputs write
OLD = {"a.txt": "old a", "tables/t1.md": "old t1", "tables/old.md": "old only",
       "run.log": "log of both runs"}
USERS = {"notes.txt": "user notes", "tables/mine.md": "user table", "tables/t2.md": "user's t2"}
#: what the new outputs stage
NEW = {"a.txt": "new a", "b.txt": "new b", "tables/t1.md": "new t1", "tables/t2.md": "new t2"}
LEGACY = ["a.txt", "tables/t1.md", "tables/old.md", "run.log"]

CHILD = """
import errno, os, sys
from pathlib import Path
from synapse_pt.eval.records.commit import commit, holding, staging

folder, k, mode, new = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], eval(sys.argv[4])
legacy = eval(sys.argv[5])
count, armed = [0], [False]

def counted(name):
    real = getattr(os, name)
    def call(*args, **kwargs):
        if armed[0]:
            count[0] += 1
            if count[0] == k:
                if mode == "kill":
                    os._exit(9)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(args[0]))
        return real(*args, **kwargs)
    setattr(os, name, call)

for name in ("replace", "rename", "unlink", "rmdir", "mkdir", "fsync"):
    counted(name)
try:
    with holding(folder), staging(folder) as staged:
        for rel, text in new.items():
            (staged / rel).parent.mkdir(parents=True, exist_ok=True)
            (staged / rel).write_text(text)
        armed[0] = True
        commit(folder, in_place=["run.log"], legacy=lambda f: legacy)
        armed[0] = False
except OSError as err:
    print(type(err).__name__, err)
    sys.exit(3)
print("committed", count[0])
"""


def make_folder(folder: Path) -> None:
    for rel, text in {**OLD, **USERS}.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def outcome(folder: Path) -> str:
    """``old`` or ``new`` when the folder holds one of them whole (the users' files untouched,
    no bookkeeping left); a description of what it holds otherwise."""
    files = snapshot(folder)
    if files == {**OLD, **USERS}:
        return "old"
    kept = {"tables/t2.md.kept": USERS["tables/t2.md"]}  # the user's file in the new one's way
    new = {**NEW, "run.log": OLD["run.log"], **{k: v for k, v in USERS.items()
                                                if k != "tables/t2.md"}, **kept}
    listed = sorted([*NEW, "run.log"])
    if ({k: v for k, v in files.items() if k != MANIFEST} == new
            and json.loads(files[MANIFEST]) == {"files": listed}):
        return "new"
    return f"neither: {files}"


def commit_in_child(folder: Path, k: int, mode: str) -> subprocess.CompletedProcess:
    make_folder(folder)
    return subprocess.run([sys.executable, "-c", CHILD, str(folder), str(k), mode, repr(NEW),
                           repr(LEGACY)], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("mode", ["kill", "raise"])
def test_a_commit_stopped_at_each_step_leaves_the_old_or_the_new_outputs_whole(
        tmp_path: Path, mode: str) -> None:
    """Before (issue 58): ``commit()`` deleted the old outputs, then moved the new ones in; a kill
    between the two lost both, and the next run deleted the finished staging folder."""
    untouched = commit_in_child(tmp_path / "untouched", 10**9, mode)
    assert untouched.returncode == 0, untouched.stderr[-2000:]
    steps = int(untouched.stdout.split()[-1])
    assert steps > 15, steps  # every file moved aside and in, the manifest, the clean-up
    outcomes = []
    for k in range(1, steps + 1):
        folder = tmp_path / f"{mode}{k}"
        proc = commit_in_child(folder, k, mode)
        if mode == "kill":
            assert proc.returncode == 9, (k, proc.stderr[-2000:])
        elif proc.returncode != 0:  # one line naming where it stopped (a mkdir of a folder that
            # exists swallows the error: the commit goes on)
            assert proc.returncode == 3, (k, proc.stderr[-2000:])
            assert proc.stdout.startswith(("OSError", "CommitInterrupted")), proc.stdout
        with holding(folder):  # the next start: completes or discards what it finds
            pass
        state = outcome(folder)
        assert state in ("old", "new"), (k, proc.stdout, state)
        assert not {STAGING, REPLACED, JOURNAL, "run.lock"} & {p.name for p in folder.iterdir()}
        outcomes.append(state)
    # the stop landed before the journal (old kept) and after it (new completed) alike, with one
    # switch-over: the journal's rename
    assert outcomes[0] == "old" and outcomes[-1] == "new", outcomes
    assert outcomes == sorted(outcomes, key=["old", "new"].index), outcomes


def test_the_project_deletes_only_what_its_manifest_lists(tmp_path: Path) -> None:
    """Three commits into one folder: each removes the files the previous one wrote that it does
    not write; a user's files (added between commits, beside and inside the project's
    sub-folders) are never touched."""
    folder = tmp_path / "out"
    folder.mkdir()

    def write(files: dict[str, str]) -> None:
        with holding(folder), staging(folder) as staged:
            for rel, text in files.items():
                (staged / rel).parent.mkdir(parents=True, exist_ok=True)
                (staged / rel).write_text(text)
            commit(folder)

    write({"tables/a.md": "1", "tables/b.md": "1", "study.md": "1"})
    (folder / "tables" / "mine.md").write_text("user")
    (folder / "notes.tex").write_text("user")
    write({"tables/a.md": "2", "study.md": "2"})
    assert snapshot(folder) == {"tables/a.md": "2", "study.md": "2", "tables/mine.md": "user",
                                "notes.tex": "user", MANIFEST: snapshot(folder)[MANIFEST]}
    write({"other/c.md": "3"})
    assert sorted(snapshot(folder)) == [MANIFEST, "notes.tex", "other/c.md", "tables/mine.md"]
    assert json.loads((folder / MANIFEST).read_text()) == {"files": ["other/c.md"]}


def test_a_staging_folder_without_a_journal_is_a_killed_runs_and_is_removed(tmp_path: Path,
                                                                            caplog) -> None:
    """A run killed while writing its outputs (before its commit began) leaves ``.staging/``; the
    next start removes it, says so, and leaves the folder's outputs as they were."""
    folder = tmp_path / "run"
    (folder / STAGING).mkdir(parents=True)
    (folder / STAGING / "metrics.json").write_text("{partial")
    (folder / "metrics.json").write_text("{}")
    with caplog.at_level("WARNING", logger="synapse_pt.run"), holding(folder):
        pass
    assert snapshot(folder) == {"metrics.json": "{}"}
    assert "removed the partial outputs (.staging/) of a process stopped before" in caplog.text


def test_make_tables_completes_a_commit_a_killed_run_left(tmp_path: Path) -> None:
    """A stamped run folder is never started in again: a commit killed there is completed by the
    next reader (``make_tables``' :func:`~synapse_pt.eval.records.collect.find_runs`), so the run
    is tabulated whole instead of from half-moved files."""
    from synapse_pt.eval.records.collect import find_runs

    folder = tmp_path / "runs" / "stamp"
    folder.mkdir(parents=True)
    with holding(folder), staging(folder) as staged:
        (staged / "metrics.json").write_text("{}")
        (staged / "predictions.parquet").write_text("rows")
        real, moves = os.replace, []

        def stop_after_the_journal(src, dst, *args, **kwargs):
            moves.append(dst)
            if len(moves) == 2:
                raise OSError(errno.EIO, os.strerror(errno.EIO), str(dst))
            return real(src, dst, *args, **kwargs)

        os.replace = stop_after_the_journal
        try:
            with pytest.raises(CommitInterrupted, match="the next run into the folder completes"):
                commit(folder)
        finally:
            os.replace = real
    assert (folder / JOURNAL).exists() and not (folder / "metrics.json").exists()
    assert find_runs([tmp_path / "runs"]) == [folder.resolve()]
    assert snapshot(folder) == {"metrics.json": "{}", "predictions.parquet": "rows",
                                MANIFEST: snapshot(folder)[MANIFEST]}


def test_ctrl_c_during_a_commit_is_delivered_when_it_ends(tmp_path: Path) -> None:
    """Ctrl-C (or SIGTERM taken as it) arriving between two renames of a commit waits for the
    commit to end: the folder holds the new outputs whole, then the interruption is raised,
    noting that they were committed."""
    import signal

    folder = tmp_path / "f"
    make_folder(folder)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    real, sent = os.replace, []

    def interrupting(src, dst, *args, **kwargs):
        if not sent and str(dst).endswith("a.txt"):
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        return real(src, dst, *args, **kwargs)

    try:
        with holding(folder), staging(folder) as staged:
            for rel, text in NEW.items():
                (staged / rel).parent.mkdir(parents=True, exist_ok=True)
                (staged / rel).write_text(text)
            os.replace = interrupting
            try:
                with pytest.raises(KeyboardInterrupt) as info:
                    commit(folder, in_place=["run.log"], legacy=lambda f: LEGACY)
            finally:
                os.replace = real
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sent and outcome(folder) == "new"
    assert info.value.__notes__ == [f"the new outputs were committed into {folder} before it, "
                                    "whole"]
