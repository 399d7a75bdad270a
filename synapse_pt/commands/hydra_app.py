"""What the Hydra entry points share: the error boundary, the SQLite-storage and run-folder
callbacks, quiet third-party logs, seeding, the threads setting, whether a job runs inside a
multirun, errors on one line.

The error boundary: every entry point runs its work through :func:`report_failures` (inside a
Hydra app's task, or around a script's ``main``) and a Hydra app's ``__main__`` through
:func:`entry_point`. SIGTERM (a scheduler's stop, ``kill``) is raised as :class:`Interrupted`, a
``KeyboardInterrupt``, so it takes Ctrl-C's path: the run's ``finally`` blocks release its lock and
remove its staging folder, and one line says what was kept (exit status 130 for Ctrl-C, 143 for
SIGTERM). An :class:`OSError` anywhere (a read-only folder, no space left, a file over
``ulimit -f``, a permission) is one line naming the path, the cause and what was kept; the errors a
caller names (the run's user-facing ones) are their own one line. A failed or interrupted command
leaves no folder it made for itself without outputs (:func:`drop_claimed`).
"""

from __future__ import annotations

import errno
import logging
import os
import random
import shutil
import signal
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from synapse_pt.cache.sqlite import CorruptCacheError
from synapse_pt.common import threads
from synapse_pt.common.errors import ConfigError
from synapse_pt.data import DataFormatError, DatasetNotFoundError
from synapse_pt.eval.records.commit import (
    JOURNAL,
    MANIFEST,
    CommitInterrupted,
    FolderLocked,
    holding,
)
from synapse_pt.eval.records.run_folder import (
    OutputDirInUse,
    OutputDirNotWritable,
    claim_new_folder,
    holds_outputs,
)
from synapse_pt.models.assemble import ModelNotAssembled
from synapse_pt.models.llm.base import LLMError
from synapse_pt.models.llm.ledger import holds_spending

T = TypeVar("T")
log = logging.getLogger("synapse_pt.run")

#: errors whose message says all a user needs (what failed, which file, record, key or server, and
#: what to do): an entry point prints them as one line instead of a traceback (an LLM server's
#: timeout, connection error or unknown model ends deep in asyncio otherwise)
USER_FACING_ERRORS: tuple[type[BaseException], ...] = (
    LLMError, CorruptCacheError, DataFormatError, DatasetNotFoundError, OutputDirInUse,
    FolderLocked, OutputDirNotWritable, CommitInterrupted, ConfigError, ModelNotAssembled)
#: exit statuses: an error said in one line; an interruption by Ctrl-C, by SIGTERM (128 + signal)
ERROR_EXIT_CODE = 1
INTERRUPT_EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}
#: environment variables that choose folders the project writes: named in an error about a path
#: below them
ROOT_VARIABLES = ("SYNAPSE_CACHE", "SYNAPSE_JOBS_DIR", "SYNAPSE_ROOT")


class Interrupted(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises ``KeyboardInterrupt`` (:func:`sigterm_as_interrupt`)."""


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`Interrupted` in the ``with`` block (the main thread's; elsewhere a
    no-op: signals go to the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise Interrupted("SIGTERM")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _signal_name(err: KeyboardInterrupt) -> str:
    return "SIGTERM" if isinstance(err, Interrupted) else "SIGINT"


def os_error_line(err: OSError) -> str:
    """``<path>: <cause> (<errno name>[; VARIABLE=value])`` of an :class:`OSError` (the variable
    of :data:`ROOT_VARIABLES` that chose a folder above the path); the error's own message when it
    names no file (the project's, which say what and where)."""
    if err.filename is None:
        return one_line(err)
    path = os.fsdecode(err.filename)
    reason = os.strerror(err.errno) if err.errno else (err.strerror or str(err))
    notes = [errno.errorcode[err.errno]] if err.errno in errno.errorcode else []
    for variable in ROOT_VARIABLES:
        value = os.environ.get(variable)
        if value and (path == value or path.startswith(value.rstrip("/") + "/")):
            notes.append(f"{variable}={value}")
    target = f" -> {os.fsdecode(err.filename2)}" if err.filename2 is not None else ""
    return f"{path}{target}: {reason}" + (f" ({'; '.join(notes)})" if notes else "")


def report_failures(body: Callable[[], T], *, kept: Callable[[], str],
                    errors: tuple[type[BaseException], ...] = ()) -> T:
    """``body()`` inside the error boundary: SIGTERM taken as Ctrl-C; an interruption, one of
    ``errors`` (a message that says all a user needs) or any :class:`OSError` printed as one line
    on stderr (``kept()`` says what is kept after an interruption or an OSError) and logged, then
    :class:`SystemExit` with :data:`ERROR_EXIT_CODE` or the interruption's status. A cache's
    ``sqlite3.OperationalError`` (a full disk's "disk I/O error", a read-only cache file; the
    message names the file) is taken as an :class:`OSError`.
    ``HYDRA_FULL_ERROR=1`` raises errors as they are (the traceback)."""
    try:
        with sigterm_as_interrupt():
            return body()
    except KeyboardInterrupt as err:
        name = _signal_name(err)
        # a note says what happened instead (an interruption delivered after a commit ended)
        said = "; ".join(getattr(err, "__notes__", [])) or kept()
        log.error("interrupted by %s: %s", name, said)
        print(f"[synapse_pt] interrupted by {name}: {said}", file=sys.stderr)
        raise SystemExit(INTERRUPT_EXIT_CODES[name]) from None
    except (*errors, OSError, sqlite3.OperationalError) as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise  # the whole traceback, as Hydra gives it for any other error
        if errors and isinstance(err, errors):
            line = one_line(err)
        elif isinstance(err, OSError):
            line = f"{os_error_line(err)}; {kept()}"
        else:  # a cache's SQLite on a full disk, a read-only file (named by the store)
            line = f"{one_line(err)}; {kept()}"
        log.error("%s: %s", type(err).__name__, line)
        print(f"[synapse_pt] error: {line} (HYDRA_FULL_ERROR=1 shows the traceback)",
              file=sys.stderr)
        raise SystemExit(ERROR_EXIT_CODE) from None


def entry_point(main: Callable[[], object]) -> None:
    """Run a Hydra app's ``main`` (its ``__main__``) with SIGTERM taken as Ctrl-C; an interruption
    outside the task (Hydra making a job's folder, a sweeper choosing its next trial) is one line.
    A command that fails or is interrupted leaves no folder it made for itself without outputs
    (:func:`drop_claimed`)."""
    try:
        with sigterm_as_interrupt():
            main()
    except KeyboardInterrupt as err:
        drop_claimed()
        name = _signal_name(err)
        print(f"[synapse_pt] interrupted by {name}: no unfinished run was committed; the caches "
              "keep what was computed (the same command resumes)", file=sys.stderr)
        raise SystemExit(INTERRUPT_EXIT_CODES[name]) from None
    except BaseException as err:
        if not (isinstance(err, SystemExit) and err.code in (0, None)):
            drop_claimed()
        raise


# third-party loggers that log every request at INFO (httpx, and httpx2 under the openai SDK: one
# line per LLM call)
QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "openai", "urllib3", "filelock")


def quiet_third_party_logs(level: int = logging.WARNING) -> None:
    """Raise the level of chatty third-party loggers (their warnings and errors still show)."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(level)


def in_multirun() -> bool:
    """True inside a Hydra multirun job (``-m``: sweeps, Optuna studies, launchers)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (the keyword extractor, ties and sampling are deterministic)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def configure_threads(cfg: DictConfig) -> int:
    """Apply the config's ``threads`` (:mod:`synapse_pt.common.threads`): ``auto`` registers this
    job among the machine's live ones; a bad value is one line naming the key."""
    try:
        n = threads.configure(cfg.get("threads", threads.AUTO))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    logging.getLogger("synapse_pt.run").info("threads: %s (%d now)",
                                             cfg.get("threads", threads.AUTO), n)
    return n


def one_line(err: BaseException) -> str:
    """An error's message on one line (a multi-line message's lines joined by ``; ``)."""
    return "; ".join(part.strip() for part in str(err).splitlines() if part.strip())


class SqliteStorageDir(Callback):
    """Hydra callback: create the folder of an ``sqlite:///`` sweeper storage before the sweep.

    SQLite does not create folders, and the Optuna sweeper opens its study (``storage``, e.g.
    ``sqlite:///.cache/optuna.sqlite``) before any job has run. Used by
    ``configs/hparams_search/synapse_optuna.yaml``.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        storage = OmegaConf.select(config, "hydra.sweeper.storage")
        if isinstance(storage, str) and storage.startswith("sqlite:///"):
            path = Path(storage.removeprefix("sqlite:///"))
            path.parent.mkdir(parents=True, exist_ok=True)


def ensure_writable(folder: str | Path, key: str) -> Path:
    """Create ``folder`` and write (then remove) a probe file in it; an
    :class:`OutputDirNotWritable` naming the folder, its config key and the cause otherwise."""
    path = Path(folder)
    probe = path / f".synapse_pt-write-probe-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise OutputDirNotWritable(
            f"{key}={path}: the run's folder cannot be written "
            f"({type(err).__name__}: {err.strerror or err}); choose a writable folder with "
            f"{key}=...") from err
    return path


#: the stamped folders this process made for its runs and multiruns (:meth:`WritableRunDir._claim`):
#: nothing else can reuse one, so a command that fails in it leaves none behind
CLAIMED: set[Path] = set()
#: each multirun's sweep folder (stamped or given) and the entries it held before the multirun
#: (:meth:`WritableRunDir.on_multirun_start`)
SWEEPS: dict[Path, set[str]] = {}


def committed(folder: Path) -> bool:
    """Whether ``folder`` holds what must be kept: outputs a run committed (its manifest, a
    commit a killed process left to complete, or a run's outputs from before manifests), or a
    spend ledger with a bill in it (:func:`~synapse_pt.models.llm.ledger.holds_spending`: the
    same command resumes there with what it spent counted)."""
    return ((folder / MANIFEST).exists() or (folder / JOURNAL).exists()
            or holds_outputs(folder) or holds_spending(folder))


def _remove(folder: Path) -> None:
    """Remove ``folder`` unless a process holds its lock (a job still running elsewhere)."""
    try:
        with holding(folder):
            pass
    except FolderLocked:
        return
    shutil.rmtree(folder)


def drop_unused_folder(folder: str | Path) -> None:
    """Remove ``folder`` when this process made it for its run (:data:`CLAIMED`) and it holds no
    committed outputs (a failed start's, an estimate's): nothing can reuse a stamped folder (the
    same command gets a new stamp). Any other folder is kept (the same command resumes in it)."""
    path = Path(folder)
    if path.resolve() in CLAIMED and path.is_dir() and not committed(path):
        _remove(path)


def drop_claimed() -> None:
    """After a command failed or was interrupted: in each multirun's sweep folder, the job folders
    it made that hold no committed outputs (every one of them in a stamped sweep folder; in a
    given one, those left empty), then a stamped sweep folder whose jobs committed nothing (a
    refused search space, an interruption before the first job ended), then every stamped run
    folder of this process without outputs (:func:`drop_unused_folder`)."""
    for sweep, before in SWEEPS.items():
        if not sweep.is_dir():
            continue
        claimed = sweep.resolve() in CLAIMED
        for job in sorted(p for p in sweep.iterdir() if p.is_dir() and p.name not in before):
            if claimed and not committed(job):
                _remove(job)
            elif not any(job.iterdir()):
                job.rmdir()
        if claimed and not any(committed(p) for p in sweep.iterdir() if p.is_dir()):
            _remove(sweep)
    for folder in sorted(CLAIMED):
        if folder not in {s.resolve() for s in SWEEPS}:
            drop_unused_folder(folder)


class WritableRunDir(Callback):
    """Hydra callback: claim a stamped run folder, or a stamped multirun's sweep folder, for this
    run alone (:meth:`_claim`), and check that it (``hydra.run.dir``; a multirun's
    ``hydra.sweep.dir``) can be written before the run starts, which otherwise fails as "Unable to
    configure handler 'file'" with the cause buried in a traceback. Exits with one line naming the
    folder (status 2). Used by ``configs/hydra/default.yaml``."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._claim(config, "run")
        self._check(config, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._claim(config, "sweep")
        self._check(config, "hydra.sweep.dir")
        sweep = Path(str(OmegaConf.select(config, "hydra.sweep.dir")))
        SWEEPS[sweep] = {p.name for p in sweep.iterdir()} if sweep.is_dir() else set()

    @staticmethod
    def _claim(config: DictConfig, mode: str) -> None:
        """A stamped folder (``hydra.run.dir``/``hydra.sweep.dir`` with ``${now:...}``, the
        default) is made here, atomically, and renamed ``<stamp>-2``, ``-3``, ... when another run
        made it first (:func:`~synapse_pt.eval.records.run_folder.claim_new_folder`): two runs (two
        multiruns) never share it. A multirun's jobs compose their configs anew from its hydra
        overrides, so the claimed sweep folder is added to them. A literal folder is left as given
        (the same command resumes there; the run's lock refuses a second run while one writes
        it)."""
        raw = OmegaConf.to_container(config.hydra[mode], resolve=False).get("dir")
        if not isinstance(raw, str) or "${now:" not in raw:
            return
        folder = str(OmegaConf.select(config, f"hydra.{mode}.dir"))
        try:
            claimed = claim_new_folder(folder)
        except OSError:
            return  # _check names the folder and the cause
        CLAIMED.add(claimed.resolve())
        if str(claimed) != folder:
            with read_write(config), open_dict(config):
                config.hydra[mode].dir = str(claimed)
                if mode == "sweep":
                    quoted = str(claimed).replace("'", "\\'")
                    config.hydra.overrides.hydra.append(f"hydra.sweep.dir='{quoted}'")

    @staticmethod
    def _check(config: DictConfig, key: str) -> None:
        folder = OmegaConf.select(config, key)
        if folder is None:
            return
        try:
            ensure_writable(str(folder), key)
        except OutputDirNotWritable as err:
            print(f"[synapse_pt] error: {err}", file=sys.stderr)
            raise SystemExit(2) from err
