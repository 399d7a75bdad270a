"""A run's own folder: claimed so that no two runs share it, locked while a run writes it, and
cleared of a replaced run's files under ``overwrite=true``.

* :func:`claim_new_folder`: a stamped folder name (``outputs/run/<date>_<time>_<microseconds>``)
  made atomically, with ``-2``, ``-3``, ... appended when another run made it first;
* :func:`holding`: the lock file :data:`LOCK_NAME` (pid, host, start time) created with
  ``O_CREAT | O_EXCL`` while a run writes the folder, removed when it ends; a second run into a
  locked folder is refused (:class:`RunFolderLocked`, naming the holder), a lock whose process is
  dead on this host is taken over (logged);
* :func:`check_output_dir`: a finished folder of another configuration is refused
  (:class:`OutputDirInUse`) unless ``overwrite=true``, which removes the replaced run's files
  (:func:`clear_outputs`).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from omegaconf import OmegaConf

from .outputs import RUN_FILES, TABLES, result_neutral_changes, without_result_neutral

log = logging.getLogger("synapse_pt.run")

#: the lock file of a folder a run is writing
LOCK_NAME = "run.lock"
#: the files whose presence makes a folder hold a configuration's outputs (a run that failed
#: before writing any of them left only its ``config.yaml``)
RUN_OUTPUTS = ("metrics.json", "predictions.parquet")


class OutputDirInUse(RuntimeError):
    """A run folder already holds the outputs of another configuration."""


class RunFolderLocked(RuntimeError):
    """Another run is writing this folder now (its lock file names it)."""


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
        release(lock)


def clear_outputs(folder: Path) -> list[str]:
    """Remove what a run writes (:data:`RUN_FILES`, the files of :data:`TABLES`) from
    ``folder``; the names removed. Hydra's own files and anything else are left."""
    removed = []
    for name in RUN_FILES:
        if (folder / name).is_file():
            (folder / name).unlink()
            removed.append(name)
    tables = folder / TABLES
    if tables.is_dir():
        for path in sorted(tables.iterdir()):
            if path.is_file():
                path.unlink()
                removed.append(f"{TABLES}/{path.name}")
    return removed


def check_output_dir(output_dir: Path, config_text: str, overwrite: bool = False) -> None:
    """Refuse to write into a folder whose outputs are another configuration's.

    The same resolved configuration resumes (its cached answers make the rerun cheap and its
    outputs identical). Settings that cannot change results
    (:data:`~synapse_pt.eval.outputs.RESULT_NEUTRAL_KEYS`: caps, concurrency, timeouts, retries,
    the tracker) are not compared: the new values are recorded in ``config.yaml`` and logged. A
    folder holding only a failed start's ``config.yaml`` (no :data:`RUN_OUTPUTS`) accepts any
    configuration; ``overwrite=true`` replaces another configuration's outputs: every file the
    replaced run wrote is removed (:func:`clear_outputs`), so none survives beside the new run's."""
    saved = output_dir / "config.yaml"
    if overwrite:
        removed = clear_outputs(output_dir)
        if removed:
            log.info("%s: overwrite=true removed the replaced run's files %s", output_dir,
                     removed)
        return
    if not saved.is_file():
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
    if not any((output_dir / name).exists() for name in RUN_OUTPUTS):
        log.info("%s holds only the config.yaml of a run that wrote no outputs; replacing it "
                 "(differs in %s)", output_dir, differ)
        return
    raise OutputDirInUse(
        f"{output_dir} holds the outputs of another configuration (differs in {differ}); "
        "choose another hydra.run.dir, rerun the same configuration to resume, or pass "
        "overwrite=true to replace them")
