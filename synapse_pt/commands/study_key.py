"""Names of resumable studies from what their trials compute, not from config names.

An Optuna study stored in SQLite is resumed by name, and TPE trusts every trial in it. A name built
from ``dataset.name`` alone lets trials on the shipped sample, on a subset, or with another embedder
land in the study a later full sweep resumes. :func:`study_key` hashes what a trial's objective
depends on apart from the swept parameters: the content sha256 of the data the run will load (the
parsed JSON, as a run's identity has it: the same data written out again is the same study),
the subset, the turn template, embedder, extractor, memory and eval settings and the objective.

Registered as the OmegaConf resolver ``${study_key:}`` (``configs/hparams_search/``); it reads the
whole config through ``_root_``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from synapse_pt.data import DataFormatError
from synapse_pt.data.locomo import content_sha256
from synapse_pt.data.source import (
    LOCOMO_FILENAME,
    DatasetFile,
    resolve_dataset_path,
    sample_path,
    sha256_file,
)
from synapse_pt.eval.records.outputs import run_config

# sections of the config a trial's objective depends on (besides the swept keys and the data file)
KEYED_SECTIONS = ("turn_template", "embedder", "extractor", "memory", "eval", "objective", "smoke",
                  "seed")
SUBSET_KEYS = ("sample_ids", "max_conversations", "max_questions", "question_categories",
               "turn_offset_seconds")
# where caches live (the embedder's exported ONNX graph too), which device computes and how
# (SYNAPSE's memory.engine) are not what a run computes
UNKEYED = ("cache", "cache_dir", "onnx_dir", "device", "engine")


def data_sha256(dataset: Mapping[str, Any]) -> str:
    """Content sha256 of the data a run with this ``dataset`` config loads: of a JSON file, the
    parsed data as canonical JSON (:func:`~synapse_pt.data.locomo.content_sha256`, what a run's
    identity compares: the same data written out again names the same study), else the file's
    sha256. Never the sample by fallback: a study must not be named after data a multirun
    refuses to use."""
    path = dataset.get("path")
    if path == "sample":
        return file_content_sha256(sample_path())
    file = DatasetFile(filename=LOCOMO_FILENAME, url=dataset.get("url"),
                       expected_sha256=dataset.get("sha256"))
    source = resolve_dataset_path(path, candidates=dataset.get("candidates") or (),
                                  cache_dir=dataset.get("cache_dir"),
                                  allow_download=bool(dataset.get("allow_download", True)),
                                  allow_sample=False, file=file)
    return file_content_sha256(source.path)


def file_content_sha256(path: Path) -> str:
    """:func:`~synapse_pt.data.locomo.content_sha256` of a ``.json`` file's data, else the
    file's sha256."""
    if path.suffix != ".json":
        return sha256_file(path)
    try:
        return content_sha256(json.loads(path.read_bytes()))
    except (ValueError, UnicodeDecodeError) as err:
        raise DataFormatError(str(path), "file", "<top level>",
                              f"not readable JSON ({err})") from None


def _drop(tree: Any, dotted: str) -> None:
    """Remove ``a.b.c`` from a nested dict (no-op where absent)."""
    *parents, leaf = dotted.split(".")
    for part in parents:
        if not isinstance(tree, dict) or part not in tree:
            return
        tree = tree[part]
    if isinstance(tree, dict):
        tree.pop(leaf, None)


def study_content(root: DictConfig) -> dict[str, Any]:
    """What :func:`study_key` hashes (for inspection and tests)."""
    swept = sorted(OmegaConf.to_container(OmegaConf.select(root, "hydra.sweeper.params")
                                          or OmegaConf.create({})))
    sections = {k: OmegaConf.to_container(root[k], resolve=True) if OmegaConf.is_config(root[k])
                else root[k] for k in KEYED_SECTIONS if k in root}
    # paths as a run's identity has them: dropped, or relative to their root (a weights folder in
    # the cache), so another SYNAPSE_CACHE or checkout is the same study
    roots = {k: OmegaConf.select(root, f"paths.{k}") for k in ("cache_dir", "root_dir")}
    sections = run_config({**sections, "paths": roots})
    for key in swept:
        _drop(sections, key)
    for name in ("embedder", "extractor", "memory"):
        if isinstance(sections.get(name), dict):
            for key in UNKEYED:
                sections[name].pop(key, None)
    dataset = root.dataset
    return {"data_sha256": data_sha256(dataset),
            "subset": {k: OmegaConf.to_container(dataset[k]) if OmegaConf.is_config(dataset[k])
                       else dataset[k] for k in SUBSET_KEYS if k in dataset},
            "swept": swept, **sections}


def study_key(*, _root_: DictConfig) -> str:
    """12 hex digits naming the study of this config (``${study_key:}``)."""
    text = json.dumps(study_content(_root_), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def register_resolvers() -> None:
    """Register ``study_key`` with OmegaConf (idempotent)."""
    if not OmegaConf.has_resolver("study_key"):
        OmegaConf.register_new_resolver("study_key", study_key, use_cache=False)
