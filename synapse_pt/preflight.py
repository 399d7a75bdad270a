"""What a run checks before the slow part: every setting that can be checked without ingesting.

A run's slow part (embedding every text, building the memory) comes before its answers, judge
and objective are used; a setting that cannot work must stop it before, in one line naming the
setting (:class:`~synapse_pt.errors.ConfigError`, printed by the CLI as one line).
:func:`check_run` checks, with the dataset loaded and nothing built:

* the answer model: ``eval=qa`` needs one; the LLM backend's own settings
  (:meth:`~synapse_pt.models.llm.base.LLM.check_settings`: for an OpenAI-compatible server the
  base URL's form and, where the server needs one, the API key in the environment variable the
  config names), when the run will send it requests. Nothing is sent;
* the ``objective`` (:func:`~synapse_pt.eval.qa.objective.check_objective`): a metric or section the
  run records, over categories the questions asked cover.

The ``eval`` settings (answer style, judge protocol, scorers' options) are checked when
:class:`~synapse_pt.eval.qa.pipeline.EvalSettings` is built, the upstream prompt files by
:func:`~synapse_pt.eval.qa.pipeline.require_upstream`; the run does both before the slow part too.
"""

from __future__ import annotations

from hydra.utils import get_class
from omegaconf import DictConfig

from synapse_pt.data.records import Dataset
from synapse_pt.data.resolve import dataset_categories
from synapse_pt.errors import ConfigError
from synapse_pt.eval.qa.objective import check_objective, run_sections
from synapse_pt.eval.qa.pipeline import EvalSettings
from synapse_pt.models.llm.base import LLM
from synapse_pt.models.llm.none import NoLLM


def uses_llm(cfg: DictConfig, settings: EvalSettings) -> bool:
    """Whether the run sends the LLM requests: its answers (``eval.mode=qa``) or an LLM
    extractor (``extractor.llm_free=false``)."""
    return settings.mode == "qa" or not bool(cfg.extractor.get("llm_free", True))


def backend_class(cfg: DictConfig) -> type[LLM]:
    """The LLM backend class ``cfg.llm.backend`` builds, read without building it."""
    target = str(cfg.llm.backend.get("_target_", ""))
    backend = get_class(target) if target else None
    if not (isinstance(backend, type) and issubclass(backend, LLM)):
        raise ConfigError(f"llm.backend._target_={target!r} is not an LLM backend class")
    return backend


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


def check_run(cfg: DictConfig, dataset: Dataset, settings: EvalSettings) -> None:
    """Everything of ``cfg`` that can be checked before ingesting (see the module), given the
    loaded (and subset) ``dataset`` and the run's ``eval`` settings (the memory's own steps
    resolved, :func:`~synapse_pt.eval.qa.pipeline.for_memory`)."""
    check_llm(cfg, settings)
    sections = run_sections(settings, llm=not issubclass(backend_class(cfg), NoLLM),
                            peer_rules=dataset.id_convention == "locomo",
                            gold=str(cfg.dataset.get("gold", "official")),
                            llm_extractor=not bool(cfg.extractor.get("llm_free", True)))
    check_objective(str(cfg.objective), settings,
                    categories={int(q.category) for q in dataset.questions()},
                    names=dataset_categories(cfg.dataset), answerable=dataset.answerable,
                    sections=sections)
