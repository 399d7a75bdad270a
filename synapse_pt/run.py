"""Entry point: ``python -m synapse_pt.run [overrides]``.

A thin ``@hydra.main`` over :func:`run`, a plain function of the composed config: it claims the
run's folder (:mod:`synapse_pt.eval.records.run_folder`), finds and loads the data
(:mod:`synapse_pt.data.resolve`), builds the models and memory (:mod:`synapse_pt.build`),
evaluates (:mod:`synapse_pt.eval.qa.pipeline`), records (:mod:`synapse_pt.eval.records.record`),
writes the
outputs (:func:`~synapse_pt.eval.records.outputs.write_run_outputs`) into the folder's staging
folder,
moves them into place once the run has succeeded, and returns the metrics. Tests,
studies and sweeps call :func:`run` directly; the hydra entry point returns the configured
``objective``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from synapse_pt.build import (
    build_llm,
    memory_class,
    run_category_names,
    run_memory,
    text_cache,
)
from synapse_pt.cli import (
    configure_threads,
    drop_unused_folder,
    in_multirun,
    one_line,
    quiet_third_party_logs,
    seed_everything,
)
from synapse_pt.data import DataFormatError, DatasetNotFoundError
from synapse_pt.data.resolve import build_audit, build_dataset
from synapse_pt.errors import ConfigError
from synapse_pt.eval.qa.pipeline import EvalSettings, evaluate, for_memory, require_upstream
from synapse_pt.eval.qa.tokens import HFTokenCounter, LLMTokenCounter, TokenCounter
from synapse_pt.eval.records.outputs import write_run_outputs
from synapse_pt.eval.records.record import (
    build_tables,
    lookup_metric,
    run_identity,
    run_label,
    run_metrics,
    run_spend,
    run_timings,
)
from synapse_pt.eval.records.run_folder import (
    OutputDirInUse,
    OutputDirNotWritable,
    RunFolderLocked,
    check_output_dir,
    check_same_data,
    commit,
    holding,
    holds_outputs,
    staging,
    writing,
)
from synapse_pt.eval.reports.console import render_summary
from synapse_pt.models.assemble import ModelNotAssembled
from synapse_pt.models.llm.base import LLMError
from synapse_pt.models.llm.budget import BudgetExceeded
from synapse_pt.models.sqlite_store import CorruptCacheError
from synapse_pt.preflight import check_run
from synapse_pt.run_records import RunRecords
from synapse_pt.study_key import register_resolvers
from synapse_pt.tracking import log_run, run_tracker

log = logging.getLogger("synapse_pt.run")
register_resolvers()  # ${study_key:} in configs/hparams_search/

BUDGET_EXIT_CODE = 3  # the exit status of a run stopped by llm.max_cost_usd
ERROR_EXIT_CODE = 1  # a run ended by one of USER_FACING_ERRORS

#: errors whose message says all a user needs (what failed, which file, record, key or server, and
#: what to do): the CLI prints them as one line instead of a traceback (an LLM server's timeout,
#: connection error or unknown model ends deep in asyncio otherwise)
USER_FACING_ERRORS: tuple[type[BaseException], ...] = (
    LLMError, CorruptCacheError, DataFormatError, DatasetNotFoundError, OutputDirInUse,
    RunFolderLocked, OutputDirNotWritable, ConfigError, ModelNotAssembled)


#: called once a run has passed its folder's checks: ``(staging folder, folder for the log)``
OnClaim = Callable[[Path, Path], None]


def run(cfg: DictConfig, refuse_fallback: str | None = None,
        on_claim: OnClaim | None = None) -> dict[str, Any]:
    """Evaluate one configuration end to end; write outputs into ``cfg.paths.output_dir``.

    ``refuse_fallback`` (e.g. ``"a study"``): where a missing LoCoMo file must not fall back to the
    shipped sample; a Hydra multirun always refuses. The folder is locked while the run writes
    it (:func:`~synapse_pt.eval.records.run_folder.holding`: a second run into it is refused);
    another
    configuration's or other data's outputs there are refused unless ``overwrite=true``
    (:func:`~synapse_pt.eval.records.run_folder.check_output_dir`,
    :func:`~synapse_pt.eval.records.run_folder.check_same_data`). The outputs are written into the
    folder's staging folder and replace its own only when the run has succeeded
    (:func:`~synapse_pt.eval.records.run_folder.commit`). ``on_claim`` (the CLI's Hydra records) is
    called
    once every check has passed, before anything is written: with the staging folder and the
    folder the log goes to (the staging folder when the run replaces another's outputs)."""
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    overwrite = bool(cfg.get("overwrite", False))
    with holding(output_dir), staging(output_dir) as staged:
        resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        config_text = OmegaConf.to_yaml(cfg, resolve=True)
        check_output_dir(output_dir, config_text, overwrite=overwrite)
        seed_everything(int(cfg.seed))
        configure_threads(cfg)
        t0 = time.perf_counter()
        dataset = build_dataset(cfg.dataset, smoke=bool(cfg.smoke),
                                refuse_fallback=refuse_fallback or (
                                    "a multirun" if in_multirun() else None))
        check_same_data(output_dir, dataset.sha256, overwrite=overwrite)
        replacing = overwrite and holds_outputs(output_dir)
        (staged / "config.yaml").write_text(config_text)
        if on_claim is not None:
            on_claim(staged, staged if replacing else output_dir)
        tracker = run_tracker(resolved, output_dir)
        exit_code = 1
        try:
            with writing(output_dir):
                metrics = evaluate_into(staged, cfg, resolved, dataset, tracker, t0)
                commit(staged, output_dir, replace=overwrite)
            tracker.log_file(output_dir / "metrics.json")
            log.info("outputs written to %s", output_dir.resolve())
            print(f"[synapse_pt] outputs: {output_dir.resolve()}")
            exit_code = 0
            return metrics
        finally:
            tracker.finish(exit_code)


def evaluate_into(output_dir: Path, cfg: DictConfig, resolved: dict[str, Any], dataset: Any,
                  tracker: Any, t0: float) -> dict[str, Any]:
    """Build, evaluate and record ``cfg`` on ``dataset`` (loaded since ``t0``) into ``output_dir``
    (the staging folder of the folder :func:`run` claimed and locked); the metrics."""
    audit = build_audit(cfg.dataset, dataset)
    settings = for_memory(EvalSettings(**{k: v for k, v in resolved["eval"].items()
                                          if k in EvalSettings.__dataclass_fields__}),
                          memory_class(cfg), dataset)
    # what can be checked without ingesting stops the run before the slow part: the answer
    # model's settings, the objective, a missing prompt file
    check_run(cfg, dataset, settings)
    require_upstream(settings)
    llm = build_llm(cfg.llm)
    derived = text_cache(cfg)  # token counts, BM25 analyses, sentence splits
    loading = time.perf_counter() - t0
    built = run_memory(cfg, resolved, dataset, llm, derived)

    counter: TokenCounter = (LLMTokenCounter(llm) if llm is not None
                             else HFTokenCounter(cfg.eval.get("context_tokenizer"),
                                                 cache=derived))
    gold = str(cfg.dataset.get("gold", "official"))
    names = run_category_names(cfg)
    judge_served: dict[str, Any] = {}  # each judge's responses: its part of spend.json
    df, summary = evaluate(built.memory, dataset, settings=settings, token_counter=counter,
                           llm=llm, audit=audit, gold=gold, judge_served=judge_served,
                           category_names=names)
    timings = run_timings(built.timings, loading, summary, built.encoder)

    prices = resolved["llm"].get("prices") or {}
    identity = run_identity(resolved, dataset=dataset, audit=audit,
                            memory=built.memory.describe(), embedder=built.encoder.name,
                            llm=llm, gold=gold)
    metrics = run_metrics(df, summary, identity, settings=settings, names=names,
                          context_tokenizer=counter.name, llm=llm, prices=prices,
                          smoke=bool(cfg.smoke), answerable=dataset.answerable,
                          unanswerable=dataset.unanswerable)
    # every per-question row names the build it came from (an LLM-free stand-in is named so)
    df.insert(0, "build", str(identity["memory"].get("build")
                              or identity["memory"].get("memory", "")))
    tables = build_tables(metrics, names, run_label=run_label(identity))
    write_run_outputs(output_dir, predictions=df, metrics=metrics, timings=timings,
                      spend=run_spend(llm, prices, judge_served), tables=tables)
    log_run(tracker, metrics, timings, tables, df)
    return metrics


@hydra.main(version_base="1.3", config_path="../configs", config_name="run")
def main(cfg: DictConfig) -> float:
    """CLI: run, print the flat metrics, return ``cfg.objective`` (what sweepers optimise).
    Hydra's records and the log are written by :class:`~synapse_pt.run_records.RunRecords` once
    the run has claimed its folder; a stamped folder of a run that failed is removed
    (:func:`~synapse_pt.cli.drop_unused_folder`)."""
    quiet_third_party_logs()
    records = RunRecords(cfg)
    try:
        metrics = run_reporting_errors(cfg, records)
    except BaseException:
        records.close()
        drop_unused_folder(cfg.paths.output_dir)
        raise
    records.close()
    print(render_summary(metrics, run_category_names(cfg),
                         label=run_label(metrics["identity"]),
                         output_dir=str(Path(cfg.paths.output_dir).resolve())), end="")
    value = lookup_metric(metrics, cfg.objective)
    print(f"[synapse_pt] objective {cfg.objective} = {value:.6g}")
    return value


def run_reporting_errors(cfg: DictConfig, records: RunRecords) -> dict[str, Any]:
    """:func:`run` with Hydra's records; a budget stop (exit status 3) and the errors of
    :data:`USER_FACING_ERRORS` (exit status 1) logged and printed as one line."""
    try:
        return run(cfg, on_claim=records.claim)
    except BudgetExceeded as err:  # a clean stop: what was answered is cached
        log.error("%s", err)
        print(f"[synapse_pt] stopped: {err}", file=sys.stderr)
        sys.exit(BUDGET_EXIT_CODE)
    except USER_FACING_ERRORS as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise  # the whole traceback, as Hydra gives it for any other error
        log.error("%s: %s", type(err).__name__, err)
        print(f"[synapse_pt] error: {one_line(err)} (HYDRA_FULL_ERROR=1 shows the traceback)",
              file=sys.stderr)
        sys.exit(ERROR_EXIT_CODE)


if __name__ == "__main__":
    main()
