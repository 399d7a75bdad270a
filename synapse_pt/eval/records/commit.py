"""One commit protocol for every folder the project writes: a run's folder, a sweep's, a study's
``--out``, a folder of tables.

A folder is written by one process at a time (:func:`holding`: ``filelock``'s OS lock on
:data:`LOCK_NAME`, which dies with its process), and its files change only by rename, never by
delete-then-write (SQLite's rollback journal and git's object store are the models):

1. the new outputs are written whole into the hidden :data:`STAGING` folder inside it
   (:func:`staging`) and flushed to disk;
2. :func:`commit` writes the journal :data:`JOURNAL` (atomically: a temporary file renamed): the
   staged files, the files written in place (a run's log) and the folder's files the project wrote
   before (its manifest). From this moment the new outputs are the folder's; before it, the old;
3. each staged file is moved into place, the file it replaces first moved aside into
   :data:`REPLACED` (a file of the same name that the project did not write is kept beside, as
   ``<name>.kept``), then each earlier file the new outputs do not have is moved aside;
4. the manifest :data:`MANIFEST` is written (atomically): the files the project wrote there;
5. :data:`REPLACED` is removed (it holds only files the manifest listed), then the journal.

A kill at any step leaves the old outputs whole (before 2) or the journal and the new outputs
whole in :data:`STAGING` and :data:`REPLACED`: the next process to take the folder's lock
(:func:`holding`, :func:`recover`) completes the commit, each step being idempotent, and says so
in the log. A staging folder without a journal is a killed run's partial outputs: removed (named
in the log). SIGINT and SIGTERM that arrive during steps 2-5 are delivered when they end
(:func:`deferred_signals`).

The project deletes only files its manifest lists (never a user's): a folder written before
manifests existed is read by the caller's ``legacy`` rule (the files an earlier version wrote
there) once, then has a manifest.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

log = logging.getLogger("synapse_pt.run")

#: the lock file of a folder being written (removed when its holder is done; a killed holder's
#: stays behind, unlocked: the OS released its lock)
LOCK_NAME = "run.lock"
#: the hidden folder inside a folder that its new outputs are written into before the commit
STAGING = ".staging"
#: the files the project wrote into a folder (relative paths, JSON ``{"files": [...]}``)
MANIFEST = ".manifest.json"
#: a commit in progress: what it moves (present only between steps 2 and 5)
JOURNAL = ".commit.json"
#: where a commit moves the files it replaces until the manifest names the new ones
REPLACED = ".replaced"
#: the suffix a user's file gets when the project writes a file of its name
KEPT = ".kept"
#: the project's own bookkeeping in a folder: never listed in a manifest, never a user's file
BOOKKEEPING = (LOCK_NAME, STAGING, MANIFEST, JOURNAL, REPLACED)

#: ``folder -> files the project wrote there before manifests existed`` (for a folder without a
#: manifest); the default: none
Legacy = Callable[[Path], Iterable[str]]


class FolderLocked(RuntimeError):
    """Another process is writing this folder now (its lock file names it)."""


class CommitInterrupted(OSError):
    """A commit stopped by an error after its journal was written: the new outputs are whole in
    the folder, the next process to take its lock completes the commit."""


@dataclass
class Committed:
    """What a commit did: the files now the folder's (relative paths), the earlier project files
    it removed, and the users' files it kept beside under a new name (``{old: new}``)."""

    files: list[str]
    removed: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)


# --- the lock -------------------------------------------------------------------------------

def _holder_info() -> bytes:
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                       "started": time.strftime("%Y-%m-%d %H:%M:%S %z")}).encode()


def _describe_holder(lock: Path) -> str:
    try:
        info = json.loads(lock.read_text())
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict):
        info = {}
    return (f"pid {info.get('pid', '?')} on {info.get('host', '?')}, started "
            f"{info.get('started', '?')}")


class _Lock:
    """``filelock``'s lock on ``folder/run.lock`` (flock: the OS releases it when the process
    ends, however it ends), the holder's pid, host and start time written into the file."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK_NAME
        self.inode: tuple[int, int] | None = None
        self.lock = FileLock(self.path, blocking=False, thread_local=False,
                             on_acquired=self._written)

    def _written(self, fd: int) -> None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, _holder_info(), 0)
        st = os.fstat(fd)
        self.inode = (st.st_dev, st.st_ino)

    def acquire(self) -> None:
        for _ in range(5):
            try:
                self.lock.acquire()
                return
            except Timeout:
                if self.path.exists():
                    raise FolderLocked(
                        f"{self.path.parent} is being written by another process "
                        f"({_describe_holder(self.path)}; lock file {self.path}); wait for it to "
                        "finish or choose another folder") from None
                # its holder removed the file as it released it: take the lock again
        raise FolderLocked(f"{self.path.parent}: the lock {self.path} changed hands repeatedly; "
                           "choose another folder")

    def release(self) -> None:
        """Remove the lock file while still holding it (a process that opened it meanwhile finds
        it unlinked and takes a new one: filelock checks), then release."""
        try:
            st = os.lstat(self.path)
            if self.inode == (st.st_dev, st.st_ino):
                self.path.unlink()
        except OSError as err:  # a folder made read-only: the run's own error is the one said
            log.warning("%s: could not remove the lock file (%s); it stays, unheld once this "
                        "process lets go: the next process takes it", self.path,
                        err.strerror or err)
        finally:
            self.lock.release()


@contextmanager
def holding(folder: str | Path) -> Iterator[Path]:
    """Hold ``folder``'s lock for the ``with`` block (:class:`FolderLocked`, naming the holder,
    when another process holds it), after completing a commit that a killed process left there
    (:func:`recover`)."""
    path = Path(folder)
    lock = _Lock(path)
    lock.acquire()
    try:
        recover(path)
        yield path
    finally:
        lock.release()


# --- signals --------------------------------------------------------------------------------

@contextmanager
def deferred_signals() -> Iterator[None]:
    """SIGINT and SIGTERM that arrive in the ``with`` block are delivered when it ends (the
    handlers in place before it then run), so that a commit is not cut between two renames by
    Ctrl-C or a scheduler's stop. A no-op outside the main thread (signals go to it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in before:
        signal.signal(s, lambda signum, frame: arrived.append(signum))
    try:
        yield
    finally:
        for s, handler in before.items():  # None: a handler not set from Python, the default
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        for s in dict.fromkeys(arrived):
            signal.raise_signal(s)


# --- manifest and journal -------------------------------------------------------------------

def _fsync(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    """``text`` into ``path`` through a temporary sibling, flushed, renamed (a kill leaves the old
    file or the new one); an error without a file name gets ``path``'s."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        if err.filename is None:
            raise OSError(err.errno, os.strerror(err.errno) if err.errno else str(err),
                          str(path)) from err
        raise


def _read_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError as err:
        raise OSError(f"{path}: not readable JSON ({err}); it is synapse_pt's record of what it "
                      "wrote there: restore it, or move the folder's files elsewhere") from None
    return value if isinstance(value, dict) else None


def manifest(folder: Path, legacy: Legacy | None = None) -> list[str] | None:
    """The files the project wrote into ``folder`` (its :data:`MANIFEST`; without one, the
    ``legacy`` rule's files that exist); ``None`` for a folder with neither."""
    listed = _read_json(folder / MANIFEST)
    if listed is not None:
        return sorted(str(f) for f in listed.get("files", []))
    if legacy is None:
        return None
    found = sorted({rel for rel in legacy(folder) if (folder / rel).is_file()})
    return found or None


def _files(root: Path) -> list[str]:
    """Every file below ``root`` (relative, sorted)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


def _inside(folder: Path, rel: str) -> Path:
    """``folder/rel``, refused when ``rel`` leaves ``folder`` (a tampered manifest or journal)."""
    path = folder / rel
    if rel.startswith("/") or ".." in Path(rel).parts or rel.split("/")[0] in BOOKKEEPING:
        raise OSError(f"{folder}: {rel!r} in its manifest or journal is no file of the folder")
    return path


# --- staging, commit, recovery --------------------------------------------------------------

@contextmanager
def staging(folder: Path) -> Iterator[Path]:
    """The staging folder ``<folder>/.staging``, made empty (the caller holds the folder's lock,
    so one left there is a killed run's: :func:`recover` removed it) and removed when the block
    ends, unless a commit of it is pending (an error after its journal: the next start completes
    it): a run that fails before :func:`commit` leaves ``folder`` as it found it."""
    path = folder / STAGING
    if path.exists():
        shutil.rmtree(path)
    path.mkdir()
    try:
        yield path
    finally:
        if path.exists() and not (folder / JOURNAL).exists():
            try:
                shutil.rmtree(path)
            except OSError as err:  # as for the lock: the run's own error stays the one said
                log.warning("%s: could not remove the staging folder (%s); the next run into "
                            "the folder removes it", path, err.strerror or err)


def commit(folder: Path, *, in_place: Collection[str] = (), legacy: Legacy | None = None
           ) -> Committed:
    """Make the files staged in ``folder/.staging`` (and ``in_place``: files this process wrote
    straight into ``folder``, e.g. its log) the folder's outputs: the protocol of this module's
    docstring, steps 2-5. Earlier project files (the manifest's; ``legacy``'s without one) that
    the new outputs lack are removed; a user's file is never removed (one in the way of a new file
    is kept as ``<name>.kept``). The caller holds the folder's lock (:func:`holding`). An error
    after the journal is written is a :class:`CommitInterrupted` naming what is where."""
    staged = folder / STAGING
    new = _files(staged)
    for rel in new:
        _fsync(staged / rel)
    old = manifest(folder, legacy) or []
    files = sorted({*new, *(rel for rel in in_place if (folder / rel).is_file())})
    done: Committed | None = None
    try:
        with deferred_signals():
            write_atomic(folder / JOURNAL, json.dumps(
                {"staged": new, "files": files, "old": old}, indent=1) + "\n")
            try:
                _fsync(folder, directory=True)
                done = _roll_forward(folder, new, files, old)
            except OSError as err:
                where = os.fsdecode(err.filename) if err.filename is not None else str(folder)
                raise CommitInterrupted(
                    f"{folder}: the commit of the new outputs stopped at {where} "
                    f"({err.strerror or err}); they are whole in {staged} and the replaced files "
                    f"in {folder / REPLACED}: the next run into the folder completes the commit "
                    f"(its journal {folder / JOURNAL})") from err
    except KeyboardInterrupt as err:  # arrived during the commit, delivered once it ended
        if done is not None:
            err.add_note(f"the new outputs were committed into {folder} before it, whole")
        raise
    assert done is not None
    return done


def _move_aside(folder: Path, rel: str, old: set[str], kept: dict[str, str]) -> None:
    """Move ``folder/rel`` out of the way: into :data:`REPLACED` when the project wrote it
    (``old``), else beside as ``<rel>.kept`` (``-2``, ... when taken)."""
    path = folder / rel
    if rel in old:
        target = folder / REPLACED / rel
        target.parent.mkdir(parents=True, exist_ok=True)
    else:
        target, n = path.with_name(path.name + KEPT), 1
        while os.path.lexists(target):
            n += 1
            target = path.with_name(f"{path.name}{KEPT}-{n}")
        kept[rel] = str(target.relative_to(folder))
    os.replace(path, target)


def _roll_forward(folder: Path, staged: list[str], files: list[str], old: list[str]
                  ) -> Committed:
    """Steps 3-5 from wherever a killed commit stopped (each step finds what is done)."""
    old_set, kept = set(old), {}
    for rel in staged:
        src, dst = folder / STAGING / rel, _inside(folder, rel)
        if not os.path.lexists(src):
            continue  # moved in already
        if os.path.lexists(dst):
            _move_aside(folder, rel, old_set, kept)
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
    removed = [rel for rel in old if rel not in set(files)]
    for rel in removed:
        if os.path.lexists(_inside(folder, rel)):
            _move_aside(folder, rel, old_set, kept)
    write_atomic(folder / MANIFEST, json.dumps({"files": files}, indent=1) + "\n")
    if (folder / REPLACED).exists():
        shutil.rmtree(folder / REPLACED)
    for rel in removed:  # folders the removed files leave empty (never the folder itself)
        parent = (folder / rel).parent
        while parent != folder and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    if (folder / STAGING).exists():
        shutil.rmtree(folder / STAGING)
    (folder / JOURNAL).unlink()
    _fsync(folder, directory=True)
    for rel, to in kept.items():
        log.warning("%s: %s was not written by synapse_pt (its manifest does not list it); kept "
                    "as %s", folder, rel, to)
    return Committed(files, removed, kept)


def recover(folder: Path) -> str | None:
    """Complete a commit a killed process left in ``folder`` (its journal), or remove the partial
    outputs of one killed before committing (a staging folder without a journal); what was done,
    logged (``None``: nothing to do). The caller holds the folder's lock."""
    for tmp in (folder / (JOURNAL + ".tmp"), folder / (MANIFEST + ".tmp")):
        if tmp.exists():
            tmp.unlink()
    journal = _read_json(folder / JOURNAL)
    if journal is not None:
        with deferred_signals():
            done = _roll_forward(folder, list(journal["staged"]), list(journal["files"]),
                                 list(journal["old"]))
        said = (f"{folder}: completed the commit of a process stopped while moving its outputs "
                f"into place: the folder holds its outputs ({len(done.files)} files)")
    elif (folder / STAGING).exists():
        shutil.rmtree(folder / STAGING)
        if (folder / REPLACED).exists():  # cannot be without a journal; removed all the same
            shutil.rmtree(folder / REPLACED)
        said = (f"{folder}: removed the partial outputs ({STAGING}/) of a process stopped before "
                "it finished; the folder's outputs are the earlier ones, as they were")
    else:
        return None
    log.warning("%s", said)
    return said


@contextmanager
def committing(folder: Path, legacy: Legacy | None = None) -> Iterator[Path]:
    """Lock ``folder`` (made as needed), stage, and commit what the ``with`` block writes into
    the yielded staging folder when it ends without an error: one call for a folder written at
    once (tables, a study's summary). An error leaves the folder as it was."""
    folder.mkdir(parents=True, exist_ok=True)
    with holding(folder), staging(folder) as staged:
        yield staged
        commit(folder, legacy=legacy)
