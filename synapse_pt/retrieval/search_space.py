"""SYNAPSE's hyperparameter search space, declared once (issue 60): :data:`SPACE`.

Each entry is a memory-config key (``params.S``, ``readings.k_anchor``: the keys a run overrides
as ``memory.<key>=...``), its range or choices and its one-line meaning. Every search reads it:

* the batched sweep (``python -m synapse_pt.sweep``, :mod:`synapse_pt.eval.tuning.grid`) draws
  the :class:`Range` entries, uniformly, in the order written here (:func:`ranges`);
* the held-out search (``scripts/tune_heldout.py``, ``SynapseMemory.search_space``) combines the
  :class:`Choice` entries and draws the ranges, all but ``params.tau_gate``, which it calibrates
  per fold for a target false rejection instead of drawing it;
* Optuna (``configs/hparams_search/synapse_optuna.yaml``) searches every entry: its ``params``
  are this space in the sweeper's override syntax (``interval(low, high)``, ``choice(...)``),
  checked equal to it by ``tests/retrieval/test_synapse_space.py``.

Where the three searches used to disagree, the choice and its reason are in
experiments/architecture.md ("SYNAPSE's search space").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from synapse_pt.common.errors import ConfigError
from synapse_pt.retrieval.spreading import PAPER_FIELDS, READING_FIELDS

__all__ = ["SPACE", "Choice", "Range", "choices", "declare", "ranges"]


@dataclass(frozen=True)
class Range:
    """A continuous hyperparameter, drawn uniformly in ``[low, high]``."""

    low: float
    high: float
    meaning: str


@dataclass(frozen=True)
class Choice:
    """A discrete setting or reading: one of ``values`` (in this order: a search's grid)."""

    values: tuple
    meaning: str


#: the config node of each key's first part and the fields it holds
NODES = {"params": PAPER_FIELDS, "readings": READING_FIELDS}


def declare(space: Mapping[str, Range | Choice]) -> dict[str, Range | Choice]:
    """``space`` as a dict, checked: every key is ``params.<field>`` or ``readings.<field>`` of
    :class:`~synapse_pt.retrieval.spreading.SynapseParams`, every range has ``low <= high``,
    every choice at least one value and every entry a meaning. A wrong entry is a
    :class:`~synapse_pt.common.errors.ConfigError` of one line naming its key."""
    for key, entry in space.items():
        node, _, name = key.partition(".")
        if name not in NODES.get(node, ()):
            raise ConfigError(f"SYNAPSE search space: {key}: not a SYNAPSE setting (params.<one "
                              f"of {list(PAPER_FIELDS)}> or readings.<one of "
                              f"{list(READING_FIELDS)}>)")
        if isinstance(entry, Range):
            if not float(entry.low) <= float(entry.high):
                raise ConfigError(f"SYNAPSE search space: {key}: low {entry.low} is above high "
                                  f"{entry.high}")
        elif isinstance(entry, Choice):
            if not tuple(entry.values):
                raise ConfigError(f"SYNAPSE search space: {key}: a choice of no values")
        else:
            raise ConfigError(f"SYNAPSE search space: {key}: a Range or a Choice, got "
                              f"{type(entry).__name__}")
        if not entry.meaning.strip():
            raise ConfigError(f"SYNAPSE search space: {key}: no meaning given")
    return dict(space)


#: SYNAPSE's search space: the discrete readings and settings first (the held-out search's grid
#: is their product in this order), then the continuous hyperparameters (the batched sweep draws
#: them in this order, so this order fixes every sweep's configurations)
SPACE = declare({
    "readings.rank_episodic_only": Choice((False, True), "rank turns only (concepts still "
                                                         "spread activation) or both node types"),
    "readings.energy": Choice(("cosine", "max", "constant"), "initial energy of the anchors"),
    "readings.inhibition": Choice(("every_step", "last_step"), "lateral inhibition after every "
                                                               "propagation step or once after "
                                                               "the last"),
    "readings.inhibition_scope": Choice(("all", "neighbourhood"), "top-M inhibitors among all "
                                                                  "nodes or the anchors and "
                                                                  "their out-neighbours"),
    "readings.pagerank_scale": Choice(("minmax", "max", "none"), "how PageRank enters the "
                                                                 "score, per conversation"),
    "readings.fire_zero": Choice((False, True), "nodes with potential 0 stay at 0 (false) or "
                                                "fire by the literal sigmoid (true)"),
    "params.fan": Choice((True, False), "a node's out-degree divides what it spreads"),
    "readings.k_anchor": Choice((5, 10, 20), "anchors per trigger (dense and BM25)"),
    "params.T": Choice((1, 2, 3), "propagation steps"),
    "params.S": Range(0.2, 1.0, "spreading factor"),
    "params.delta": Range(0.0, 1.0, "decay: share of its activation a node loses per step"),
    "params.beta": Range(0.0, 0.5, "lateral inhibition strength"),
    "params.gamma": Range(1.0, 10.0, "firing sigmoid gain"),
    "params.theta": Range(0.1, 0.9, "firing threshold"),
    "params.lambda1": Range(0.0, 1.0, "score weight of the cosine to the query"),
    "params.lambda2": Range(0.0, 1.0, "score weight of the activation"),
    "params.lambda3": Range(0.0, 0.5, "score weight of the rescaled PageRank"),
    "params.tau_gate": Range(0.0, 0.3, "rejection threshold on C_ret"),
})


def ranges(space: Mapping[str, Range | Choice] = SPACE) -> dict[str, tuple[float, float]]:
    """The continuous entries of ``space``, ``{key: (low, high)}``, in declared order."""
    return {k: (e.low, e.high) for k, e in space.items() if isinstance(e, Range)}


def choices(space: Mapping[str, Range | Choice] = SPACE) -> dict[str, tuple]:
    """The discrete entries of ``space``, ``{key: values}``, in declared order."""
    return {k: tuple(e.values) for k, e in space.items() if isinstance(e, Choice)}
