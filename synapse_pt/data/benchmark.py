"""Benchmarks registered as memories are: a benchmark is a file and a config.

The file is a module that declares ``BENCHMARK = Benchmark(...)`` (its loader, how its data is
found, its category names, its audited gold if it has one); the config,
``configs/dataset/<name>.yaml``, names it with ``format:``. ``dataset.format=realtalk`` reads
``synapse_pt.data.realtalk.BENCHMARK``; a dotted name (``dataset.format=mypkg.mybench``) reads the
``BENCHMARK`` of that module, so a benchmark may live outside the package.
:mod:`synapse_pt.data.resolve` reads the declaration and nothing else: it knows no benchmark by
name. docs/adding_a_benchmark.md works an example.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any

from synapse_pt.common.errors import ConfigError
from synapse_pt.data.schema import Dataset

__all__ = ["Benchmark", "benchmark", "benchmarks"]


@dataclass(frozen=True)
class Benchmark:
    """What a benchmark declares.

    Attributes:
        load: ``load(path, *, name, turn_offset_seconds) -> Dataset``: the found file or folder
            read into the records every memory and scorer reads (a loader sets the dataset's
            ``answerable``, ``unanswerable`` and ``f1_rules``, its scorer routing).
        categories: ``{number: name}`` when the config sets no ``dataset.categories`` (and what
            ``dataset.categories=<format>`` names).
        folder: the data is a folder of files (found as a file is, never downloaded) rather
            than one file.
        filename: its name in the cache folder when the config names none
            (``dataset.folder_name``; else ``dataset.name``).
        sample: a small file in this format shipped in the package: ``dataset.path=sample``
            reads it, and ``dataset.allow_sample=true`` falls back to it with a warning.
        audit: ``audit(dataset_cfg, dataset) -> GoldAudit``: the corrected gold that
            ``dataset.gold=audited|both`` scores against; ``None``: the benchmark has none.
        options: ``options(dataset_cfg) -> {argument: value}``: more keyword arguments of
            ``load`` read from the config (a second file found as LoCoMo-10 is, a variant:
            LoCoMo-Plus); ``None``: ``load`` takes only the three above.
    """

    load: Callable[..., Dataset]
    categories: Mapping[int, str]
    folder: bool = False
    filename: str | None = None
    sample: Path | None = None
    audit: Callable[[Mapping[str, Any], Dataset], Any] | None = None
    options: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None


def benchmark(fmt: str) -> Benchmark:
    """The declaration ``dataset.format=fmt`` names (see the module docstring); a
    :class:`ConfigError` naming the registered formats otherwise."""
    module = fmt if "." in fmt else f"{__package__}.{fmt}"
    try:
        found = getattr(import_module(module), "BENCHMARK", None)
    except ModuleNotFoundError as err:
        if not module.startswith(str(err.name)):  # the module exists; an import inside it failed
            raise
        found = None
    if not isinstance(found, Benchmark):
        raise ConfigError(f"dataset.format must be one of {sorted(benchmarks())} (or a module "
                          f"that declares BENCHMARK), got {fmt!r}")
    return found


def benchmarks() -> dict[str, Benchmark]:
    """Every benchmark declared in ``synapse_pt.data``, by format."""
    found = {}
    for info in pkgutil.iter_modules(import_module(__package__).__path__):
        if not info.name.startswith("_"):
            declared = getattr(import_module(f"{__package__}.{info.name}"), "BENCHMARK", None)
            if isinstance(declared, Benchmark):
                found[info.name] = declared
    return found
