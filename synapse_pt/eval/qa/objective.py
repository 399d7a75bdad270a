"""The run's ``objective`` checked before the run: is it a name its ``metrics.json`` will hold, and
do the questions asked let it have a value?

:func:`~synapse_pt.eval.records.record.lookup_metric` reads the objective after the run, by its
dotted
name: ``<metric>.<category or summary>`` under ``metrics`` (``recall@10.mean_q_1_4``,
``f1_official.adversarial``), else ``<section>.<key>`` of ``metrics.json`` itself
(``retrieval.false_rejection_rate``). Which metrics and sections a run writes follows from its
``eval`` settings and its dataset; which categories and summaries carry a value follows from the
questions asked (``dataset.question_categories``, the subset sizes). :func:`check_objective`
checks both before anything is embedded, so a typo or an objective the selected questions cannot
produce stops the run in seconds, not after it. The keys under a section (``retrieval.<key>``)
are read after the run, as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence

from synapse_pt.errors import ConfigError
from synapse_pt.eval.qa.aggregate import OVERALL, answerable_span, summary_names
from synapse_pt.eval.qa.pipeline import EvalSettings, metric_columns


def run_sections(settings: EvalSettings, *, llm: bool, peer_rules: bool, gold: str,
                 llm_extractor: bool) -> list[str]:
    """The sections of ``metrics.json`` besides ``metrics`` that a run with these settings
    writes (:func:`~synapse_pt.eval.records.record.run_metrics`)."""
    qa = settings.mode == "qa"
    sections = ["identity", "retrieval"]
    if peer_rules:
        sections.append("peer_rules")
    if gold == "both":
        sections += ["metrics_audited", *(["peer_rules_audited"] if peer_rules else [])]
    if qa and settings.judge_runs > 0:
        sections.append("judge")
    if qa and llm:
        sections.append("usage")
    if llm_extractor:
        sections.append("extraction")
    return sections


def check_objective(name: str, settings: EvalSettings, *, categories: Collection[int],
                    names: Mapping[int, str], answerable: Sequence[int],
                    sections: Sequence[str]) -> None:
    """Raise :class:`~synapse_pt.errors.ConfigError` (one line naming ``objective=``) unless
    ``name`` is a metric of this run over categories the questions asked cover, or a section of
    its ``metrics.json``.

    Args:
        name: the dotted objective (``cfg.objective``).
        settings: the run's ``eval`` settings (which metrics it scores).
        categories: the raw categories of the questions the run asks.
        names: ``{category number: name}`` of the dataset.
        answerable: the categories the summaries cover (the dataset's).
        sections: :func:`run_sections`.
    """
    metric, _, key = name.partition(".")
    metrics = metric_columns(settings)
    if metric in sections and metric not in metrics:
        return  # a top-level section: its keys are read after the run
    if metric not in metrics:
        why = _why_absent(metric, settings)
        raise ConfigError(f"objective={name}: {why}; this run records the metrics "
                          f"{', '.join(metrics)} (objective=<metric>.<category or summary>) and "
                          f"the sections {', '.join(sections)} (objective=<section>.<key>)")
    macro, micro = summary_names(answerable)
    by_name = {v: k for k, v in names.items()}
    keys = [names[c] for c in sorted(names)] + [macro, micro, OVERALL]
    asked = sorted(int(c) for c in categories)
    if key not in keys:
        raise ConfigError(f"objective={name}: {metric} has no key {key!r}; its keys: "
                          f"{', '.join(keys)}")
    if key in by_name and by_name[key] not in asked:
        raise ConfigError(f"objective={name}: no question of category {by_name[key]} ({key}) "
                          f"is asked (categories asked: {asked}; dataset.question_categories "
                          f"and the subset settings choose them)")
    if key in (macro, micro) and not set(asked) & set(answerable):
        raise ConfigError(f"objective={name}: {key} is over categories "
                          f"{answerable_span(answerable)} and none of their questions is asked "
                          f"(categories asked: {asked}; dataset.question_categories and the "
                          f"subset settings choose them); e.g. objective={metric}.{OVERALL}")
    if not asked:
        raise ConfigError(f"objective={name}: the run asks no question")


def _why_absent(metric: str, settings: EvalSettings) -> str:
    """Why ``metric`` is not among this run's metrics, where a setting says so."""
    qa_only = metric_columns(dataclasses.replace(settings, mode="qa", judge_runs=1))
    if metric.startswith("recall@"):
        return (f"{metric} is not among eval.recall_ks={list(settings.recall_ks)} (recall@<k>) "
                f"and eval.recall_budgets={list(settings.recall_budgets)} (recall@<T>tok)")
    if metric in qa_only and settings.mode != "qa":
        return f"{metric} is scored in qa mode only (eval.mode={settings.mode}; eval=qa)"
    if metric in qa_only:
        return f"{metric} needs the LLM judge (eval.judge_runs={settings.judge_runs}; eval=judge)"
    return f"{metric!r} is not a metric of this run"
