"""Scorers and published rows, and the registry of every kind of step by name.

Each kind is registered once (:func:`register`); ``rank`` orders the kind's entries (the column
order of ``predictions.parquet``). The related systems' packages register theirs when
:mod:`synapse_pt.memory` is imported; the harness imports it before it looks a name up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from synapse_pt.common.errors import ConfigError
from synapse_pt.retrieval.items import RetrievedItem

from .answers import AnswerStep
from .judges import Judge


@dataclass(frozen=True)
class Scorer:
    """A per-question answer metric (a scoring protocol).

    Attributes:
        name: the protocol's name (``metrics.json`` ``identity.scoring_protocols``).
        columns: the columns it writes (float64; ``None`` is a question it does not score).
        score: ``(prediction, gold, category scored as, retrieved pack) -> {column: value}``.
        rank: its place among the scorers (the column order).
        protocol: identity fields it records in a qa run (``metrics.json``; compared between runs).
        protocol_before: the value of such a field in a run recorded before the field existed.
    """

    name: str
    columns: tuple[str, ...]
    score: Callable[[str, Any, int, Sequence[RetrievedItem]], Mapping[str, float | None]]
    rank: int = 0
    protocol: Mapping[str, Any] = field(default_factory=dict)
    protocol_before: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Published:
    """A related system's published LoCoMo numbers, as data its package declares (SPEC §2): the
    row the paper tables put beside a build of ours (:mod:`synapse_pt.eval.reports.paper_numbers`).

    Attributes:
        name: the system as tables name it (``"Membox"``).
        values: per category name, in percent.
        mean: its headline mean (percent).
        metric: the metric of ours scored under its protocol (a key of ``metrics.json``).
        protocol: what the numbers were measured under, in words.
        our_build: the config of ours the row sits beside.
        source: where the numbers are printed.
        rank: its place among the published rows.
    """

    name: str
    values: Mapping[str, float]
    mean: float
    metric: str
    protocol: str
    our_build: str
    source: str
    rank: int = 0


ANSWER_STEPS: dict[str, AnswerStep] = {}
JUDGES: dict[str, Judge] = {}
SCORERS: dict[str, Scorer] = {}
PUBLISHED: dict[str, Published] = {}
_REGISTRIES: dict[type, dict] = {AnswerStep: ANSWER_STEPS, Judge: JUDGES, Scorer: SCORERS,
                                 Published: PUBLISHED}

Entry = AnswerStep | Judge | Scorer | Published


def register(entry: Entry) -> Entry:
    """Add ``entry`` to its kind's registry under its name (once: a second entry of the same
    name is an error)."""
    registry = next(r for kind, r in _REGISTRIES.items() if isinstance(entry, kind))
    if entry.name in registry and registry[entry.name] is not entry:
        raise ValueError(f"{type(entry).__name__} {entry.name!r} is registered twice")
    registry[entry.name] = entry
    ordered = sorted(registry.items(), key=lambda kv: kv[1].rank)
    registry.clear()
    registry.update(ordered)
    return entry


def _lookup(registry: Mapping[str, Any], kind: str, name: str) -> Any:
    if name not in registry:
        raise ConfigError(f"{kind} must be one of {list(registry)}, got {name!r}")
    return registry[name]


def answer_step(name: str) -> AnswerStep:
    return _lookup(ANSWER_STEPS, "eval.answer_style", name)


def judge(name: str) -> Judge:
    return _lookup(JUDGES, "eval.judge_protocol", name)


def scorers() -> list[Scorer]:
    return list(SCORERS.values())


def scorer_columns() -> list[str]:
    """The columns the scorers write, in rank order."""
    return [c for s in SCORERS.values() for c in s.columns]
