"""Entry point: ``python -m synapse_pt.run [overrides]``.

A thin ``@hydra.main`` over :func:`run`, a plain function of the composed config that builds the
dataset, models and memory (:mod:`synapse_pt.build`), evaluates (:mod:`synapse_pt.eval.pipeline`),
writes the run's outputs into its own folder and returns its metrics. Tests, studies and sweeps
call :func:`run` directly; the hydra entry point returns the configured ``objective``.
"""

from __future__ import annotations

import logging
import os
import random
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from synapse_pt.build import (
    build_audit,
    build_dataset,
    build_llm,
    run_category_names,
    run_memory,
    text_cache,
)
from synapse_pt.cli import quiet_third_party_logs
from synapse_pt.data import DataFormatError, DatasetNotFoundError
from synapse_pt.eval.console import render_summary
from synapse_pt.eval.outputs import (
    config_hash,
    git_commit,
    result_neutral_changes,
    without_result_neutral,
    write_json,
    write_predictions,
    write_tables,
)
from synapse_pt.eval.pipeline import EvalSettings, evaluate, for_memory, require_upstream
from synapse_pt.eval.record import (
    build_tables,
    flatten_metrics,
    run_label,
    run_metrics,
    run_spend,
)
from synapse_pt.eval.tokens import HFTokenCounter, LLMTokenCounter, TokenCounter
from synapse_pt.models.llm.base import LLMError
from synapse_pt.models.llm.budget import BudgetExceeded
from synapse_pt.models.sqlite_store import CorruptCacheError
from synapse_pt.study_key import register_resolvers
from synapse_pt.tracking import make_tracker

log = logging.getLogger("synapse_pt.run")
register_resolvers()  # ${study_key:} in configs/hparams_search/

BUDGET_EXIT_CODE = 3  # the exit status of a run stopped by llm.max_cost_usd
ERROR_EXIT_CODE = 1  # a run ended by one of USER_FACING_ERRORS


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

def lookup_metric(metrics: Mapping[str, Any], name: str) -> float:
    """``"recall@10.mean_q_1_4"`` -> ``metrics["metrics"]["recall@10"]["mean_q_1_4"]``; also
    top-level sections (``"retrieval.false_rejection_rate"``). Clear error when missing."""
    missing = object()
    for root in (metrics.get("metrics", {}), metrics):
        node: Any = root
        for part in name.split("."):
            if not isinstance(node, Mapping) or part not in node:
                node = missing
                break
            node = node[part]
        if isinstance(node, (int, float)):
            return float(node)
        if node is None:
            raise ValueError(f"objective {name!r} has no value in this run (null in "
                             "metrics.json: no questions it is defined over, e.g. a category "
                             "absent from the subset); choose another objective or more data")
    available = sorted(f"{m}.{k}" for m, v in metrics.get("metrics", {}).items() for k in v
                       if k != "n")
    raise KeyError(f"objective {name!r} not found in the run's metrics; available: {available}")


class OutputDirInUse(RuntimeError):
    """A run folder already holds the outputs of another configuration."""


#: the files whose presence makes a folder hold a configuration's outputs (a run that failed
#: before writing any of them left only its ``config.yaml``)
RUN_OUTPUTS = ("metrics.json", "predictions.parquet")


def check_output_dir(output_dir: Path, config_text: str, overwrite: bool = False) -> None:
    """Refuse to write into a folder whose outputs are another configuration's.

    The same resolved configuration resumes (its cached answers make the rerun cheap and its
    outputs identical). Settings that cannot change results
    (:data:`~synapse_pt.eval.outputs.RESULT_NEUTRAL_KEYS`: caps, concurrency, timeouts, retries,
    the tracker) are not compared: the new values are recorded in ``config.yaml`` and logged. A
    folder holding only a failed start's ``config.yaml`` (no :data:`RUN_OUTPUTS`) accepts any
    configuration; ``overwrite=true`` replaces another configuration's outputs."""
    saved = output_dir / "config.yaml"
    if overwrite or not saved.is_file():
        return
    before = OmegaConf.to_container(OmegaConf.create(saved.read_text()))
    after = OmegaConf.to_container(OmegaConf.create(config_text))
    for key, (old, new) in result_neutral_changes(before, after).items():
        log.info("%s: result-neutral setting %s changed %r -> %r (recorded, not compared)",
                 output_dir, key, old, new)
    before, after = without_result_neutral(before), without_result_neutral(after)
    differ = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if not differ:
        return
    if not any((output_dir / name).exists() for name in RUN_OUTPUTS):
        log.info("%s holds only the config.yaml of a run that wrote no outputs; replacing it "
                 "(differs in %s)", output_dir, differ)
        return
    raise OutputDirInUse(
        f"{output_dir} holds the outputs of another configuration (differs in {differ}); "
        "choose another hydra.run.dir, rerun the same configuration to resume, or pass "
        "overwrite=true to replace them")


#: errors whose message says all a user needs (what failed, which file, record, key or server, and
#: what to do): the CLI prints them as one line instead of a traceback (an LLM server's timeout,
#: connection error or unknown model ends deep in asyncio otherwise)
USER_FACING_ERRORS: tuple[type[BaseException], ...] = (
    LLMError, CorruptCacheError, DataFormatError, DatasetNotFoundError, OutputDirInUse)


def one_line(err: BaseException) -> str:
    """An error's message on one line (a multi-line message's lines joined by ``; ``)."""
    return "; ".join(part.strip() for part in str(err).splitlines() if part.strip())


def run(cfg: DictConfig, refuse_fallback: str | None = None) -> dict[str, Any]:
    """Evaluate one configuration end to end; write outputs into ``cfg.paths.output_dir``.

    ``refuse_fallback`` (e.g. ``"a study"``): where a missing LoCoMo file must not fall back to the
    shipped sample; a Hydra multirun always refuses."""
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    config_text = OmegaConf.to_yaml(cfg, resolve=True)
    check_output_dir(output_dir, config_text, overwrite=bool(cfg.get("overwrite", False)))
    (output_dir / "config.yaml").write_text(config_text)
    seed_everything(int(cfg.seed))
    names = run_category_names(cfg)
    label = cfg.get("experiment_name") or cfg.task_name
    tags = list(cfg.get("tags") or [])
    if label not in tags:  # W&B runs are tagged with their experiment (ablation) name
        tags.append(label)
    tracker = make_tracker(cfg.logger, config=resolved, output_dir=output_dir, tags=tags,
                           run_name=f"{label}/{output_dir.name}")
    exit_code = 1
    try:
        t0 = time.perf_counter()
        dataset = build_dataset(cfg.dataset, smoke=bool(cfg.smoke),
                                refuse_fallback=refuse_fallback or (
                                    "a multirun" if in_multirun() else None))
        audit = build_audit(cfg.dataset, dataset)
        llm = build_llm(cfg.llm)
        derived = text_cache(cfg)  # token counts, BM25 analyses, sentence splits
        loading = time.perf_counter() - t0
        settings = for_memory(EvalSettings(**{k: v for k, v in resolved["eval"].items()
                                              if k in EvalSettings.__dataclass_fields__}),
                              str(cfg.memory["_target_"]).rsplit(".", 1)[-1])
        require_upstream(settings)  # a missing prompt file stops the run before the build
        built = run_memory(cfg, resolved, dataset, llm, derived)
        encoder, memory = built.encoder, built.memory
        timings = dict(built.timings)
        timings["setup_seconds"] += loading  # the data and the model as well as the memory

        counter: TokenCounter = (LLMTokenCounter(llm) if llm is not None
                                 else HFTokenCounter(cfg.eval.get("context_tokenizer"),
                                                     cache=derived))
        gold = str(cfg.dataset.get("gold", "official"))
        df, summary = evaluate(memory, dataset, settings=settings, token_counter=counter, llm=llm,
                               audit=audit, gold=gold)
        for key in ("retrieve_seconds", "retrieve_ms_per_query", "answer_seconds"):
            timings[key] = summary.pop(key)
        cache = getattr(encoder, "cache", None)
        if cache is not None:  # this process's distinct texts: a cold run's misses are embedded
            timings["embedding_cache_hits"] = float(cache.hits)
            timings["embedding_cache_misses"] = float(cache.misses)

        prices = resolved["llm"].get("prices") or {}
        identity = {
            "git_commit": git_commit(Path(__file__).resolve().parent),
            "config_hash": config_hash(without_result_neutral(resolved)),
            "task_name": cfg.task_name,
            "experiment": cfg.get("experiment_name"),
            "dataset": {"name": dataset.name, "path": dataset.path, "sha256": dataset.sha256,
                        "content_sha256": dataset.content_sha256, "upstream": dataset.upstream,
                        "conversations": len(dataset), "questions": dataset.num_questions,
                        "notes": dataset.notes, "gold": gold,
                        "audit": None if audit is None else audit.describe()},
            "memory": memory.describe(),
            "embedder": encoder.name,
            "llm": None if llm is None else f"{cfg.llm.name}:{llm.model}",
        }
        metrics = run_metrics(df, summary, identity, settings=settings, names=names,
                              context_tokenizer=counter.name, llm=llm, prices=prices,
                              smoke=bool(cfg.smoke), answerable=dataset.answerable,
                              unanswerable=dataset.unanswerable)
        # every per-question row names the build it came from (an LLM-free stand-in is named so)
        df.insert(0, "build", str(identity["memory"].get("build")
                                  or identity["memory"].get("memory", "")))
        write_predictions(output_dir / "predictions.parquet", df)
        write_json(output_dir / "metrics.json", metrics)
        write_json(output_dir / "timing.json", timings)
        spend = run_spend(llm, prices)
        if spend is not None:
            write_json(output_dir / "spend.json", spend)
        label = run_label(identity)
        tables = build_tables(metrics, names, run_label=label)
        write_tables(output_dir / "tables", tables)
        flat = flatten_metrics(metrics)
        tracker.log_metrics(flat | {f"timing/{k}": v for k, v in timings.items()})
        for name, table in tables.items():
            tracker.log_table(f"tables/{name}", table)
        if getattr(tracker, "log_predictions", False):
            tracker.log_table("predictions", df)
        tracker.log_file(output_dir / "metrics.json")  # the config is the W&B run's config
        log.info("outputs written to %s", output_dir.resolve())
        print(f"[synapse_pt] outputs: {output_dir.resolve()}")
        exit_code = 0
        return metrics
    finally:
        tracker.finish(exit_code)


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
