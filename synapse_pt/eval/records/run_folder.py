"""A run's own folder: claimed so that no two runs share it, locked while a run writes it, its
outputs staged and moved into place only when the run has succeeded.

* :func:`claim_new_folder`: a stamped folder name (``outputs/run/<date>_<time>_<microseconds>``)
  made atomically, with ``-2``, ``-3``, ... appended when another run made it first;
* :func:`holding`: the lock file :data:`LOCK_NAME` (pid, host, start time) created with
  ``O_CREAT | O_EXCL`` while a run writes the folder, removed when it ends; a second run into a
  locked folder is refused (:class:`RunFolderLocked`, naming the holder), a lock whose process is
  dead on this host is taken over (logged);
* :func:`check_output_dir`, :func:`check_same_data`: a finished folder of another configuration
  or of other data (the data file's sha256) is refused (:class:`OutputDirInUse`) unless
  ``overwrite=true``;
* :func:`staging`: the hidden folder :data:`STAGING` inside the run's folder that a run writes its
  outputs (and Hydra's records) into; :func:`commit` moves them into place when the run has
  succeeded (under ``overwrite=true`` removing the replaced run's files first,
  :func:`clear_outputs`), so a run that fails leaves the folder's earlier outputs whole.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from omegaconf import OmegaConf

from synapse_pt.eval.records.outputs import (
    RUN_FILES,
    TABLES,
    result_neutral_changes,
    without_result_neutral,
)

log = logging.getLogger("synapse_pt.run")

#: the lock file of a folder a run is writing
LOCK_NAME = "run.lock"
#: the files whose presence makes a folder hold a configuration's outputs (a run that failed
#: before writing any of them left only its ``config.yaml``)
RUN_OUTPUTS = ("metrics.json", "predictions.parquet")
#: the hidden folder inside a run's folder that its outputs are written into before they replace
#: the folder's own (:func:`staging`, :func:`commit`)
STAGING = ".staging"
#: Hydra's records of the run (its composed config, Hydra's config, the command-line overrides)
HYDRA_RECORDS = ".hydra"


class OutputDirInUse(RuntimeError):
    """A run folder already holds the outputs of another configuration."""


class RunFolderLocked(RuntimeError):
    """Another run is writing this folder now (its lock file names it)."""


class OutputDirNotWritable(OSError):
    """A run's (or a multirun's) folder cannot be created or written."""


#: what a folder that cannot be written (read-only, its file system full) raises
NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT)


@contextmanager
def writing(folder: Path) -> Iterator[None]:
    """Turn an :class:`OSError` of a file under ``folder`` that cannot be written
    (:data:`NOT_WRITABLE`: made read-only mid-run, a full disk) into one
    :class:`OutputDirNotWritable` naming the folder, the file and the cause."""
    try:
        yield
    except OSError as err:
        name = err.filename
        inside = name is not None and Path(os.fsdecode(name)).resolve().is_relative_to(
            folder.resolve())
        if err.errno not in NOT_WRITABLE or not inside or isinstance(err, OutputDirNotWritable):
            raise
        raise OutputDirNotWritable(
            f"{folder}: the run's outputs could not be written ({os.fsdecode(name)}: "
            f"{err.strerror}); the folder's earlier outputs are left as they were; make it "
            "writable and rerun, or choose another hydra.run.dir") from err


def claim_new_folder(folder: str | Path) -> Path:
    """Make ``folder`` (its parents as needed) and return it; when it exists (another run made it
    first: two runs started in the same microsecond, or a rerun of a stamped name), the first of
    ``<folder>-2``, ``<folder>-3``, ... that this call makes itself. ``os.mkdir`` is atomic, so
    concurrent callers never get the same folder."""
    base = Path(folder)
    base.parent.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            n += 1


def _holder(text: str) -> dict:
    try:
        info = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return info if isinstance(info, dict) else {}


def _describe(info: dict) -> str:
    return (f"pid {info.get('pid', '?')} on {info.get('host', '?')}, started "
            f"{info.get('started', '?')}")


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by another user
        return True
    return True


def _stale(info: dict) -> bool:
    """A lock left by a process that died on this host (a lock of another host is never stale:
    its process cannot be checked from here)."""
    pid = info.get("pid")
    return (info.get("host") == socket.gethostname() and isinstance(pid, int)
            and pid != os.getpid() and not _alive(pid))


def acquire(folder: str | Path) -> Path:
    """Create ``folder``'s lock file (``O_CREAT | O_EXCL``: one winner) holding this process's
    pid, host and start time; :class:`RunFolderLocked` naming the holder when another run holds
    it. A stale lock (:func:`_stale`) is moved aside and taken over, with a log line."""
    lock = Path(folder) / LOCK_NAME
    info = {"pid": os.getpid(), "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %z")}
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                text = lock.read_text()
            except FileNotFoundError:  # released meanwhile: try again
                continue
            held = _holder(text)
            if not _stale(held):
                raise RunFolderLocked(
                    f"{folder} is being written by another run ({_describe(held)}; lock file "
                    f"{lock}); wait for it to finish or choose another hydra.run.dir (a run that "
                    "died on another host leaves its lock: remove the file)") from None
            aside = lock.with_name(f"{LOCK_NAME}.stale-{os.getpid()}")
            try:
                os.replace(lock, aside)
            except FileNotFoundError:
                continue
            if aside.read_text() != text:  # another run took it over first: give it back
                with suppress(FileExistsError):
                    os.link(aside, lock)
                aside.unlink()
                raise RunFolderLocked(f"{folder} is being written by another run (lock file "
                                      f"{lock}); choose another hydra.run.dir") from None
            aside.unlink()
            log.warning("%s: taking over the lock of a run that is no longer running (%s)",
                        folder, _describe(held))
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(info, f)
        return lock
    raise RunFolderLocked(f"{folder}: could not take the lock file {lock} (it changed hands "
                          "repeatedly); choose another hydra.run.dir")


def release(lock: Path) -> None:
    """Remove this process's lock file (one that names another process is left alone)."""
    try:
        if _holder(lock.read_text()).get("pid") == os.getpid():
            lock.unlink()
    except OSError as err:
        if err.errno != errno.ENOENT:
            raise


@contextmanager
def holding(folder: str | Path) -> Iterator[Path]:
    """Hold ``folder``'s lock (:func:`acquire`) for the ``with`` block, released however it
    ends."""
    lock = acquire(folder)
    try:
        yield lock
    finally:
        try:
            release(lock)
        except OSError as err:  # a folder made read-only: the run's own error stays the one said
            log.warning("%s: could not remove the lock file (%s); the next run takes it over "
                        "(its process has ended)", lock, err)


def holds_outputs(folder: Path) -> bool:
    """Whether ``folder`` holds a run's outputs (any of :data:`RUN_OUTPUTS`)."""
    return any((folder / name).exists() for name in RUN_OUTPUTS)


def clear_outputs(folder: Path) -> list[str]:
    """Remove what a run writes (:data:`RUN_FILES`, :data:`TABLES`, :data:`HYDRA_RECORDS`) from
    ``folder``; the names removed. Anything else (its log, a tracker's files) is left."""
    removed = [name for name in RUN_FILES if (folder / name).is_file()]
    for name in removed:
        (folder / name).unlink()
    for name in (TABLES, HYDRA_RECORDS):
        if (folder / name).is_dir():
            shutil.rmtree(folder / name)
            removed.append(f"{name}/")
    return removed


@contextmanager
def staging(folder: Path) -> Iterator[Path]:
    """The run's staging folder ``<folder>/.staging``, made empty (one a killed run left behind is
    removed: the caller holds the folder's lock) and removed when the ``with`` block ends, whatever
    it holds then: a run that failed before :func:`commit` leaves ``folder`` as it found it. Said
    in one log line when the folder holds another run's outputs."""
    path = folder / STAGING
    if path.exists():
        shutil.rmtree(path)
    path.mkdir()
    try:
        yield path
    except BaseException:
        if holds_outputs(folder):
            log.warning("%s: this run did not finish; the outputs already in the folder are left "
                        "as they were", folder)
        raise
    finally:
        if path.exists():
            try:
                shutil.rmtree(path)
            except OSError as err:  # as for the lock: the run's own error stays the one said
                log.warning("%s: could not remove the staging folder (%s); the next run into "
                            "the folder removes it", path, err)


def commit(staged: Path, folder: Path, replace: bool) -> None:
    """Move everything in ``staged`` into ``folder`` (a folder such as ``tables/`` replaces the one
    there), ``replace`` (``overwrite=true``): after removing the replaced run's files
    (:func:`clear_outputs`, logged), so none survives beside the new run's."""
    if replace:
        removed = clear_outputs(folder)
        if removed:
            log.info("%s: overwrite=true replaced the earlier run's files %s", folder, removed)
    for entry in sorted(staged.iterdir()):
        target = folder / entry.name
        if entry.is_dir() and target.is_dir():
            shutil.rmtree(target)
        os.replace(entry, target)


def _refuse(output_dir: Path, what: str) -> OutputDirInUse:
    return OutputDirInUse(
        f"{output_dir} holds the outputs of another {what}; choose another hydra.run.dir, rerun "
        "the same configuration on the same data to resume, or pass overwrite=true to replace "
        "them")


def check_same_data(output_dir: Path, sha256: str | None, overwrite: bool = False) -> None:
    """Refuse to write into a folder whose outputs were computed on other data: the data's sha256
    recorded in its ``metrics.json`` (``identity.dataset.sha256``) is not ``sha256``. A file
    nobody pinned (``dataset.sha256=null``) can change under the same configuration; this is what
    tells the two runs apart. ``overwrite=true`` replaces them."""
    metrics = output_dir / "metrics.json"
    if overwrite or not metrics.is_file():
        return
    try:
        before = json.loads(metrics.read_text())["identity"]["dataset"]["sha256"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise OutputDirInUse(f"{metrics}: not a run's metrics (no identity.dataset.sha256: "
                             f"{type(err).__name__}: {err}); choose another hydra.run.dir or "
                             "pass overwrite=true to replace it") from None
    if before != sha256:
        raise _refuse(output_dir, f"data file (sha256 {str(before)[:12]}..., this run's "
                                  f"{str(sha256)[:12]}...)")


def check_output_dir(output_dir: Path, config_text: str, overwrite: bool = False) -> None:
    """Refuse to write into a folder whose outputs are another configuration's.

    The same resolved configuration resumes (its cached answers make the rerun cheap and its
    outputs identical). Settings that cannot change results
    (:data:`~synapse_pt.eval.records.outputs.RESULT_NEUTRAL_KEYS`: caps, concurrency, timeouts,
    retries,
    the tracker) are not compared: the new values are recorded in ``config.yaml`` and logged. A
    folder holding no :data:`RUN_OUTPUTS` (a failed start's log) accepts any configuration;
    ``overwrite=true`` replaces another configuration's outputs once the new run has succeeded
    (:func:`commit`)."""
    saved = output_dir / "config.yaml"
    if overwrite or not saved.is_file():
        return
    before = OmegaConf.to_container(OmegaConf.create(saved.read_text()))
    after = OmegaConf.to_container(OmegaConf.create(config_text))
    for key, (old, new) in result_neutral_changes(before, after).items():
        log.info("%s: result-neutral setting %s changed %r -> %r (recorded, not compared)",
                 output_dir, key, old, new)
    before, after = without_result_neutral(before), without_result_neutral(after)
    differ = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if not differ:
        return
    if not holds_outputs(output_dir):
        log.info("%s holds only the config.yaml of a run that wrote no outputs; replacing it "
                 "(differs in %s)", output_dir, differ)
        return
    raise _refuse(output_dir, f"configuration (differs in {differ})")
