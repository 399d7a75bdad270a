"""``python -m synapse_pt.sweep``: the batched SYNAPSE sweep as a Hydra app, one job per chunk.

A thin ``@hydra.main`` over :func:`sweep`, which builds the memory as a run does
(:func:`synapse_pt.build.ingested_memory`), evaluates its slice of the configuration grid
(:mod:`synapse_pt.eval.tuning.sweep`) and writes ``sweep.parquet`` (one row per configuration) and
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
import torch
from hydra.experimental.callback import Callback
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from synapse_pt.build import ingested_memory
from synapse_pt.cli import configure_threads
from synapse_pt.eval.records.outputs import code_identity, config_hash, write_json
from synapse_pt.eval.tuning.sweep import (
    auto_chunk,
    chunk_bounds,
    draw_configs,
    merge_tables,
    sweep_table,
)
from synapse_pt.run_records import RunRecords

log = logging.getLogger("synapse_pt.sweep")

TABLE = "sweep.parquet"


def sweep(cfg: DictConfig) -> Path:
    """Evaluate configurations ``chunk_bounds(sweep.configs, sweep.chunks, sweep.chunk)`` of
    the grid drawn from ``sweep.seed``; returns the written table's path."""
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    configure_threads(cfg)
    s = cfg.sweep
    start, stop = chunk_bounds(int(s.configs), int(s.chunks), int(s.chunk))
    if not get_class(str(cfg.memory._target_)).declared_search_space().batched:
        raise ValueError(f"sweep: memory={cfg.memory._target_} has no batched sweep; the sweep "
                         "varies SYNAPSE's hyperparameters as activation columns (use "
                         "experiment=paper_main or memory=synapse; any memory: "
                         "scripts/tune_heldout.py or a multirun of synapse_pt.run)")
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
    path = output_dir / TABLE
    table.to_parquet(path)
    timing = {"ingest_seconds": ingest_seconds, "sweep_seconds": seconds,
              "configs": stop - start, "batch": batch,
              "configs_per_minute": 60 * (stop - start) / seconds if seconds > 0 else None,
              **code_identity(),
              "config_hash": config_hash(OmegaConf.to_container(cfg, resolve=True))}
    write_json(output_dir / "timing.json", timing)
    log.info("configurations %d-%d of %d: %.1f s, %s", start, stop - 1, int(s.configs), seconds,
             output_dir / TABLE)
    return path


class MergeSweepTables(Callback):
    """After a multirun, join every job's ``sweep.parquet`` into ``<sweep dir>/sweep.parquet``
    (an error names a configuration found twice or the ones missing)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        tables = sorted(sweep_dir.glob(f"*/{TABLE}"))
        merged = merge_tables(tables, expected=int(config.sweep.configs))
        merged.to_parquet(sweep_dir / TABLE)
        log.info("merged %d chunk tables (%d configurations) into %s", len(tables), len(merged),
                 sweep_dir / TABLE)
        print(f"[synapse_pt] sweep table: {sweep_dir / TABLE} ({len(merged)} configurations, "
              f"best recall@10 {merged['recall@10'].max():.4f})")


@hydra.main(version_base="1.3", config_path="configs", config_name="sweep")
def main(cfg: DictConfig) -> None:
    """CLI: one chunk of the sweep; Hydra's records and the log in the job's folder
    (:class:`~synapse_pt.run_records.RunRecords`)."""
    records = RunRecords(cfg)
    try:
        folder = Path(cfg.paths.output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        records.claim(folder, folder)
        path = sweep(cfg)
    finally:
        records.close()
    print(f"[synapse_pt] sweep chunk table: {path}")


if __name__ == "__main__":
    main()
