"""What a command checks before it writes anything: every setting that can be checked without
ingesting, and the settings that name folders, before any folder is made.

A setting that cannot work must stop a command before its first write (a folder made, a run's
old outputs replaced) and before its slow part (embedding every text, building the memory), in
one line naming the setting (:class:`~synapse_pt.common.errors.ConfigError`, printed by the CLI as
one line). Three moments:

* :class:`Preflight`, the first Hydra callback (``configs/hydra/default.yaml``), before Hydra or
  :class:`~synapse_pt.commands.hydra_app.WritableRunDir` makes the run's (the multirun's) folder:
  :func:`check_settings` (the estimate and the sweep, which send no answer request, get its
  first part, :func:`check_names`), and for an Optuna sweep its search space
  (:func:`check_search_space`);
* :func:`check_settings` again at the start of :func:`synapse_pt.commands.run.run` (studies and
tests
  call it directly), before it makes or writes its folder;
* :func:`check_run`, once the dataset is loaded and before the run writes its folder: what needs
  the questions asked.

:func:`check_settings` checks, with nothing loaded:

* ``seed``: an integer;
* the settings that form paths (:data:`PATH_SETTINGS`: ``task_name`` names
  ``outputs/<task_name>/``, a study's variant labels name its folders): a relative path below
  its root, no ``..`` (:func:`check_path_label`);
* the roots named by the environment (:data:`ROOTS`: ``paths.root_dir``, from ``SYNAPSE_ROOT``):
  a folder that exists; one that does not is named, never created;
* the ``eval`` settings (:class:`~synapse_pt.eval.qa.pipeline.EvalSettings` checks them when
  built), and judges the mode ignores (``eval.judges`` or ``eval.judge_runs`` in retrieval
  mode): a warning (:func:`ignored_settings`);
* the answer model: ``eval=qa`` needs one; the LLM backend's own settings
  (:meth:`~synapse_pt.models.llm.base.LLM.check_settings`: for an OpenAI-compatible server the
  base URL's form and, where the server needs one, the API key in the environment variable the
  config names; a blank key is a missing one), when the run will send it requests. Nothing is
  sent;
* the ``objective``'s metric or section
  (:func:`~synapse_pt.eval.qa.objective.check_objective_name`); :func:`check_run` checks the
  whole name (a category or summary, a section's key) once the questions asked are known
  (:func:`~synapse_pt.eval.qa.objective.check_objective`).

The upstream prompt files are checked by :func:`~synapse_pt.eval.qa.pipeline.require_upstream`
before the slow part too.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any

import numpy as np
import pandas as pd
from hydra.experimental.callback import Callback
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from synapse_pt.common.errors import ConfigError
from synapse_pt.data.audit import GoldAudit
from synapse_pt.data.resolve import dataset_categories
from synapse_pt.data.schema import Dataset, Question
from synapse_pt.eval.qa.objective import check_objective, check_objective_name, run_sections
from synapse_pt.eval.qa.pipeline import (
    EvalSettings,
    audit_summary,
    for_memory,
    judge_column,
    judge_protocols,
    judge_skip_categories,
    judge_summary,
    retrieval_summary,
)
from synapse_pt.eval.qa.scorers.judge import JudgeResult
from synapse_pt.eval.records.record import extraction_summary, method_usage
from synapse_pt.memory.base import memory_class
from synapse_pt.models.llm.base import LLM
from synapse_pt.models.llm.none import NoLLM

log = logging.getLogger("synapse_pt.run")

#: the keys :func:`~synapse_pt.eval.qa.pipeline.evaluate` adds to the summary besides the
#: scorers' (its timing keys go to ``timing.json``, :func:`~synapse_pt.eval.records.record.
#: run_timings`)
SUMMARY_COUNT_KEYS = ("num_questions",)

#: settings whose value becomes part of a path below a root: ``outputs/<task_name>/<stamp>``
#: (``hydra.run.dir``), and the label a study's variant gets as its ``task_name`` and
#: ``experiment_name`` (``<out>/<i>_<label>``)
PATH_SETTINGS = ("task_name", "experiment_name")
#: roots a user names through the environment: ``{config key: environment variable}``; each must
#: be an existing folder (the checkout, for ``SYNAPSE_ROOT``)
ROOTS = {"paths.root_dir": "SYNAPSE_ROOT"}


def check_path_label(key: str, value: Any) -> str:
    """``value`` of the path-forming setting ``key`` as text: a non-empty relative path whose
    parts are names (no ``..``, ``.``, ``~`` at its start, backslash or NUL), so that the folder it
    names stays inside its root; a :class:`ConfigError` naming ``key`` otherwise."""
    text = str(value)
    parts = PurePath(text).parts
    if (not text.strip() or PurePath(text).is_absolute() or text.startswith("~")
            or any(p in (".", "..") for p in text.split("/")) or "\\" in text or "\0" in text
            or not parts):
        raise ConfigError(f"{key}={text!r}: it names a folder inside its root (outputs/"
                          f"<task_name>/..., a study's <out>/<i>_<label>), so it must be a "
                          "relative name without '..', '.', a leading '/' or '~', or a backslash "
                          "(e.g. my_study, ablations/no_gate)")
    return text


def check_seed(cfg: Mapping[str, Any]) -> int:
    """``seed`` as an integer (a ``bool`` or text is refused, naming the key)."""
    seed = cfg.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"seed must be an integer, got {seed!r}")
    return seed


def check_roots(cfg: DictConfig) -> None:
    """Every root of :data:`ROOTS` is an existing folder: one that does not exist is named, with
    the environment variable that set it, and never created."""
    for key, env in ROOTS.items():
        value = OmegaConf.select(cfg, key)
        if value is None:
            continue
        path = Path(str(value)).expanduser()
        if not path.is_dir():
            source = (f" (from {env}={os.environ[env]!r})" if os.environ.get(env) else "")
            what = "is not a folder" if path.exists() else "does not exist"
            raise ConfigError(f"{key}={str(value)!r}{source} {what}; the root is not created: "
                              f"set {env} to an existing folder (the checkout) or unset it")


def backend_class(cfg: DictConfig) -> type[LLM]:
    """The LLM backend class ``cfg.llm.backend`` builds, read without building it."""
    target = str(cfg.llm.backend.get("_target_", ""))
    backend = get_class(target) if target else None
    if not (isinstance(backend, type) and issubclass(backend, LLM)):
        raise ConfigError(f"llm.backend._target_={target!r} is not an LLM backend class")
    return backend


def uses_llm(cfg: DictConfig, settings: EvalSettings) -> bool:
    """Whether the run sends the LLM requests: its answers (``eval.mode=qa``) or an LLM
    extractor (``extractor.llm_free=false``)."""
    return settings.mode == "qa" or not bool(cfg.extractor.get("llm_free", True))


def check_llm(cfg: DictConfig, settings: EvalSettings) -> None:
    """The answer model of ``cfg.llm`` for a run under ``settings`` (see the module)."""
    backend = backend_class(cfg)
    if issubclass(backend, NoLLM):
        if settings.mode == "qa":
            raise ConfigError("eval.mode=qa needs an answer model and llm=none has none; set "
                              "llm=openai, llm=vllm, llm=smollm2, ... (configs/llm/)")
        return
    if uses_llm(cfg, settings):
        backend.check_settings(cfg.llm.backend)


def eval_settings(cfg: DictConfig, dataset: Dataset | None = None) -> EvalSettings:
    """The run's ``eval`` settings (checked when built), the memory's own steps resolved
    (:func:`~synapse_pt.eval.qa.pipeline.for_memory`), and the benchmark's own judge where the
    loaded ``dataset`` declares one."""
    resolved = OmegaConf.to_container(cfg.eval, resolve=True)
    assert isinstance(resolved, dict)
    settings = EvalSettings(**{k: v for k, v in resolved.items()
                               if k in EvalSettings.__dataclass_fields__})
    return for_memory(settings, memory_class(cfg), dataset)


def ignored_settings(settings: EvalSettings) -> list[str]:
    """What the run's mode ignores of its settings, one line each: judges in retrieval mode (no
    answers to judge)."""
    if settings.mode == "qa":
        return []
    asked = [f"eval.judges={list(settings.judges)}"] if settings.judges else []
    asked += [f"eval.judge_runs={settings.judge_runs}"] if settings.judge_runs else []
    if not asked:
        return []
    return [f"{' and '.join(asked)} ignored: eval.mode=retrieval has no answers to judge "
            "(eval=judge, or eval=qa eval.judge_runs=1, judges them)"]


def section_keys(settings: EvalSettings, sections: Sequence[str], *,
                 categories: Collection[int], answerable: Sequence[int],
                 unanswerable: int | None, gold: str) -> dict[str, list[str]]:
    """``{section: keys}`` of the flat sections of ``sections`` (``retrieval``, ``judge``,
    ``usage``, ``extraction``) as a run asking questions of ``categories`` scored under ``gold``
    writes them: each computed by the function that writes the section, on a stand-in of one
    question of each category asked (the keys depend on the categories asked, not on the
    values; one exception: a judge's per-category accuracy is left out where every reply of the
    category was unreadable, which :func:`synapse_pt.commands.run.objective_value` finds before the
    outputs are committed)."""
    asked = sorted({int(c) for c in categories})
    probe = pd.DataFrame({"gated": [False] * len(asked), "category": asked,
                          "c_ret": [0.0] * len(asked), "gate_score": [0.0] * len(asked),
                          "retrieved": [[]] * len(asked), "context_tokens": [0] * len(asked)})
    summary = dict(retrieval_summary(probe, answerable, unanswerable))
    if gold != "official":  # the gate's rejection of the audit's groups
        questions = [Question("", i, "", "", c, (), ()) for i, c in enumerate(asked)]
        summary.update(audit_summary(probe, GoldAudit("", "", {}, 0), questions))
    summary.update(dict.fromkeys(SUMMARY_COUNT_KEYS, 0.0))
    judged: dict[str, float] = {}
    for protocol in judge_protocols(settings) if "judge" in sections else []:
        skip = set(judge_skip_categories(unanswerable, protocol))
        labels = np.array([[np.nan if c in skip else 1.0 for c in asked]] * settings.judge_runs)
        stand_in = JudgeResult(labels=labels, mean=labels.mean(0), std=labels.std(0),
                               n_failures=np.zeros(len(asked)),
                               skipped=np.array([c in skip for c in asked]),
                               replies=[], seeds=list(range(settings.judge_runs)))
        judged.update(judge_summary(stand_in, asked, judge_column(settings, protocol)))
    keys = {"retrieval": [k for k in summary if not k.startswith("judge")]}
    if "judge" in sections:
        keys["judge"] = list(judged)
    if "usage" in sections:
        answered = pd.DataFrame({"prompt_tokens": [], "completion_tokens": [], "latency_s": []})
        keys["usage"] = list(method_usage(answered, {}, model="", num_queries=0))
    if "extraction" in sections:
        keys["extraction"] = list(extraction_summary({"extraction_attempts": 1}) or {})
    return keys


def objective_sections(cfg: DictConfig, settings: EvalSettings, peer_rules: bool) -> list[str]:
    """The sections of ``metrics.json`` a run of ``cfg`` writes
    (:func:`~synapse_pt.eval.qa.objective.run_sections`)."""
    return run_sections(settings, llm=not issubclass(backend_class(cfg), NoLLM),
                        peer_rules=peer_rules, gold=str(cfg.dataset.get("gold", "official")),
                        llm_extractor=not bool(cfg.extractor.get("llm_free", True)))


def check_names(cfg: DictConfig) -> None:
    """What every command of the run config checks before it makes a folder: ``seed``, the
    settings that form paths (:data:`PATH_SETTINGS`) and the roots (:data:`ROOTS`)."""
    check_seed(cfg)
    for key in PATH_SETTINGS:
        if cfg.get(key) is not None:
            check_path_label(key, cfg.get(key))
    check_roots(cfg)


def check_settings(cfg: DictConfig, warn: bool = True) -> EvalSettings:
    """Everything of a run's ``cfg`` that can be checked with nothing loaded (see the module):
    :func:`check_names`, then its ``eval`` settings, answer model and objective; the run's
    ``eval`` settings. What its mode ignores is logged as a warning (``warn``: the run's own
    check, whose log the run keeps; :class:`Preflight` checks without it)."""
    check_names(cfg)
    settings = eval_settings(cfg)
    for line in ignored_settings(settings) if warn else []:
        log.warning("%s", line)
    check_llm(cfg, settings)
    # the metric or section; its key once the data says which categories are asked (check_run)
    check_objective_name(str(cfg.objective), settings,
                         objective_sections(cfg, settings, peer_rules=True))
    return settings


def check_run(cfg: DictConfig, dataset: Dataset, settings: EvalSettings) -> None:
    """Everything of ``cfg`` that needs the loaded (and subset) ``dataset`` (see the module):
    its ``objective`` over the questions asked; ``settings`` are the run's ``eval`` settings
    (:func:`eval_settings`)."""
    categories = {int(q.category) for q in dataset.questions()}
    sections = objective_sections(cfg, settings, peer_rules=dataset.id_convention == "locomo")
    keys = section_keys(settings, sections, categories=categories,
                        answerable=dataset.answerable, unanswerable=dataset.unanswerable,
                        gold=str(cfg.dataset.get("gold", "official")))
    check_objective(str(cfg.objective), settings, categories=categories,
                    names=dataset_categories(cfg.dataset), answerable=dataset.answerable,
                    sections=sections, section_keys=keys)


def check_search_space(cfg: DictConfig) -> None:
    """An Optuna sweep's search space (``hydra.sweeper.params`` and the sweep overrides of the
    command line) as the sweeper will read it: a range it cannot draw from (``interval(0.5,
    0.1)``) is a :class:`ConfigError` naming the parameter and its range."""
    sweeper = OmegaConf.select(cfg, "hydra.sweeper")
    if sweeper is None or "optuna" not in str(sweeper.get("_target_", "")).lower():
        return
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra_plugins.hydra_optuna_sweeper._impl import create_optuna_distribution_from_override

    params = OmegaConf.to_container(sweeper.get("params") or {}, resolve=False)
    assert isinstance(params, dict)
    listed = [f"{k}={v}" for k, v in params.items()]
    listed += [str(o) for o in OmegaConf.select(cfg, "hydra.overrides.task") or []]
    parser = OverridesParser.create()
    for text in listed:
        try:
            (override,) = parser.parse_overrides([text])
            create_optuna_distribution_from_override(override)
        except ValueError as err:
            where = "hydra.sweeper.params" if text in listed[:len(params)] else "the command line"
            raise ConfigError(f"{text} ({where}): not a range the Optuna sweeper can draw from: "
                              f"{err}") from None


#: the Hydra jobs (``hydra.job.name``) whose settings :class:`Preflight` checks in full
#: (:func:`check_settings`): a run sends the requests; the estimate (which sends none, and needs
#: no key) and the sweep get :func:`check_names`
RUN_JOBS = ("run",)


class Preflight(Callback):
    """Hydra callback, the first of ``configs/hydra/default.yaml``: before any folder is made,
    :func:`check_settings` for a run (:data:`RUN_JOBS`), :func:`check_names` for the other
    commands of the run config, and for a multirun :func:`check_search_space`; a refusal is one
    line naming the setting, as a run's (exit status 1), and nothing is written."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config, multirun=False)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config, multirun=True)

    @staticmethod
    def _check(config: DictConfig, multirun: bool) -> None:
        if "eval" not in config:  # not a run's config
            return
        try:
            if multirun:
                check_search_space(config)
            if OmegaConf.select(config, "hydra.job.name") in RUN_JOBS:
                check_settings(config, warn=False)  # the run warns, into its log
            else:
                check_names(config)
        except ConfigError as err:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            print(f"[synapse_pt] error: {err} (HYDRA_FULL_ERROR=1 shows the traceback)",
                  file=sys.stderr)
            raise SystemExit(1) from err
