"""Entry point: ``python -m synapse_pt.run [overrides]``.

A thin ``@hydra.main`` over :func:`run`, a plain function of the composed config: it claims the
run's folder (:mod:`synapse_pt.eval.records.run_folder`), finds and loads the data
(:mod:`synapse_pt.data.resolve`), builds the models and memory (:mod:`synapse_pt.commands.build`),
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
import sys
import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from synapse_pt.commands.build import (
    build_llm,
    run_category_names,
    run_memory,
    text_cache,
)
from synapse_pt.commands.hydra_app import (
    CLAIMED,
    USER_FACING_ERRORS,
    configure_threads,
    drop_unused_folder,
    in_multirun,
    quiet_third_party_logs,
    report_failures,
    seed_everything,
)
from synapse_pt.commands.preflight import check_run, check_settings, eval_settings
from synapse_pt.commands.run_log import OnClaim, RunRecords
from synapse_pt.commands.study_key import register_resolvers
from synapse_pt.commands.tracking import log_run, run_tracker
from synapse_pt.common.errors import ConfigError
from synapse_pt.common.resources import config_dir
from synapse_pt.data.resolve import build_audit, build_dataset
from synapse_pt.eval.qa.pipeline import EvalSettings, evaluate, require_upstream
from synapse_pt.eval.qa.tokens import HFTokenCounter, LLMTokenCounter, TokenCounter
from synapse_pt.eval.records.commit import commit, holding, staging
from synapse_pt.eval.records.outputs import naming, write_run_outputs
from synapse_pt.eval.records.record import (
    RunCategories,
    build_tables,
    lookup_metric,
    run_identity,
    run_label,
    run_metrics,
    run_spend,
    run_timings,
)
from synapse_pt.eval.records.run_folder import (
    check_output_dir,
    check_same_data,
    holds_outputs,
    legacy_run_files,
    writing,
)
from synapse_pt.eval.reports.console import render_summary
from synapse_pt.models.llm.budget import BudgetExceeded, ledger_spend
from synapse_pt.models.llm.ledger import LEDGER_FILE, holds_spending

log = logging.getLogger("synapse_pt.run")
register_resolvers()  # ${study_key:} in configs/hparams_search/

BUDGET_EXIT_CODE = 3  # the exit status of a run stopped by llm.max_cost_usd
#: the folders this process's runs committed their outputs into (what an error after it says)
COMMITTED: set[Path] = set()


def command_ledger(cfg: DictConfig) -> Path:
    """The spend ledger of the command running ``cfg`` (:mod:`synapse_pt.models.llm.ledger`):
    a multirun's jobs share one in the sweep folder, a run has its own in its folder (a resumed
    run finds what it spent before)."""
    if in_multirun():
        from hydra.core.hydra_config import HydraConfig

        return Path(HydraConfig.get().sweep.dir) / LEDGER_FILE
    return Path(cfg.paths.output_dir) / LEDGER_FILE


def run(cfg: DictConfig, refuse_fallback: str | None = None,
        on_claim: OnClaim | None = None, ledger: Path | None = None) -> dict[str, Any]:
    """Evaluate one configuration end to end; write outputs into ``cfg.paths.output_dir``.

    ``refuse_fallback`` (e.g. ``"a study"``): where a missing LoCoMo file must not fall back to the
    shipped sample; a Hydra multirun always refuses. The folder is locked while the run writes
    it (:func:`~synapse_pt.eval.records.commit.holding`: a second run into it is refused; a
    commit a killed run left is completed first); another configuration's or other data's outputs
    there are refused unless ``overwrite=true``
    (:func:`~synapse_pt.eval.records.run_folder.check_output_dir`,
    :func:`~synapse_pt.eval.records.run_folder.check_same_data`). The outputs are written into the
    folder's staging folder and replace its own only when the run has succeeded
    (:func:`~synapse_pt.eval.records.commit.commit`: a kill at any moment leaves the old outputs
    or the new ones whole). ``on_claim`` (the CLI's Hydra records) is called once every check has
    passed, before anything is written: with the staging folder and the folder the log goes to
    (the staging folder when the run replaces another's outputs); it returns the files it writes
    straight into the folder (the log), which the commit records as the run's. ``ledger``: the
    spend ledger of the command this run is part of (a study's); by default
    :func:`command_ledger`."""
    settings = check_settings(cfg)  # before anything is made or written
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
        check_same_data(output_dir, dataset, overwrite=overwrite)
        # a benchmark's own judge is what ``eval.judge_protocol=system`` means on it
        settings = eval_settings(cfg, dataset) if dataset.judge else settings
        check_run(cfg, dataset, settings)  # what needs the questions asked: the objective
        replacing = overwrite and holds_outputs(output_dir)
        with writing(output_dir):
            with naming(staged / "config.yaml"):
                (staged / "config.yaml").write_text(config_text)
            in_place = (on_claim(staged, staged if replacing else output_dir)
                        if on_claim is not None else [])
        tracker = run_tracker(resolved, output_dir)
        exit_code = 1
        try:
            with writing(output_dir):
                metrics = evaluate_into(staged, cfg, resolved, dataset, settings, tracker, t0,
                                        ledger or command_ledger(cfg))
                objective_value(metrics, str(cfg.objective))  # the old outputs stay if not
                commit(output_dir, in_place=in_place, legacy=legacy_run_files)
            COMMITTED.add(output_dir.resolve())
            tracker.log_file(output_dir / "metrics.json")
            log.info("outputs written to %s", output_dir.resolve())
            print(f"[synapse_pt] outputs: {output_dir.resolve()}")
            exit_code = 0
            return metrics
        finally:
            tracker.finish(exit_code)


def objective_value(metrics: dict[str, Any], objective: str) -> float:
    """``objective`` looked up in ``metrics`` (:func:`~synapse_pt.eval.records.record.
    lookup_metric`); a :class:`~synapse_pt.common.errors.ConfigError` where the run has none
    (checked
    before the run, :func:`~synapse_pt.commands.preflight.check_run`; looked up again before the
    outputs are committed, so that a missing one never replaces a folder's outputs)."""
    try:
        return lookup_metric(metrics, objective)
    except (KeyError, ValueError) as err:
        raise ConfigError(f"objective={objective}: {err.args[0]}; this run's outputs were not "
                          "committed (the folder's earlier ones are left as they were)") from None


def evaluate_into(output_dir: Path, cfg: DictConfig, resolved: dict[str, Any], dataset: Any,
                  settings: EvalSettings, tracker: Any, t0: float, ledger: Path | None = None
                  ) -> dict[str, Any]:
    """Build, evaluate (under the ``eval`` ``settings`` :func:`~synapse_pt.commands.preflight.
    check_settings` gave) and record ``cfg`` on ``dataset`` (loaded since ``t0``) into
    ``output_dir`` (the staging folder of the folder :func:`run` claimed and locked), its model's
    bills into the spend ``ledger``; the metrics."""
    audit = build_audit(cfg.dataset, dataset)
    require_upstream(settings)  # a missing prompt file stops the run before the slow part
    llm = build_llm(cfg.llm, ledger=ledger)
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
    metrics = run_metrics(df, summary, identity, settings=settings,
                          categories=RunCategories.of(dataset, names),
                          context_tokenizer=counter.name, llm=llm, prices=prices,
                          smoke=bool(cfg.smoke))
    # every per-question row names the build it came from (an LLM-free stand-in is named so)
    df.insert(0, "build", str(identity["memory"].get("build")
                              or identity["memory"].get("memory", "")))
    tables = build_tables(metrics, names, run_label=run_label(identity))
    write_run_outputs(output_dir, predictions=df, metrics=metrics, timings=timings,
                      spend={**run_spend(llm, prices, judge_served), **ledger_spend(llm)},
                      tables=tables)
    log_run(tracker, metrics, timings, tables, df)
    return metrics


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="run")
def main(cfg: DictConfig) -> float:
    """CLI: run, print the flat metrics, return ``cfg.objective`` (what sweepers optimise).
    Hydra's records and the log are written by :class:`~synapse_pt.commands.run_log.RunRecords` once
    the run has claimed its folder; a stamped folder of a run that failed is removed
    (:func:`~synapse_pt.commands.hydra_app.drop_unused_folder`)."""
    quiet_third_party_logs()
    records = RunRecords(cfg)
    try:
        metrics = run_reporting_errors(cfg, records)
    except BaseException:
        records.close()
        drop_unused_folder(cfg.paths.output_dir)  # kept where it spent: the command resumes there
        raise
    records.close()
    print(render_summary(metrics, run_category_names(cfg),
                         label=run_label(metrics["identity"]),
                         output_dir=str(Path(cfg.paths.output_dir).resolve())), end="")
    value = objective_value(metrics, str(cfg.objective))
    print(f"[synapse_pt] objective {cfg.objective} = {value:.6g}")
    return value


def kept_after(folder: Path) -> str:
    """What a run that failed or was interrupted leaves: its outputs (committed before, e.g., its
    console output failed), else the folder's as they were (the last run that finished there) and
    the caches' what it computed."""
    if folder.resolve() in COMMITTED:
        return f"this run's outputs were committed into {folder}, whole"
    held = ("holds the outputs of the last run that finished there, whole"
            if holds_outputs(folder) else "holds no run's outputs")
    return (f"nothing of this run was committed: {folder} {held}; the caches keep what this run "
            "computed (the same command resumes from them)")


def run_reporting_errors(cfg: DictConfig, records: RunRecords) -> dict[str, Any]:
    """:func:`run` with Hydra's records inside the error boundary
    (:func:`~synapse_pt.commands.hydra_app.report_failures`): a budget stop (exit status 3), the
    errors of
    :data:`USER_FACING_ERRORS` and any :class:`OSError` (exit status 1), an interruption
    (Ctrl-C or SIGTERM: 130, 143) logged and printed as one line."""
    folder = Path(cfg.paths.output_dir)

    def body() -> dict[str, Any]:
        try:
            return run(cfg, on_claim=records.claim)
        except BudgetExceeded as err:  # a clean stop: what was answered is cached
            line = f"{err}; {resume_hint(cfg, err)}"
            log.error("%s", line)
            print(f"[synapse_pt] stopped: {line}", file=sys.stderr)
            sys.exit(BUDGET_EXIT_CODE)

    return report_failures(body, kept=lambda: kept_after(folder), errors=USER_FACING_ERRORS)


def resume_hint(cfg: DictConfig, err: BudgetExceeded) -> str:
    """How to go on after a budget stop: the same command (in the same folder, where it was
    stamped) with a cap above what the command spent, which counts."""
    if in_multirun():
        from hydra.core.hydra_config import HydraConfig

        folder = f" hydra.sweep.dir={Path(HydraConfig.get().sweep.dir).resolve()}"
    else:
        out = Path(cfg.paths.output_dir).resolve()
        folder = f" hydra.run.dir={out}" if out in CLAIMED and holds_spending(out) else ""
    return (f"to go on, the same command with{folder} llm.max_cost_usd above "
            f"{err.spent_usd:.4f} (what this command spent counts); "
            "`python -m synapse_pt.estimate` with its overrides prints what the whole run costs")


