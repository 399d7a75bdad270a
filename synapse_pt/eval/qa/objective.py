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
produce stops the run in seconds, not after it. A section's keys (``retrieval.<key>``,
``judge.judge_mem0_runs``) are given by :func:`synapse_pt.commands.preflight.section_keys`: the
ones the
functions that write the section give for a stand-in of one question of each category asked, so
the check and the run cannot disagree;
the nested sections (``peer_rules``, ``metrics_audited``, ``peer_rules_audited``) take
``<section>.<metric>.<category or summary>``. ``identity`` holds what the run is, not a measure:
it is no objective.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence

from synapse_pt.common.errors import ConfigError
from synapse_pt.eval.qa.aggregate import OVERALL, answerable_span, summary_names
from synapse_pt.eval.qa.pipeline import EvalSettings, metric_columns
from synapse_pt.eval.qa.scorers.peer_rules import PEER_RULES

#: the sections whose keys are ``<metric>.<category or summary>``, as ``metrics``' are
NESTED_SECTIONS = ("peer_rules", "metrics_audited", "peer_rules_audited")
#: the sections whose keys are names of figures (``retrieval.false_rejection_rate``)
FLAT_SECTIONS = ("retrieval", "judge", "usage", "extraction")
#: the section that says what the run is: no objective
IDENTITY = "identity"


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


def check_objective_name(name: str, settings: EvalSettings, sections: Sequence[str]) -> None:
    """The first part of the objective ``name`` (before its first dot) is a metric of a run under
    ``settings`` or one of its ``sections`` (:func:`run_sections`) that holds measures (not
    ``identity``): what can be checked before the data is read; a
    :class:`~synapse_pt.common.errors.ConfigError` naming ``objective=name`` otherwise."""
    metric = name.partition(".")[0]
    metrics = metric_columns(settings)
    shown = ", ".join(s for s in sections if s != IDENTITY)
    if metric == IDENTITY:
        raise ConfigError(f"objective={name}: {IDENTITY} says what the run is, not what it "
                          f"measured; choose a metric (objective=<metric>.<category or summary>: "
                          f"{', '.join(metrics)}) or a key of the sections {shown}")
    if metric not in metrics and metric not in sections:
        raise ConfigError(f"objective={name}: {_why_absent(metric, settings)}; this run records "
                          f"the metrics {', '.join(metrics)} (objective=<metric>.<category or "
                          f"summary>) and the sections {shown} (objective=<section>.<key>)")


def check_objective(name: str, settings: EvalSettings, *, categories: Collection[int],
                    names: Mapping[int, str], answerable: Sequence[int],
                    sections: Sequence[str],
                    section_keys: Mapping[str, Sequence[str]] | None = None) -> None:
    """Raise :class:`~synapse_pt.common.errors.ConfigError` (one line naming ``objective=``) unless
    ``name`` is a metric of this run over categories the questions asked cover, a key of one of
    its flat sections (``section_keys``), or a metric of a nested one (:data:`NESTED_SECTIONS`)
    over such categories.

    Args:
        name: the dotted objective (``cfg.objective``).
        settings: the run's ``eval`` settings (which metrics it scores).
        categories: the raw categories of the questions the run asks.
        names: ``{category number: name}`` of the dataset.
        answerable: the categories the summaries cover (the dataset's).
        sections: :func:`run_sections`.
        section_keys: ``{section: keys}`` of the flat sections the run writes
            (:func:`synapse_pt.commands.preflight.section_keys`); a flat section without its keys
            here is checked by its name only.
    """
    metric, _, key = name.partition(".")
    metrics = metric_columns(settings)
    check_objective_name(name, settings, sections)
    flat = {s: list(section_keys[s]) for s in (section_keys or {}) if s in sections}
    if metric in FLAT_SECTIONS and metric in sections and metric not in flat:
        return  # its keys are not known here: read after the run
    if metric in flat and (metric not in metrics or key in flat[metric]):
        if key not in flat[metric]:
            raise ConfigError(f"objective={name}: {metric} has no key {key!r}; its keys: "
                              f"{', '.join(flat[metric])}")
        return
    if metric in NESTED_SECTIONS and metric in sections:
        inner, _, key = key.partition(".")
        columns = (metrics if metric == "metrics_audited"
                   else [f"{rule}@{k}" for rule in PEER_RULES for k in settings.peer_ks])
        if inner not in columns:
            raise ConfigError(f"objective={name}: {metric} has no metric {inner!r}; its metrics: "
                              f"{', '.join(columns)} (objective={metric}.<metric>.<category or "
                              "summary>)")
        _check_key(name, inner, key, categories=categories, names=names, answerable=answerable)
        return
    _check_key(name, metric, key, categories=categories, names=names, answerable=answerable)


def _check_key(name: str, metric: str, key: str, *, categories: Collection[int],
               names: Mapping[int, str], answerable: Sequence[int]) -> None:
    """``key`` of a metric (a category's name or a summary) has a value over the questions of
    ``categories``: else a :class:`~synapse_pt.common.errors.ConfigError` naming
    ``objective=name``."""
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
