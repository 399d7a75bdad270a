"""Experiment tracking: W&B (online / offline / disabled) or nothing, behind one small interface.

The run always finishes its tracker, also on a crash (``finish`` is called from a ``finally``), so
sweeps never hang on an open W&B run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

log = logging.getLogger(__name__)


class Tracker:
    """No-op tracker (``logger=none``): everything is in the run folder anyway."""

    name = "none"

    def log_metrics(self, metrics: Mapping[str, float]) -> None:
        pass

    def log_table(self, key: str, df: pd.DataFrame) -> None:
        pass

    def log_file(self, path: Path) -> None:
        pass

    def finish(self, exit_code: int = 0) -> None:
        pass


class WandbTracker(Tracker):
    """Logs the resolved config, flat metrics, tables and files to a W&B run."""

    name = "wandb"

    def __init__(self, *, config: Mapping[str, Any], output_dir: Path, project: str,
                 entity: str | None = None, mode: str = "offline", group: str | None = None,
                 tags: list[str] | None = None, name: str | None = None,
                 log_predictions: bool = True) -> None:
        import wandb

        if mode not in ("online", "offline", "disabled"):
            raise ValueError(f"logger.mode must be online, offline or disabled, got {mode!r}")
        self._wandb = wandb
        self.log_predictions = log_predictions
        self.run = wandb.init(project=project, entity=entity, mode=mode, group=group,
                              tags=list(tags or []), name=name, dir=str(output_dir),
                              config=dict(config), reinit="finish_previous")

    def log_metrics(self, metrics: Mapping[str, float]) -> None:
        self.run.log(dict(metrics))
        for key, value in metrics.items():
            self.run.summary[key] = value

    def log_table(self, key: str, df: pd.DataFrame) -> None:
        frame = df.copy()
        for col in frame.columns:  # W&B tables take scalars: lists become strings
            if frame[col].map(lambda v: isinstance(v, (list, tuple))).any():
                frame[col] = frame[col].map(lambda v: " ".join(map(str, v)) if v is not None
                                            else None)
        self.run.log({key: self._wandb.Table(dataframe=frame.reset_index())})

    def log_file(self, path: Path) -> None:
        self.run.save(str(path), base_path=str(path.parent), policy="now")

    def finish(self, exit_code: int = 0) -> None:
        self.run.finish(exit_code=exit_code)


def make_tracker(logger_cfg: Mapping[str, Any], *, config: Mapping[str, Any], output_dir: Path,
                 tags: list[str], run_name: str) -> Tracker:
    name = logger_cfg.get("name", "none")
    if name == "none":
        return Tracker()
    if name == "wandb":
        return WandbTracker(config=config, output_dir=output_dir,
                            project=logger_cfg.get("project", "synapse_pt"),
                            entity=logger_cfg.get("entity"), mode=logger_cfg.get("mode", "offline"),
                            group=logger_cfg.get("group"), tags=tags, name=run_name,
                            log_predictions=bool(logger_cfg.get("log_predictions", True)))
    raise ValueError(f"unknown logger {name!r} (choose none or wandb)")


def run_tracker(resolved: Mapping[str, Any], output_dir: Path) -> Tracker:
    """The tracker of a run (``logger`` group), its run named ``<experiment>/<folder>`` and tagged
    with the run's ``tags`` and its experiment (ablation) name."""
    label = resolved.get("experiment_name") or resolved["task_name"]
    tags = list(resolved.get("tags") or [])
    if label not in tags:
        tags.append(label)
    return make_tracker(resolved["logger"], config=resolved, output_dir=output_dir, tags=tags,
                        run_name=f"{label}/{output_dir.name}")


def log_run(tracker: Tracker, metrics: Mapping[str, Any], timings: Mapping[str, float],
            tables: Mapping[str, pd.DataFrame], predictions: pd.DataFrame) -> None:
    """A finished run to its tracker: the flat metrics and timings, the tables and the predictions
    (where the tracker logs them); the config is the tracker run's own. ``metrics.json`` is
    logged once it is in the run's folder (``tracker.log_file``, after the staged outputs moved
    there: W&B links the file it saves)."""
    from synapse_pt.eval.records.record import flatten_metrics

    tracker.log_metrics(flatten_metrics(metrics) | {f"timing/{k}": v for k, v in timings.items()})
    for name, table in tables.items():
        tracker.log_table(f"tables/{name}", table)
    if getattr(tracker, "log_predictions", False):
        tracker.log_table("predictions", predictions)
