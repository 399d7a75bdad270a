"""What the Hydra entry points share: the SQLite-storage callback and quiet third-party logs."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

# third-party loggers that log every request at INFO (httpx, and httpx2 under the openai SDK: one
# line per LLM call)
QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "openai", "urllib3", "filelock")


def quiet_third_party_logs(level: int = logging.WARNING) -> None:
    """Raise the level of chatty third-party loggers (their warnings and errors still show)."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(level)


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
