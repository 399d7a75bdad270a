"""Entry point: ``python -m synapse_pt.run [overrides]``.

A thin ``@hydra.main`` over :func:`run`, a plain function of the composed config that builds the
dataset, models and memory, evaluates, writes the run's outputs and returns its metrics. Tests and
sweeps call :func:`run` directly; the hydra entry point returns the configured ``objective``.
"""

from __future__ import annotations

import inspect
import logging
import random
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import pandas as pd
import torch
from hydra.experimental.callback import Callback
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from synapse_pt.data import (
    Conversation,
    Dataset,
    DatasetNotFoundError,
    category_names,
    load_locomo,
    resolve_dataset_path,
)
from synapse_pt.data.source import sample_path
from synapse_pt.eval.aggregate import summarize
from synapse_pt.eval.console import render_summary
from synapse_pt.eval.outputs import (
    config_hash,
    git_commit,
    prompt_hashes,
    write_json,
    write_predictions,
    write_tables,
)
from synapse_pt.eval.pipeline import EvalSettings, evaluate, is_strict
from synapse_pt.eval.report import run_tables
from synapse_pt.eval.tokens import HFTokenCounter, LLMTokenCounter, TokenCounter
from synapse_pt.graph.extraction import ConceptExtractor
from synapse_pt.memory.base import MemorySystem
from synapse_pt.models.accounting import price_for, price_table, summarize_usage
from synapse_pt.models.base import TextEncoder
from synapse_pt.models.llm.base import LLM
from synapse_pt.models.llm.budget import BudgetedLLM, BudgetExceeded
from synapse_pt.models.llm.cache import CachedLLM, ResponseCache
from synapse_pt.models.llm.none import NoLLM
from synapse_pt.models.text_cache import TextValueCache
from synapse_pt.study_key import register_resolvers
from synapse_pt.tracking import make_tracker

log = logging.getLogger("synapse_pt.run")
register_resolvers()  # ${study_key:} in configs/hparams_search/

SMOKE_QUESTIONS = 12


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


SAMPLE_REFUSED = ("no LoCoMo-10 file was found, and {what} never falls back to the shipped sample "
                  "conversation (a 14-question smoke test). Provide the data: "
                  "dataset.path=/path/to/locomo10.json, SYNAPSE_DATA=..., or "
                  "../shared/data/locomo10.json beside the checkout; or choose the sample "
                  "explicitly with dataset=sample")


def build_dataset(cfg: Mapping[str, Any], smoke: bool = False,
                  refuse_fallback: str | None = None) -> Dataset:
    """Resolve and load the dataset named by the ``dataset`` config group, then subset it.

    ``refuse_fallback`` names a context in which falling back to the shipped sample is an error
    (``"a multirun"``, ``"a sweep"``): only a single run may fall back, with a warning, and only
    when the sample was not asked for explicitly."""
    path = cfg.get("path")
    if path == "sample":
        path = str(sample_path())
    source = resolve_dataset_path(path, candidates=cfg.get("candidates") or (),
                                  cache_dir=cfg.get("cache_dir"), url=cfg.get("url"),
                                  expected_sha256=cfg.get("sha256"),
                                  allow_download=bool(cfg.get("allow_download", True)),
                                  allow_sample=bool(cfg.get("allow_sample", False)))
    name = "sample" if source.is_sample or path == str(sample_path()) else cfg.get("name")
    dataset = load_locomo(source.path, name=name,
                          turn_offset_seconds=float(cfg.get("turn_offset_seconds", 60)))
    if source.is_sample:
        if refuse_fallback:
            raise DatasetNotFoundError(SAMPLE_REFUSED.format(what=refuse_fallback))
        dataset.notes.append("fell back to the sample conversation shipped with synapse_pt")
    max_conv = cfg.get("max_conversations")
    max_q = cfg.get("max_questions")
    categories = cfg.get("question_categories")
    if smoke:
        max_conv = 1 if max_conv is None else min(int(max_conv), 1)
        max_q = SMOKE_QUESTIONS if max_q is None else min(int(max_q), SMOKE_QUESTIONS)
    if cfg.get("sample_ids") or max_conv is not None or max_q is not None or categories:
        dataset = dataset.subset(list(cfg["sample_ids"]) if cfg.get("sample_ids") else None,
                                 max_conv, max_q,
                                 list(categories) if categories is not None else None)
    return dataset


def build_llm(cfg: Mapping[str, Any]) -> LLM | None:
    """The answer/extraction model, wrapped in the on-disk response cache; None for ``llm=none``."""
    # hydra's instantiate silently drops ``???`` arguments (the backend's default would stand in)
    missing = sorted(OmegaConf.missing_keys(cfg)) if isinstance(cfg, DictConfig) else []
    if missing:
        raise ValueError(f"llm={cfg.get('name')}: no value for {missing}; set it on the command "
                         f"line, e.g. {missing[0]}=...")
    backend = hydra.utils.instantiate(cfg["backend"], _convert_="all")
    if isinstance(backend, NoLLM):
        return None
    cap = cfg.get("max_cost_usd")
    if cap is not None:  # inside the cache: hits cost nothing, answers are stored before a stop
        price = price_for(backend.model, price_table(cfg.get("prices") or {}))
        if price is None:
            raise ValueError(f"llm.max_cost_usd={cap} needs a price for {backend.model!r} in "
                             f"llm.prices (USD per 1M prompt and completion tokens)")
        backend = BudgetedLLM(backend, float(cap), price)
    if cfg.get("cache"):
        Path(cfg["cache"]).parent.mkdir(parents=True, exist_ok=True)
        return CachedLLM(backend, ResponseCache(cfg["cache"]))
    return backend


def build_extractor(cfg: Mapping[str, Any], encoder: TextEncoder, llm: LLM | None
                    ) -> ConceptExtractor:
    """The concept extractor of the ``extractor`` group (``_target_`` plus its arguments; the
    encoder and the LLM are passed to the classes that take them). ``llm_free`` is metadata: it
    must agree with the class, and an LLM extractor without a language model is an error."""
    if "_target_" not in cfg:
        raise ValueError("extractor config needs a _target_ (see configs/extractor/)")
    target = get_class(cfg["_target_"])
    if bool(cfg.get("llm_free", True)) != bool(target.llm_free):
        raise ValueError(f"extractor.llm_free={cfg.get('llm_free')} but {target.__name__} has "
                         f"llm_free={target.llm_free}")
    accepted = inspect.signature(target.__init__).parameters
    if "llm" in accepted and llm is None:
        raise ValueError(f"extractor {target.__name__} needs a language model; set llm=smollm2, "
                         "llm=openai, ... or use an LLM-free extractor (extractor=keyword, "
                         "keybert, yake)")
    args = {k: v for k, v in cfg.items() if k != "llm_free"}
    kwargs = {k: v for k, v in {"encoder": encoder, "llm": llm}.items() if k in accepted}
    return hydra.utils.instantiate(args, _convert_="all", **kwargs)


def text_cache(cfg: DictConfig) -> TextValueCache:
    """The run's cache of derived text values (token counts, BM25 analyses, sentence splits),
    ``paths.cache_dir/text.sqlite`` beside the embedding cache."""
    return TextValueCache(Path(cfg.paths.cache_dir) / "text.sqlite")


def build_memory(cfg: DictConfig, **available: Any) -> MemorySystem:
    """Instantiate ``cfg`` (a ``memory`` group), passing those of ``available`` it accepts."""
    target = get_class(cfg["_target_"])
    accepted = inspect.signature(target.__init__).parameters
    kwargs = {k: v for k, v in available.items() if k in accepted}
    return hydra.utils.instantiate(cfg, _convert_="all", **kwargs)


def ingest(memory: MemorySystem, conversations: Sequence[Conversation]) -> None:
    """Ingest every conversation in one call, so a memory batches its work across them: one
    embedding call, one LLM batch per extraction round, one graph batch (the systems' own
    progress bars show the stages)."""
    log.info("ingesting %d conversations into %s", len(conversations), type(memory).__name__)
    memory.ingest(list(conversations))


# The last ingested memory of this process, keyed by everything that shapes it (multiruns and
# sweeps run their jobs in one process: a trial that only changes retrieval settings reuses it).
_INGESTED: dict[str, tuple[TextEncoder, MemorySystem]] = {}


def ingested_memory(cfg: DictConfig, refuse_fallback: str | None,
                    encoder: TextEncoder | None = None) -> tuple[MemorySystem, Dataset]:
    """The dataset of ``cfg`` and its memory, built and ingested as a run does it (LLM-free
    extractors only: a figure, notebook or benchmark should not need the model). With the
    embedding cache in place no model is called. ``encoder``: use this one instead of
    instantiating ``cfg.embedder`` (a caller that watches what is embedded)."""
    if not cfg.extractor.get("llm_free", True):
        raise ValueError(f"extractor {cfg.extractor['_target_']} needs an LLM; only LLM-free "
                         "builds are rebuilt outside a run")
    dataset = build_dataset(cfg.dataset, refuse_fallback=refuse_fallback)
    if encoder is None:
        encoder = hydra.utils.instantiate(cfg.embedder, _convert_="all")
    memory = build_memory(cfg.memory, encoder=encoder,
                          extractor=build_extractor(cfg.extractor, encoder, None),
                          text_cache=text_cache(cfg))
    ingest(memory, dataset.conversations)
    return memory, dataset


def rebuild_memory(run_dir: str | Path) -> tuple[MemorySystem, Dataset]:
    """The ingested memory and the dataset of the run folder ``run_dir``, rebuilt from its
    resolved ``config.yaml`` (:func:`ingested_memory`); for analyses that need more than the
    run's outputs (the activation figure)."""
    from omegaconf import OmegaConf

    cfg_path = Path(run_dir) / "config.yaml"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"{run_dir}: no config.yaml (not a run folder)")
    cfg = OmegaConf.load(cfg_path)
    return ingested_memory(cfg, None if cfg.dataset.get("name") == "sample"
                           else f"rebuilding {run_dir}")


def composed_config(overrides: Sequence[str]) -> DictConfig:
    """The config of ``python -m synapse_pt.run <overrides>``, composed without running."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("run", overrides=[*overrides, f"paths.output_dir={CONFIG_DIR.parent}"
                                         "/outputs/composed"])


def composed_memory(overrides: Sequence[str], what: str, encoder: TextEncoder | None = None
                    ) -> tuple[MemorySystem, Dataset]:
    """The ingested memory of ``python -m synapse_pt.run <overrides>`` without running it (the
    benchmarks' memory); ``what`` names the caller when LoCoMo-10 is missing."""
    return ingested_memory(composed_config(overrides), what, encoder)


def retrieval_settings(memory_cfg: DictConfig, resolved_memory: Mapping[str, Any]
                       ) -> dict[str, Any]:
    """The retrieval-only fields (``retrieval_fields`` of the memory class) of a memory config."""
    fields = get_class(memory_cfg["_target_"]).retrieval_fields
    return {k: resolved_memory[k] for k in fields if k in resolved_memory}


def ingest_key(resolved: Mapping[str, Any], dataset: Dataset) -> str:
    """Hash of what an ingested memory depends on: data, embedder, extractor (and its LLM),
    device, and the memory config without its retrieval-only fields."""
    memory = dict(resolved["memory"])
    for field in get_class(memory["_target_"]).retrieval_fields:
        memory.pop(field, None)
    uses_llm = not resolved["extractor"].get("llm_free", True)

    def without_cache(section: Mapping[str, Any]) -> dict[str, Any]:  # where caches live
        return {k: v for k, v in section.items() if k not in ("cache", "cache_dir")}

    return config_hash({"dataset": dataset.sha256, "subset": [c.sample_id for c in dataset],
                        "turn_offset_seconds": resolved["dataset"].get("turn_offset_seconds"),
                        "embedder": without_cache(resolved["embedder"]),
                        "extractor": resolved["extractor"], "device": resolved["device"],
                        "llm": without_cache(resolved["llm"]) if uses_llm else None,
                        "memory": memory})


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


def check_output_dir(output_dir: Path, config_text: str, overwrite: bool = False) -> None:
    """Refuse to write into a folder whose ``config.yaml`` is another configuration's.

    The same resolved configuration resumes (its cached answers make the rerun cheap and its
    outputs identical); ``overwrite=true`` replaces the other configuration's outputs."""
    saved = output_dir / "config.yaml"
    if overwrite or not saved.is_file():
        return
    before = OmegaConf.to_container(OmegaConf.create(saved.read_text()))
    after = OmegaConf.to_container(OmegaConf.create(config_text))
    for conf in (before, after):
        conf.pop("overwrite", None)  # how a run was asked to write is not what it computes
    differ = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if not differ:
        return
    raise OutputDirInUse(
        f"{output_dir} holds the outputs of another configuration (differs in {differ}); "
        "choose another hydra.run.dir, rerun the same configuration to resume, or pass "
        "overwrite=true to replace them")


def run_category_names(cfg: DictConfig) -> dict[int, str]:
    """The category names of ``dataset.categories`` (a scheme name or a mapping)."""
    categories = cfg.dataset.categories
    return category_names(categories if isinstance(categories, str)
                          else OmegaConf.to_container(categories))


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
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        dataset = build_dataset(cfg.dataset, smoke=bool(cfg.smoke),
                                refuse_fallback=refuse_fallback or (
                                    "a multirun" if in_multirun() else None))
        llm = build_llm(cfg.llm)
        key = ingest_key(resolved, dataset)
        derived = text_cache(cfg)  # token counts, BM25 analyses, sentence splits
        reused = _INGESTED.get(key) if cfg.get("reuse_ingested", True) else None
        if reused is not None:  # same memory, other retrieval settings: skip the rebuild
            encoder, memory = reused
            memory.configure_retrieval(**retrieval_settings(cfg.memory, resolved["memory"]))
            timings["setup_seconds"] = time.perf_counter() - t0
            timings["ingest_seconds"] = 0.0
            timings["ingest_reused"] = 1.0
            log.info("reusing the memory ingested by an earlier run of this process")
        else:
            encoder = hydra.utils.instantiate(cfg.embedder, _convert_="all")
            extractor = build_extractor(cfg.extractor, encoder, llm)
            memory = build_memory(cfg.memory, encoder=encoder, extractor=extractor,
                                  text_cache=derived)
            timings["setup_seconds"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            ingest(memory, dataset.conversations)
            timings["ingest_seconds"] = time.perf_counter() - t0
            timings["ingest_reused"] = 0.0
            _INGESTED.clear()  # keep one ingested memory per process
            _INGESTED[key] = (encoder, memory)

        settings = EvalSettings(**{k: v for k, v in resolved["eval"].items()
                                   if k in EvalSettings.__dataclass_fields__})
        counter: TokenCounter = (LLMTokenCounter(llm) if llm is not None
                                 else HFTokenCounter(cfg.eval.get("context_tokenizer"),
                                                     cache=derived))
        df, summary = evaluate(memory, dataset, settings=settings, token_counter=counter, llm=llm)
        for key in ("retrieve_seconds", "retrieve_ms_per_query", "answer_seconds"):
            timings[key] = summary.pop(key)
        cache = getattr(encoder, "cache", None)
        if cache is not None:  # this process's distinct texts: a cold run's misses are embedded
            timings["embedding_cache_hits"] = float(cache.hits)
            timings["embedding_cache_misses"] = float(cache.misses)

        metric_cols = [c for c in df.columns if c.startswith(("recall@", "f1_", "bleu", "judge"))]
        metrics: dict[str, Any] = {
            "identity": {
                "git_commit": git_commit(Path(__file__).resolve().parent),
                "config_hash": config_hash(resolved),
                "task_name": cfg.task_name,
                "experiment": cfg.get("experiment_name"),
                "dataset": {"name": dataset.name, "path": dataset.path, "sha256": dataset.sha256,
                            "conversations": len(dataset), "questions": dataset.num_questions,
                            "notes": dataset.notes},
                "memory": memory.describe(),
                "embedder": encoder.name,
                "llm": None if llm is None else f"{cfg.llm.name}:{llm.model}",
                "eval_mode": settings.mode,
                "scoring_protocols": (["official", "amem", "membox"] if settings.mode == "qa"
                                      else []),
                "judge_protocol": (settings.judge_protocol if settings.mode == "qa"
                                   and settings.judge_runs > 0 else None),
                "category_date_instruction": settings.category_date_instruction,
                "category5_options": settings.category5_options,
                "strict": is_strict(settings),
                "answer_style": settings.answer_style,
                "prompts": prompt_hashes(),
                "context_tokenizer": counter.name,
                "category_names": {str(k): v for k, v in names.items()},
                "smoke": bool(cfg.smoke),
            },
            "metrics": summarize(df, metric_cols, names),
            "retrieval": {k: v for k, v in summary.items() if not k.startswith("judge")},
        }
        judge = {k: v for k, v in summary.items() if k.startswith("judge")}
        if judge:
            metrics["judge"] = judge
        prices = resolved["llm"].get("prices") or {}
        if llm is not None and settings.mode == "qa":
            answered = df[~df["gated"]]
            metrics["usage"] = method_usage(answered, prices, model=llm.model,
                                            num_queries=len(df))
        write_predictions(output_dir / "predictions.parquet", df)
        write_json(output_dir / "metrics.json", metrics)
        write_json(output_dir / "timing.json", timings)
        spend = run_spend(llm, prices)
        if spend is not None:
            write_json(output_dir / "spend.json", spend)
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


# what a run's answers cost wherever they came from (metrics.json, identical when a run resumes);
# which of them were paid for in this run is in spend.json
RUN_STATE_USAGE = ("n_cached", "cost_usd_spent")


def method_usage(answered: pd.DataFrame, prices: Mapping[str, Any], *, model: str,
                 num_queries: int) -> dict[str, Any]:
    """Tokens, latency and cost of the method's answers (the efficiency table, SPEC §1.4): the
    answers' recorded token counts, whether or not this run found them in the cache."""
    usage = summarize_usage(
        answered[["prompt_tokens", "completion_tokens", "latency_s"]].to_dict("records"),
        prices, model=model, num_queries=num_queries)
    return {k: v for k, v in usage.items() if k not in RUN_STATE_USAGE}


def run_spend(llm: LLM | None, prices: Mapping[str, Any]) -> dict[str, Any] | None:
    """What this run sent to the model and paid: every response the run's LLM served (answers,
    judge, extraction), cache hits at no cost. ``None`` without a cached LLM."""
    served = getattr(llm, "served", None)
    if served is None:
        return None
    usage = summarize_usage(served, prices)
    paid = [r for r in served if not r.cached]
    return {"n_responses": usage["n_responses"], "n_cached": usage["n_cached"],
            "n_paid": len(paid),
            "prompt_tokens_paid": sum(r.prompt_tokens for r in paid),
            "completion_tokens_paid": sum(r.completion_tokens for r in paid),
            "cost_usd_spent": usage["cost_usd_spent"],
            "cost_usd_if_uncached": usage["cost_usd"],
            "unpriced_models": usage["unpriced_models"]}


def flatten_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """``{"recall@10/single-hop": 0.61, ..., "retrieval/false_rejection_rate": ...}``."""
    flat: dict[str, float] = {}
    for metric, per_cat in metrics.get("metrics", {}).items():
        for key, value in per_cat.items():
            if key != "n" and isinstance(value, (int, float)):
                flat[f"{metric}/{key}"] = float(value)
    for section in ("retrieval", "judge", "usage"):
        for key, value in metrics.get(section, {}).items():
            if isinstance(value, (int, float)):
                flat[f"{section}/{key}"] = float(value)
    return flat


def build_tables(metrics: Mapping[str, Any], names: Mapping[int, str], run_label: str
                 ) -> dict[str, pd.DataFrame]:
    """This run's own tables (one row, plus the paper's rows where the metric matches)."""
    return run_tables({run_label: metrics}, names)


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


# third-party loggers that log every request at INFO (httpx, and httpx2 under the openai SDK: one
# line per LLM call)
QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "openai", "urllib3", "filelock")



def quiet_third_party_logs(level: int = logging.WARNING) -> None:
    """Raise the level of chatty third-party loggers (their warnings and errors still show)."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(level)


BUDGET_EXIT_CODE = 3  # the exit status of a run stopped by llm.max_cost_usd


CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


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
    print(render_summary(metrics, run_category_names(cfg),
                         label=cfg.get("experiment_name") or cfg.task_name,
                         output_dir=str(Path(cfg.paths.output_dir).resolve())), end="")
    value = lookup_metric(metrics, cfg.objective)
    print(f"[synapse_pt] objective {cfg.objective} = {value:.6g}")
    return value


if __name__ == "__main__":
    main()
