"""``python -m synapse_pt.sweep``: the batched SYNAPSE sweep as a Hydra app, one job per chunk.

A thin ``@hydra.main`` over :func:`sweep`, which builds the memory as a run does
(:func:`synapse_pt.commands.build.ingested_memory`), evaluates its slice of the configuration grid
(:mod:`synapse_pt.eval.tuning.grid`) and writes ``sweep.parquet`` (one row per configuration) and
``timing.json`` into the job's folder. As a multirun over ``sweep.chunk`` the jobs run through
any Hydra launcher (``hydra/launcher=slurm``: submitit on a cluster; ``local``: processes here),
and :class:`MergeSweepTables` joins their tables into ``<sweep dir>/sweep.parquet``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import hydra
import pandas as pd
import torch
from hydra.experimental.callback import Callback
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from synapse_pt.commands.build import ingested_memory
from synapse_pt.commands.hydra_app import (
    USER_FACING_ERRORS,
    configure_threads,
    drop_unused_folder,
    report_failures,
)
from synapse_pt.commands.run_log import OnClaim, RunRecords
from synapse_pt.common.resources import config_dir
from synapse_pt.eval.records.commit import commit, committing, holding, staging
from synapse_pt.eval.records.outputs import (
    code_identity,
    config_hash,
    naming,
    run_config,
    write_json,
)
from synapse_pt.eval.records.run_folder import HYDRA_RECORDS
from synapse_pt.eval.tuning.grid import (
    auto_chunk,
    chunk_bounds,
    draw_configs,
    merge_tables,
    sweep_table,
)

log = logging.getLogger("synapse_pt.sweep")

TABLE = "sweep.parquet"


def sweep(cfg: DictConfig, on_claim: OnClaim | None = None) -> Path:
    """Evaluate configurations ``chunk_bounds(sweep.configs, sweep.chunks, sweep.chunk)`` of
    the grid drawn from ``sweep.seed``; returns the written table's path. The job's folder is
    written as a run's (:mod:`synapse_pt.eval.records.commit`): locked, its files (``config.yaml``,
    the table, ``timing.json``, Hydra's records through ``on_claim``) staged and committed when the
    job has succeeded."""
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    with holding(output_dir), staging(output_dir) as staged:
        in_place = on_claim(staged, output_dir) if on_claim is not None else []
        with naming(staged / "config.yaml"):
            (staged / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        table, timing = sweep_chunk(cfg)
        with naming(staged / TABLE):
            table.to_parquet(staged / TABLE)
        write_json(staged / "timing.json", timing)
        commit(output_dir, in_place=in_place, legacy=legacy_sweep_files)
    return output_dir / TABLE


def sweep_chunk(cfg: DictConfig) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The sweep table of this job's configurations and its ``timing.json``."""
    configure_threads(cfg)
    s = cfg.sweep
    start, stop = chunk_bounds(int(s.configs), int(s.chunks), int(s.chunk))
    if not get_class(str(cfg.memory._target_)).declared_search_space().batched:
        raise ValueError(f"sweep: memory={cfg.memory._target_} has no batched sweep; the sweep "
                         "varies SYNAPSE's hyperparameters as activation columns (use "
                         "experiment=paper_main or memory=synapse; any memory: "
                         "scripts/tune_heldout.py or a multirun of synapse_pt.commands.run)")
    t0 = time.perf_counter()
    memory, dataset = ingested_memory(cfg, "a sweep")
    ingest_seconds = time.perf_counter() - t0
    questions = list(dataset.questions())
    device = str(cfg.device)
    if s.batch == "auto":
        batch = auto_chunk(memory, questions, device, stop - start)
    elif isinstance(s.batch, int) and not isinstance(s.batch, bool) and s.batch >= 1:
        batch = int(s.batch)
    else:
        raise ValueError(f"sweep.batch must be auto or an integer >= 1, got {s.batch!r}")
    t0 = time.perf_counter()
    table = sweep_table(memory, questions, draw_configs(int(s.configs), int(s.seed)),
                        start=start, stop=stop, chunk_size=batch, device=device)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    timing = {"ingest_seconds": ingest_seconds, "sweep_seconds": seconds,
              "configs": stop - start, "batch": batch,
              "configs_per_minute": 60 * (stop - start) / seconds if seconds > 0 else None,
              **code_identity(),
              "config_hash": config_hash(run_config(OmegaConf.to_container(cfg, resolve=True)))}
    log.info("configurations %d-%d of %d: %.1f s", start, stop - 1, int(s.configs), seconds)
    return table, timing


def legacy_sweep_files(folder: Path) -> list[str]:
    """What a sweep job of a version before manifests wrote into its folder."""
    if not (folder / TABLE).is_file():
        return []
    records = [str(p.relative_to(folder)) for p in sorted((folder / HYDRA_RECORDS).glob("*"))]
    return ["config.yaml", TABLE, "timing.json", "sweep.log", *records]


class MergeSweepTables(Callback):
    """After a multirun, join every job's ``sweep.parquet`` into ``<sweep dir>/sweep.parquet``
    (an error names a configuration found twice or the ones missing)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        tables = sorted(sweep_dir.glob(f"*/{TABLE}"))
        merged = merge_tables(tables, expected=int(config.sweep.configs))
        with committing(sweep_dir, legacy=lambda folder: [TABLE]) as staged, \
                naming(staged / TABLE):
            merged.to_parquet(staged / TABLE)
        log.info("merged %d chunk tables (%d configurations) into %s", len(tables), len(merged),
                 sweep_dir / TABLE)
        print(f"[synapse_pt] sweep table: {sweep_dir / TABLE} ({len(merged)} configurations, "
              f"best recall@10 {merged['recall@10'].max():.4f})")


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="sweep")
def main(cfg: DictConfig) -> None:
    """CLI: one chunk of the sweep inside the error boundary
    (:func:`~synapse_pt.commands.hydra_app.report_failures`); Hydra's records and the log in the
    job's folder (:class:`~synapse_pt.commands.run_log.RunRecords`)."""
    records = RunRecords(cfg)
    folder = Path(cfg.paths.output_dir)
    try:
        path = report_failures(lambda: sweep(cfg, on_claim=records.claim),
                               kept=lambda: f"nothing of this job was committed: {folder} holds "
                                            "what it held; the caches keep what was computed",
                               errors=USER_FACING_ERRORS)
    except BaseException:
        records.close()
        drop_unused_folder(folder)
        raise
    records.close()
    print(f"[synapse_pt] sweep chunk table: {path}")

