"""Data sources of a run: the dataset and the audited gold named by the ``dataset`` config group,
found, checked and loaded as the benchmark ``dataset.format`` names declares
(:mod:`synapse_pt.data.benchmark`; no benchmark is known here by name).

* :func:`build_dataset`: the file or folder found (an explicit path, its environment variable,
  beside the checkout, the cache, a download for a file), its sha256 checked against
  ``dataset.sha256``, its content against the upstream release's manifest, its categories
  checked, then the subset the config asks for;
* :func:`build_audit`: the benchmark's corrected gold when ``dataset.gold`` asks for it;
* :func:`dataset_categories`: the category names of a ``dataset`` config.

Plain functions of the config mapping (no Hydra): ``synapse_pt.commands.build`` and every entry
point call them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from synapse_pt.common.errors import ConfigError
from synapse_pt.data.schema import Dataset

from .audit import GOLDS, GoldAudit
from .benchmark import Benchmark, benchmark, benchmarks
from .categories import category_names
from .category_check import check_categories
from .errors import DataFormatError, DatasetNotFoundError
from .integrity import check_upstream, upstream_manifest
from .source import SAMPLE_FALLBACK_NOTE, DatasetFile, resolve_dataset_path, sha256_file

log = logging.getLogger(__name__)

#: a smoke run's questions (``smoke=true``: one conversation, these many questions)
SMOKE_QUESTIONS = 12

SAMPLE_REFUSED = ("no LoCoMo-10 file was found, and {what} never falls back to the shipped sample "
                  "conversation (a 14-question smoke test). Provide the data: "
                  "dataset.path=/path/to/locomo10.json, SYNAPSE_DATA=..., or "
                  "../shared/data/locomo10.json beside the checkout; or choose the sample "
                  "explicitly with dataset=sample")


def benchmark_of(cfg: Mapping[str, Any]) -> Benchmark:
    """The declaration of ``dataset.format`` (``locomo`` when absent)."""
    return benchmark(str(cfg.get("format", "locomo")))


def dataset_categories(cfg: Mapping[str, Any]) -> dict[int, str]:
    """``dataset.categories`` (a preset name or a mapping) as ``{number: name}``; absent, the
    categories the benchmark declares."""
    categories = cfg.get("categories") or benchmark_of(cfg).categories
    if isinstance(categories, DictConfig):
        categories = OmegaConf.to_container(categories)
    return category_names(categories)


def build_dataset(cfg: Mapping[str, Any], smoke: bool = False,
                  refuse_fallback: str | None = None) -> Dataset:
    """Resolve and load the dataset named by the ``dataset`` config group, then subset it.

    ``refuse_fallback`` names a context in which falling back to the shipped sample is an error
    (``"a multirun"``, ``"a sweep"``): only a single run may fall back, with a warning, and only
    when the sample was not asked for explicitly."""
    bench = benchmark_of(cfg)
    path = cfg.get("path")
    if path == "sample":
        if bench.sample is None:
            raise ConfigError(f"dataset.path=sample: dataset.format={cfg.get('format')} ships "
                              "no sample")
        path = str(bench.sample)
    file = DatasetFile(filename=str(cfg.get("folder_name") or bench.filename or cfg.get("name")),
                       url=cfg.get("url"), expected_sha256=cfg.get("sha256"),
                       env_var=str(cfg.get("env_var") or "SYNAPSE_DATA"), folder=bench.folder)
    source = resolve_dataset_path(
        path, candidates=cfg.get("candidates") or (), cache_dir=cfg.get("cache_dir"),
        allow_download=bool(cfg.get("allow_download", True)),
        allow_sample=bool(cfg.get("allow_sample", False)) and bench.sample is not None,
        file=file)
    offset = float(cfg.get("turn_offset_seconds", 60))
    options = bench.options(cfg) if bench.options is not None else {}
    dataset = bench.load(source.path, name=cfg.get("name"), turn_offset_seconds=offset,
                         **options)
    # labelled by what it is: the shipped sample only when its content is the sample's
    # (dataset=sample with another file's path is that file, named by it)
    sample = is_shipped_sample(dataset, bench)
    asked_sample = source.is_sample or cfg.get("name") == "sample" or path == str(bench.sample)
    if sample:
        dataset.name = "sample"
    elif cfg.get("name") == "sample":
        dataset.name = source.path.stem
        dataset.notes.append(f"{source.path}: not the shipped sample conversation (its content "
                             f"differs), though dataset.name=sample: named {dataset.name}")
        log.warning("%s", dataset.notes[-1])
    if sample and asked_sample:
        pass  # the sample has no upstream release (and dataset=sample no file hash of its own)
    elif sample:  # a copy of the sample where another file was configured: its hash is checked
        check_sha256(source.path, cfg.get("sha256"))
    else:
        check = check_upstream(dataset, upstream_manifest(dataset.name))
        dataset.upstream = check.status
        if check.status == "same_content":
            dataset.notes.append(f"{source.path}: {check.describe()}")
            log.info("%s: %s", source.path, check.describe())
        elif check.status == "different":
            dataset.notes.append(f"{source.path}: {check.describe()}")
            dataset.upstream_change = "; ".join(check.differences)
            log.warning("%s: %s", source.path, check.describe())
        if check.status != "same_content":  # another serialisation of the data is the data
            check_sha256(source.path, cfg.get("sha256"))
    if source.is_sample:
        if refuse_fallback:
            raise DatasetNotFoundError(SAMPLE_REFUSED.format(what=refuse_fallback))
        dataset.notes.append(SAMPLE_FALLBACK_NOTE)
    check_categories(dataset, dataset_categories(cfg))
    return require_turns(_subset(dataset, cfg, smoke))


def is_shipped_sample(dataset: Dataset, bench: Benchmark) -> bool:
    """Whether ``dataset`` holds the benchmark's shipped sample, by content (its content sha256,
    else its file's sha256, equal to the sample's): a copy of the sample anywhere is the sample,
    an edited sample or another file at ``dataset.path`` under ``dataset=sample`` is not."""
    if bench.sample is None:
        return False
    sample_hash, sample_content = _sample_hashes(str(bench.sample), bench.load)
    if dataset.content_sha256 is not None and sample_content is not None:
        return dataset.content_sha256 == sample_content
    return dataset.sha256 == sample_hash


@functools.cache
def _sample_hashes(path: str, load: Any) -> tuple[str | None, str | None]:
    """``(sha256, content sha256)`` of a benchmark's shipped sample (read once a process)."""
    sample = load(Path(path), name="sample", turn_offset_seconds=60.0)
    return sample.sha256, sample.content_sha256


def check_sha256(path: Path, expected: str | None) -> None:
    """A :class:`DataFormatError` naming the file and both hashes when ``path``'s sha256 is not
    ``dataset.sha256`` (``None``: not checked), wherever the file came from (a download, the
    cache, a candidate, ``dataset.path``). :func:`build_dataset` skips it for a file whose
    content the upstream check finds identical to the release's (``same_content``: another
    serialisation, noted in the run's identity)."""
    if not expected:
        return
    actual = sha256_file(path)
    if actual != expected:
        raise DataFormatError(str(path), "file", "sha256",
                              f"{actual}, not dataset.sha256={expected} (another file than the "
                              "configured one; to use it, pass dataset.sha256=null: its content "
                              "is then checked against upstream and any difference recorded)")


def require_turns(dataset: Dataset) -> Dataset:
    """``dataset`` itself; a :class:`DataFormatError` naming the file and the conversation when a
    conversation has no turn in any session (a memory would hold nothing to retrieve)."""
    for conv in dataset.conversations:
        if conv.num_turns == 0:
            raise DataFormatError(dataset.path, f"conversation {conv.sample_id}", "sessions",
                                  f"no turns in any of its {len(conv.sessions)} sessions: "
                                  "nothing to ingest")
    return dataset


def _subset(dataset: Dataset, cfg: Mapping[str, Any], smoke: bool) -> Dataset:
    """The subset of ``dataset`` the config asks for (``sample_ids``, ``max_conversations``,
    ``max_questions``, ``question_categories``; ``smoke``: one conversation, a few questions)."""
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


def build_audit(cfg: Mapping[str, Any], dataset: Dataset) -> GoldAudit | None:
    """The benchmark's audited gold of ``dataset`` when ``dataset.gold`` asks for it (``audited``
    or ``both``), else ``None``; an error for a benchmark that declares none."""
    gold = cfg.get("gold", "official")
    if gold not in GOLDS:
        raise ConfigError(f"dataset.gold must be one of {list(GOLDS)}, got {gold!r}")
    if gold == "official":
        return None
    audit = benchmark_of(cfg).audit
    if audit is None:
        audited = sorted(f for f, b in benchmarks().items() if b.audit is not None)
        raise ConfigError(f"dataset.gold={gold}: only dataset.format={audited} has an audited "
                          f"gold; {cfg.get('name')} takes dataset.gold=official")
    return audit(cfg, dataset)
