"""Builders: the objects a run is made of, from the composed Hydra config.

Every entry point (``synapse_pt.commands.run``, ``synapse_pt.commands.sweep``,
``synapse_pt.commands.study``, the estimate)
and every script builds its dataset, models and memory here, so that a benchmark, a figure or a
held-out study measures exactly the memory a run evaluates:

* :func:`composed_config`: the config of ``python -m synapse_pt.run <overrides>``, without running
  (the one composer);
* :func:`build_llm`, :func:`build_encoder`, :func:`build_extractor`, :func:`build_memory`,
  :func:`text_cache`: one config group each (the dataset and the audited gold are found, checked
  and loaded by :mod:`synapse_pt.data.resolve`);
* :func:`ingested_memory` / :func:`composed_memory` / :func:`rebuild_memory`: a memory built and
  ingested as a run does it (LLM-free builds), from a config, from overrides or from a run folder;
* :func:`run_memory`: the memory of a run, reused from the previous run of the same process when
  only retrieval settings changed (:func:`ingest_key`, :func:`retrieval_settings`).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import get_class
from hydra.utils import instantiate as hydra_instantiate
from omegaconf import DictConfig, OmegaConf

from synapse_pt.cache.sqlite import CorruptCacheError
from synapse_pt.cache.texts import TextValueCache
from synapse_pt.common.errors import ConfigError
from synapse_pt.common.resources import config_dir
from synapse_pt.data import Conversation, Dataset
from synapse_pt.data.resolve import build_dataset, dataset_categories
from synapse_pt.eval.records.outputs import config_hash
from synapse_pt.graph.extraction import ConceptExtractor
from synapse_pt.memory.base import MemorySystem
from synapse_pt.models.assemble import ModelNotAssembled
from synapse_pt.models.base import TextEncoder
from synapse_pt.models.llm.accounting import price_for, price_table, usd_setting
from synapse_pt.models.llm.base import LLM
from synapse_pt.models.llm.budget import BudgetedLLM
from synapse_pt.models.llm.cache import CachedLLM, ResponseCache
from synapse_pt.models.llm.ledger import SpendLedger
from synapse_pt.models.llm.none import NoLLM

log = logging.getLogger("synapse_pt.commands.build")



def composed_config(overrides: Sequence[str]) -> DictConfig:
    """The config of ``python -m synapse_pt.run <overrides>``, composed without running (the
    output folder defaults to ``<paths.root_dir>/outputs/composed``; an override of
    ``paths.output_dir`` wins)."""
    from hydra import compose, initialize_config_dir

    overrides = list(overrides)
    if not any(o.startswith("paths.output_dir=") for o in overrides):
        overrides.append("paths.output_dir=${paths.root_dir}/outputs/composed")
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose("run", overrides=overrides)


def run_category_names(cfg: DictConfig) -> dict[int, str]:
    """The category names of a run's ``dataset`` config (:func:`~synapse_pt.data.resolve.
    dataset_categories`)."""
    return dataset_categories(cfg.dataset)


#: errors raised inside a constructor that hydra's ``instantiate`` must not wrap: their message
#: names the config key, the file (a cache SQLite cannot read) or the set-up command, and the CLI
#: prints it as one line
UNWRAPPED = (ConfigError, ModelNotAssembled, CorruptCacheError)


def instantiate(cfg: Any, **kwargs: Any) -> Any:
    """``hydra.utils.instantiate(cfg, _convert_="all", **kwargs)``, re-raising a
    :data:`UNWRAPPED` error of the constructor itself instead of hydra's
    ``InstantiationException`` around it."""
    try:
        return hydra_instantiate(cfg, _convert_="all", **kwargs)
    except InstantiationException as err:
        if isinstance(err.__cause__, UNWRAPPED):
            raise err.__cause__ from None
        raise


def build_llm(cfg: Mapping[str, Any], ledger: str | Path | SpendLedger | None = None
              ) -> LLM | None:
    """The answer/extraction model, wrapped in the on-disk response cache; None for ``llm=none``.

    A model with a price above zero in ``llm.prices``, or any model under ``llm.max_cost_usd``,
    is metered into the spend ``ledger`` (a :class:`SpendLedger` or its file, shared by what one
    command runs; None: this process's alone) by a
    :class:`~synapse_pt.models.llm.budget.BudgetedLLM`, inside the cache: hits cost nothing,
    answers are stored before a stop. The cap and the prices are finite numbers >= 0 or a
    :class:`ConfigError` naming the key."""
    # hydra's instantiate silently drops ``???`` arguments (the backend's default would stand in)
    missing = sorted(OmegaConf.missing_keys(cfg)) if isinstance(cfg, DictConfig) else []
    if missing:
        raise ConfigError(f"llm={cfg.get('name')}: no value for {missing}; set it on the command "
                          f"line, e.g. {missing[0]}=...")
    backend = instantiate(cfg["backend"])
    if isinstance(backend, NoLLM):
        return None
    cap = cfg.get("max_cost_usd")
    cap = None if cap is None else usd_setting(cap, "llm.max_cost_usd")
    price = price_for(backend.model, price_table(cfg.get("prices") or {}))
    if cap is not None and price is None:
        raise ConfigError(f"llm.max_cost_usd={cap:g} needs a price for {backend.model!r} in "
                          f"llm.prices (USD per 1M prompt and completion tokens)")
    if price is not None and (cap is not None or price.prompt_per_1m or price.completion_per_1m):
        book = ledger if isinstance(ledger, SpendLedger) else SpendLedger(ledger)
        backend = BudgetedLLM(backend, price, book, cap)
    if cfg.get("cache"):
        Path(cfg["cache"]).parent.mkdir(parents=True, exist_ok=True)
        return CachedLLM(backend, ResponseCache(cfg["cache"]))
    return backend


def build_encoder(cfg: Mapping[str, Any]) -> TextEncoder:
    """The text encoder of the ``embedder`` group (with its embedding cache). An opt-in model that
    is not assembled (``embedder=mpnet``) raises :class:`ModelNotAssembled` itself, naming the
    set-up command, not hydra's wrapper."""
    return instantiate(cfg)


def build_extractor(cfg: Mapping[str, Any], encoder: TextEncoder, llm: LLM | None
                    ) -> ConceptExtractor:
    """The concept extractor of the ``extractor`` group (``_target_`` plus its arguments; the
    encoder and the LLM are passed to the classes that take them). ``llm_free`` is metadata: it
    must agree with the class, and an LLM extractor without a language model is an error."""
    if "_target_" not in cfg:
        raise ConfigError("extractor config needs a _target_ (see configs/extractor/)")
    target = get_class(cfg["_target_"])
    if bool(cfg.get("llm_free", True)) != bool(target.llm_free):
        raise ConfigError(f"extractor.llm_free={cfg.get('llm_free')} but {target.__name__} has "
                          f"llm_free={target.llm_free}")
    accepted = inspect.signature(target.__init__).parameters
    if "llm" in accepted and llm is None:
        raise ConfigError(f"extractor {target.__name__} needs a language model; set llm=smollm2, "
                          "llm=openai, ... or use an LLM-free extractor (extractor=keyword, "
                          "keybert, yake)")
    args = {k: v for k, v in cfg.items() if k != "llm_free"}
    kwargs = {k: v for k, v in {"encoder": encoder, "llm": llm}.items() if k in accepted}
    return instantiate(args, **kwargs)


def text_cache(cfg: DictConfig) -> TextValueCache:
    """The run's cache of derived text values (token counts, BM25 analyses, sentence splits),
    ``paths.cache_dir/text.sqlite`` beside the embedding cache."""
    return TextValueCache(Path(cfg.paths.cache_dir) / "text.sqlite")


def build_memory(cfg: DictConfig, **available: Any) -> MemorySystem:
    """Instantiate ``cfg`` (a ``memory`` group), passing those of ``available`` it accepts."""
    target = get_class(cfg["_target_"])
    accepted = inspect.signature(target.__init__).parameters
    kwargs = {k: v for k, v in available.items() if k in accepted}
    return instantiate(cfg, **kwargs)


def ingest(memory: MemorySystem, conversations: Sequence[Conversation]) -> None:
    """Ingest every conversation in one call, so a memory batches its work across them: one
    embedding call, one LLM batch per extraction round, one graph batch (the systems' own
    progress bars show the stages)."""
    log.info("ingesting %d conversations into %s", len(conversations), type(memory).__name__)
    memory.ingest(list(conversations))


def ingested_memory(cfg: DictConfig, refuse_fallback: str | None,
                    encoder: TextEncoder | None = None) -> tuple[MemorySystem, Dataset]:
    """The dataset of ``cfg`` and its memory, built and ingested as a run does it (LLM-free
    extractors only: a figure, notebook or benchmark should not need the model). With the
    embedding cache in place no model is called. ``encoder``: use this one instead of
    instantiating ``cfg.embedder`` (a caller that watches what is embedded)."""
    if not cfg.extractor.get("llm_free", True):
        raise ConfigError(f"extractor {cfg.extractor['_target_']} needs an LLM; only LLM-free "
                          "builds are rebuilt outside a run")
    dataset = build_dataset(cfg.dataset, refuse_fallback=refuse_fallback)
    if encoder is None:
        encoder = build_encoder(cfg.embedder)
    memory = build_memory(cfg.memory, encoder=encoder,
                          extractor=build_extractor(cfg.extractor, encoder, None),
                          text_cache=text_cache(cfg))
    ingest(memory, dataset.conversations)
    return memory, dataset


def composed_memory(overrides: Sequence[str], what: str, encoder: TextEncoder | None = None
                    ) -> tuple[MemorySystem, Dataset]:
    """The ingested memory of ``python -m synapse_pt.run <overrides>`` without running it (the
    benchmarks' and studies' memory); ``what`` names the caller when LoCoMo-10 is missing."""
    return ingested_memory(composed_config(overrides), what, encoder)


def rebuild_memory(run_dir: str | Path) -> tuple[MemorySystem, Dataset]:
    """The ingested memory and the dataset of the run folder ``run_dir``, rebuilt from its
    resolved ``config.yaml`` (:func:`ingested_memory`); for analyses that need more than the
    run's outputs (the activation figure)."""
    cfg_path = Path(run_dir) / "config.yaml"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"{run_dir}: no config.yaml (not a run folder)")
    cfg = OmegaConf.load(cfg_path)
    return ingested_memory(cfg, None if cfg.dataset.get("name") == "sample"
                           else f"rebuilding {run_dir}")


def retrieval_settings(memory_cfg: DictConfig, resolved_memory: Mapping[str, Any]
                       ) -> dict[str, Any]:
    """The retrieval-only fields (``retrieval_fields`` of the memory class) of a memory config."""
    fields = get_class(memory_cfg["_target_"]).retrieval_fields
    return {k: resolved_memory[k] for k in fields if k in resolved_memory}


def ingest_key(resolved: Mapping[str, Any], dataset: Dataset) -> str:
    """Hash of what an ingested memory depends on: data, embedder, extractor (and its LLM),
    device, and the memory config without its retrieval-only fields."""
    memory = dict(resolved["memory"])
    for name in get_class(memory["_target_"]).retrieval_fields:
        memory.pop(name, None)
    uses_llm = not resolved["extractor"].get("llm_free", True)

    def without_cache(section: Mapping[str, Any]) -> dict[str, Any]:  # where caches live
        return {k: v for k, v in section.items() if k not in ("cache", "cache_dir")}

    return config_hash({"dataset": dataset.sha256, "subset": [c.sample_id for c in dataset],
                        "turn_offset_seconds": resolved["dataset"].get("turn_offset_seconds"),
                        "embedder": without_cache(resolved["embedder"]),
                        "extractor": resolved["extractor"], "device": resolved["device"],
                        "llm": without_cache(resolved["llm"]) if uses_llm else None,
                        "memory": memory})


@dataclass
class RunMemory:
    """A run's encoder and ingested memory, with how long building them took."""

    encoder: TextEncoder
    memory: MemorySystem
    timings: dict[str, float] = field(default_factory=dict)


# The last ingested memory of this process, keyed by everything that shapes it (multiruns and
# sweeps run their jobs in one process: a trial that only changes retrieval settings reuses it).
_INGESTED: dict[str, tuple[TextEncoder, MemorySystem]] = {}


def run_memory(cfg: DictConfig, resolved: Mapping[str, Any], dataset: Dataset, llm: LLM | None,
               derived: TextValueCache) -> RunMemory:
    """The memory a run evaluates: reused from the previous run of this process when only its
    retrieval settings differ (``reuse_ingested``), else built and ingested. Timings:
    ``setup_seconds``, ``ingest_seconds``, ``ingest_reused`` (1.0 when reused)."""
    t0 = time.perf_counter()
    key = ingest_key(resolved, dataset)
    reused = _INGESTED.get(key) if cfg.get("reuse_ingested", True) else None
    if reused is not None:  # same memory, other retrieval settings: skip the rebuild
        encoder, memory = reused
        memory.configure_retrieval(**retrieval_settings(cfg.memory, resolved["memory"]))
        log.info("reusing the memory ingested by an earlier run of this process")
        return RunMemory(encoder, memory, {"setup_seconds": time.perf_counter() - t0,
                                           "ingest_seconds": 0.0, "ingest_reused": 1.0})
    encoder = build_encoder(cfg.embedder)
    extractor = build_extractor(cfg.extractor, encoder, llm)
    memory = build_memory(cfg.memory, encoder=encoder, extractor=extractor, text_cache=derived)
    timings = {"setup_seconds": time.perf_counter() - t0}
    t0 = time.perf_counter()
    ingest(memory, dataset.conversations)
    timings["ingest_seconds"] = time.perf_counter() - t0
    timings["ingest_reused"] = 0.0
    _INGESTED.clear()  # keep one ingested memory per process
    _INGESTED[key] = (encoder, memory)
    return RunMemory(encoder, memory, timings)
