"""Entry point: ``python -m synapse_pt.run [overrides]``.

A thin ``@hydra.main`` over :func:`run`, a plain function of the composed config: it claims the
run's folder (:mod:`synapse_pt.eval.run_folder`), finds and loads the data
(:mod:`synapse_pt.data.resolve`), builds the models and memory (:mod:`synapse_pt.build`),
evaluates (:mod:`synapse_pt.eval.pipeline`), records (:mod:`synapse_pt.eval.record`), writes the
outputs (:func:`~synapse_pt.eval.outputs.write_run_outputs`) and returns the metrics. Tests,
studies and sweeps call :func:`run` directly; the hydra entry point returns the configured
``objective``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
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
    in_multirun,
    one_line,
    quiet_third_party_logs,
    seed_everything,
)
from synapse_pt.data import DataFormatError, DatasetNotFoundError
from synapse_pt.data.resolve import build_audit, build_dataset
from synapse_pt.errors import ConfigError
from synapse_pt.eval.console import render_summary
from synapse_pt.eval.outputs import write_run_outputs
from synapse_pt.eval.pipeline import EvalSettings, evaluate, for_memory, require_upstream
from synapse_pt.eval.record import (
    build_tables,
    lookup_metric,
    run_identity,
    run_label,
    run_metrics,
    run_spend,
    run_timings,
)
from synapse_pt.eval.run_folder import OutputDirInUse, RunFolderLocked, check_output_dir, holding
from synapse_pt.eval.tokens import HFTokenCounter, LLMTokenCounter, TokenCounter
from synapse_pt.models.assemble import ModelNotAssembled
from synapse_pt.models.llm.base import LLMError
from synapse_pt.models.llm.budget import BudgetExceeded
from synapse_pt.models.sqlite_store import CorruptCacheError
from synapse_pt.preflight import check_run
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
    RunFolderLocked, ConfigError, ModelNotAssembled)


def run(cfg: DictConfig, refuse_fallback: str | None = None) -> dict[str, Any]:
    """Evaluate one configuration end to end; write outputs into ``cfg.paths.output_dir``.

    ``refuse_fallback`` (e.g. ``"a study"``): where a missing LoCoMo file must not fall back to the
    shipped sample; a Hydra multirun always refuses. The folder is locked while the run writes
    it (:func:`~synapse_pt.eval.run_folder.holding`: a second run into it is refused)."""
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    with holding(output_dir):
        resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        config_text = OmegaConf.to_yaml(cfg, resolve=True)
        check_output_dir(output_dir, config_text, overwrite=bool(cfg.get("overwrite", False)))
        (output_dir / "config.yaml").write_text(config_text)
        seed_everything(int(cfg.seed))
        configure_threads(cfg)
        tracker = run_tracker(resolved, output_dir)
        exit_code = 1
        try:
            metrics = evaluate_into(output_dir, cfg, resolved, tracker, refuse_fallback)
            exit_code = 0
            return metrics
        finally:
            tracker.finish(exit_code)


def evaluate_into(output_dir: Path, cfg: DictConfig, resolved: dict[str, Any], tracker: Any,
                  refuse_fallback: str | None) -> dict[str, Any]:
    """Build, evaluate and record ``cfg`` into ``output_dir`` (claimed and locked by
    :func:`run`); the metrics."""
    t0 = time.perf_counter()
    dataset = build_dataset(cfg.dataset, smoke=bool(cfg.smoke),
                            refuse_fallback=refuse_fallback or (
                                "a multirun" if in_multirun() else None))
    audit = build_audit(cfg.dataset, dataset)
    settings = for_memory(EvalSettings(**{k: v for k, v in resolved["eval"].items()
                                          if k in EvalSettings.__dataclass_fields__}),
                          memory_class(cfg))
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
    judge_served: dict[str, Any] = {}  # each judge's responses: its part of spend.json
    df, summary = evaluate(built.memory, dataset, settings=settings, token_counter=counter,
                           llm=llm, audit=audit, gold=gold, judge_served=judge_served)
    timings = run_timings(built.timings, loading, summary, built.encoder)

    prices = resolved["llm"].get("prices") or {}
    identity = run_identity(resolved, dataset=dataset, audit=audit,
                            memory=built.memory.describe(), embedder=built.encoder.name,
                            llm=llm, gold=gold)
    names = run_category_names(cfg)
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
    log_run(tracker, metrics, timings, tables, df, output_dir / "metrics.json")
    log.info("outputs written to %s", output_dir.resolve())
    print(f"[synapse_pt] outputs: {output_dir.resolve()}")
    return metrics


@hydra.main(version_base="1.3", config_path="../configs", config_name="run")
def main(cfg: DictConfig) -> float:
    """CLI: run, print the flat metrics, return ``cfg.objective`` (what sweepers optimise)."""
    quiet_third_party_logs()
    try:
        metrics = run(cfg)
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
    print(render_summary(metrics, run_category_names(cfg),
                         label=run_label(metrics["identity"]),
                         output_dir=str(Path(cfg.paths.output_dir).resolve())), end="")
    value = lookup_metric(metrics, cfg.objective)
    print(f"[synapse_pt] objective {cfg.objective} = {value:.6g}")
    return value


if __name__ == "__main__":
    main()
