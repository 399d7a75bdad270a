"""A run's own folder: claimed so that no two runs share it, refused to another configuration or
other data, its outputs committed only when the run has succeeded.

* :func:`claim_new_folder`: a stamped folder name (``outputs/run/<date>_<time>_<microseconds>``)
  made atomically, with ``-2``, ``-3``, ... appended when another run made it first;
* the folder is locked, staged and committed as every folder the project writes
  (:mod:`synapse_pt.eval.records.commit`); :func:`legacy_run_files` says which files a run folder
  written before manifests holds;
* :func:`check_output_dir`, :func:`check_same_data`: a finished folder of another configuration
  (:func:`~synapse_pt.eval.records.outputs.run_config`: the config without its result-neutral
  settings and its paths) or of other data (the data's content sha256) is refused
  (:class:`OutputDirInUse`) unless ``overwrite=true``; the same configuration on the same data
  resumes, wherever the folder, the caches or the data file now are;
* :func:`writing`: an error writing a file of the folder is one :class:`OutputDirNotWritable`
  naming the folder, the file and what was kept.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from synapse_pt.eval.records.outputs import (
    RUN_FILES,
    TABLES,
    result_neutral_changes,
    run_config,
)

log = logging.getLogger("synapse_pt.run")

#: the files whose presence makes a folder hold a configuration's outputs (a run that failed
#: before writing any of them left only its ``config.yaml``)
RUN_OUTPUTS = ("metrics.json", "predictions.parquet")
#: Hydra's records of the run (its composed config, Hydra's config, the command-line overrides)
HYDRA_RECORDS = ".hydra"
#: the run's log (``<hydra.job.name>.log``)
LOG_NAME = "run.log"


class OutputDirInUse(RuntimeError):
    """A run folder already holds the outputs of another configuration."""


class OutputDirNotWritable(OSError):
    """A run's (or a multirun's) folder cannot be created or written."""


@contextmanager
def writing(folder: Path) -> Iterator[None]:
    """Turn an :class:`OSError` of a file under ``folder`` (made read-only mid-run, a full disk,
    a file over ``ulimit -f``, ...) into one :class:`OutputDirNotWritable` naming the folder, the
    file, the cause and what was kept (an error of a file elsewhere, a cache's, is left to the
    caller's boundary)."""
    try:
        yield
    except OSError as err:
        name = err.filename
        inside = name is not None and Path(os.fsdecode(name)).resolve().is_relative_to(
            folder.resolve())
        if not inside or isinstance(err, OutputDirNotWritable):
            raise
        reason = os.strerror(err.errno) if err.errno else err.strerror
        raise OutputDirNotWritable(
            f"{folder}: the run's outputs could not be written ({os.fsdecode(name)}: "
            f"{reason}); the folder's earlier outputs are left as they were, the caches keep "
            "what this run computed; make room or make it writable and rerun, or choose another "
            "hydra.run.dir") from err


def claim_new_folder(folder: str | Path) -> Path:
    """Make ``folder`` (its parents as needed) and return it; when it exists (another run made it
    first: two runs started in the same microsecond, or a rerun of a stamped name), the first of
    ``<folder>-2``, ``<folder>-3``, ... that this call makes itself. ``os.mkdir`` is atomic, so
    concurrent callers never get the same folder."""
    base = Path(folder)
    base.parent.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            n += 1


def holds_outputs(folder: Path) -> bool:
    """Whether ``folder`` holds a run's outputs (any of :data:`RUN_OUTPUTS`)."""
    return any((folder / name).exists() for name in RUN_OUTPUTS)


def legacy_run_files(folder: Path) -> list[str]:
    """The files a run of a version before manifests wrote into ``folder`` (its outputs,
    ``tables/``, Hydra's records, the log): the :data:`~synapse_pt.eval.records.commit.Legacy`
    rule of a run folder, read only for a folder holding a run's outputs and no manifest."""
    if not holds_outputs(folder):
        return []
    nested = [str(p.relative_to(folder)) for name in (TABLES, HYDRA_RECORDS)
              for p in sorted((folder / name).glob("*")) if p.is_file()]
    return [*RUN_FILES, *nested, LOG_NAME]


def _refuse(output_dir: Path, what: str) -> OutputDirInUse:
    return OutputDirInUse(
        f"{output_dir} holds the outputs of another {what}; choose another hydra.run.dir, rerun "
        "the same configuration on the same data to resume, or pass overwrite=true to replace "
        "them")


def data_identity(dataset: Any) -> tuple[str, str | None]:
    """``(what, hash)`` naming a loaded dataset's data: its content sha256 (the parsed data as
    canonical JSON: the same under another serialisation), else the sha256 of its file (a
    dataset of several files: of their listing)."""
    if getattr(dataset, "content_sha256", None):
        return "content sha256", dataset.content_sha256
    return "sha256", dataset.sha256


def check_same_data(output_dir: Path, dataset: Any, overwrite: bool = False) -> None:
    """Refuse to write into a folder whose outputs were computed on other data: the data recorded
    in its ``metrics.json`` (``identity.dataset``: the content sha256, else the file's sha256) is
    not ``dataset``'s (:func:`data_identity`). A file nobody pinned (``dataset.sha256=null``) can
    change under the same configuration; this is what tells the two runs apart, while a copy at
    another path or the same data written out again resumes. ``overwrite=true`` replaces them."""
    metrics = output_dir / "metrics.json"
    if overwrite or not metrics.is_file():
        return
    try:
        recorded = json.loads(metrics.read_text())["identity"]["dataset"]
        recorded["sha256"]  # noqa: B018 - fail here with the file's name
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise OutputDirInUse(f"{metrics}: not a run's metrics (no identity.dataset.sha256: "
                             f"{type(err).__name__}: {err}); choose another hydra.run.dir or "
                             "pass overwrite=true to replace it") from None
    what, ours = data_identity(dataset)
    before = recorded.get("content_sha256" if what == "content sha256" else "sha256")
    if before is None:  # a run recorded before content hashes: compared by the file's sha256
        what, ours, before = "sha256", dataset.sha256, recorded["sha256"]
    if before != ours:
        raise _refuse(output_dir, f"data file ({what} {str(before)[:12]}..., this run's "
                                  f"{str(ours)[:12]}...)")


def _read_config(path: Path) -> dict[str, Any]:
    """A run folder's ``config.yaml`` as a dict; :class:`OutputDirInUse` naming the file when it
    is not a readable mapping (truncated, edited by hand)."""
    try:
        value = OmegaConf.to_container(OmegaConf.create(path.read_text()))
    except (yaml.YAMLError, ValueError, UnicodeDecodeError) as err:
        mark, problem = getattr(err, "problem_mark", None), getattr(err, "problem", None)
        reason = (f" at line {mark.line + 1}, column {mark.column + 1}: {problem}"
                  if mark and problem else ": " + " ".join(str(err).split()))
        raise OutputDirInUse(f"{path}: not a readable config ({type(err).__name__}{reason}); "
                             "restore it, choose another hydra.run.dir, or pass overwrite=true "
                             "to replace the folder's outputs") from None
    if not isinstance(value, dict):
        raise OutputDirInUse(f"{path}: not a config (a {type(value).__name__}, not a mapping); "
                             "restore it, choose another hydra.run.dir, or pass overwrite=true "
                             "to replace the folder's outputs")
    return value


def check_output_dir(output_dir: Path, config_text: str, overwrite: bool = False) -> None:
    """Refuse to write into a folder whose outputs are another configuration's.

    The same configuration resumes (its cached answers make the rerun cheap and its outputs
    identical): two configs are compared by :func:`~synapse_pt.eval.records.outputs.run_config`,
    without the settings that cannot change results
    (:data:`~synapse_pt.eval.records.outputs.RESULT_NEUTRAL_KEYS`: caps, concurrency, timeouts,
    retries, the tracker; their new values are recorded in ``config.yaml`` and logged) and without
    their paths (:data:`~synapse_pt.eval.records.outputs.PATH_KEYS`: a moved folder, another
    cache, the data file elsewhere; the data is compared by :func:`check_same_data`). A folder
    holding no :data:`RUN_OUTPUTS` (a failed start's log) accepts any configuration;
    ``overwrite=true`` replaces another configuration's outputs once the new run has succeeded.
    A ``config.yaml`` that cannot be read is refused naming it."""
    saved = output_dir / "config.yaml"
    if overwrite or not saved.is_file():
        return
    before = _read_config(saved)
    after = OmegaConf.to_container(OmegaConf.create(config_text))
    for key, (old, new) in result_neutral_changes(before, after).items():
        log.info("%s: result-neutral setting %s changed %r -> %r (recorded, not compared)",
                 output_dir, key, old, new)
    before, after = run_config(before), run_config(after)
    differ = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if not differ:
        return
    if not holds_outputs(output_dir):
        log.info("%s holds only the config.yaml of a run that wrote no outputs; replacing it "
                 "(differs in %s)", output_dir, differ)
        return
    raise _refuse(output_dir, f"configuration (differs in {differ})")
