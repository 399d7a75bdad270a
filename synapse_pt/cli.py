"""What the Hydra entry points share: the SQLite-storage and run-folder callbacks, quiet
third-party logs, seeding, the threads setting, whether a job runs inside a multirun, errors on one
line."""

from __future__ import annotations

import logging
import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from synapse_pt.errors import ConfigError
from synapse_pt.eval.records.run_folder import OutputDirNotWritable, claim_new_folder, holds_outputs
from synapse_pt.models import threads

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
    """Apply the config's ``threads`` (:mod:`synapse_pt.models.threads`): ``auto`` registers this
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


#: the stamped folders this process made for its runs (:meth:`WritableRunDir._claim`): nothing
#: else can reuse one, so a run that fails in it leaves none behind (``synapse_pt.run``)
CLAIMED: set[Path] = set()


def drop_unused_folder(folder: str | Path) -> None:
    """Remove ``folder`` when this process made it for its run (:data:`CLAIMED`) and it holds no
    run outputs (a failed start's, an estimate's): nothing can reuse a stamped folder (the same
    command gets a new stamp). Any other folder is kept (the same command resumes in it)."""
    path = Path(folder)
    if path.resolve() in CLAIMED and path.is_dir() and not holds_outputs(path):
        shutil.rmtree(path)


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
