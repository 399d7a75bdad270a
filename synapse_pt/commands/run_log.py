"""Hydra's records of a run, written by the run itself once it has claimed its folder.

Hydra writes ``.hydra/`` (the composed config, its own config, the overrides) and opens
``<job>.log`` in a run's folder before the task starts: a run refused there (another
configuration's outputs, other data, a locked folder) would rewrite the records of the outputs it
was refused from. ``configs/hydra/default.yaml`` turns both off (``output_subdir: null``, job
logging without a file handler); :class:`RunRecords` holds the log lines in memory until the run
has passed its folder's checks, then writes ``.hydra/`` into the run's staging folder (moved into
place with the outputs) and the log, earlier lines first, into ``<job>.log``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from logging.handlers import MemoryHandler
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from synapse_pt.eval.records.outputs import naming
from synapse_pt.eval.records.run_folder import HYDRA_RECORDS

#: called once a run has passed its folder's checks: ``(staging folder, folder for the log)``;
#: returns the files it writes straight into the run's folder (the log, when it goes there):
#: :meth:`RunRecords.claim`
OnClaim = Callable[[Path, Path], Sequence[str]]

#: the format of Hydra's default job log (``hydra/job_logging/default.yaml``)
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


class RunRecords:
    """A run's log, held in memory (:meth:`__init__` attaches the buffer to the root logger) until
    :meth:`claim` writes it and Hydra's records; :meth:`close` detaches both handlers."""

    def __init__(self, task_cfg: DictConfig) -> None:
        self.task_cfg = task_cfg
        self.buffer = MemoryHandler(capacity=1 << 30, flushLevel=logging.CRITICAL + 1)
        self.file: logging.FileHandler | None = None
        logging.getLogger().addHandler(self.buffer)

    def claim(self, staged: Path, log_dir: Path) -> list[str]:
        """The run has passed its folder's checks: write Hydra's records into ``staged``/.hydra and
        the log (the lines so far, then every later one) into ``log_dir``/<job name>.log; the files
        written outside ``staged`` (the log, when ``log_dir`` is the run's folder), by name."""
        hydra = HydraConfig.get()
        records = staged / HYDRA_RECORDS
        records.mkdir(parents=True, exist_ok=True)
        for node, path in ((self.task_cfg, records / "config.yaml"),
                           (OmegaConf.create({"hydra": hydra}), records / "hydra.yaml"),
                           (hydra.overrides.task, records / "overrides.yaml")):
            with naming(path):
                OmegaConf.save(node, path)
        log_file = log_dir / f"{hydra.job.name}.log"
        self.file = logging.FileHandler(log_file)
        self.file.setFormatter(logging.Formatter(LOG_FORMAT))
        self.buffer.setTarget(self.file)
        self.buffer.flush()
        root = logging.getLogger()
        root.addHandler(self.file)
        root.removeHandler(self.buffer)
        self.buffer.close()
        return [] if log_dir == staged else [log_file.name]

    def close(self) -> None:
        """Detach the handlers (lines held for a run that never claimed its folder are dropped:
        the run wrote nothing there)."""
        root = logging.getLogger()
        for handler in (self.buffer, self.file):
            if handler is not None:
                root.removeHandler(handler)
                handler.close()
