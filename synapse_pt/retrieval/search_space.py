"""SYNAPSE's hyperparameter search space, read from the settings' declaration (issue 60):
:data:`SPACE`.

Each entry is a memory-config key (``params.S``, ``readings.k_anchor``: the keys a run overrides
as ``memory.<key>=...``), its range or choices and its one-line meaning, all three from the
setting's declaration in :mod:`synapse_pt.retrieval.settings` (its ``search``); this module adds
only the order of the search (:data:`ORDER`). Every search reads it:

* the batched sweep (``python -m synapse_pt.sweep``, :mod:`synapse_pt.eval.tuning.grid`) draws
  the :class:`Range` entries, uniformly, in this order (:func:`ranges`);
* the held-out search (``scripts/tune_heldout.py``, ``SynapseMemory.search_space``) combines the
  :class:`Choice` entries and draws the ranges, all but ``params.tau_gate``, which it calibrates
  per fold for a target false rejection instead of drawing it;
* Optuna (``configs/hparams_search/synapse_optuna.yaml``) searches every entry: its ``params``
  are this space in the sweeper's override syntax (``interval(low, high)``, ``choice(...)``),
  checked equal to it by ``tests/retrieval/test_search_space.py``.

Where the three searches used to disagree, the choice and its reason are in
experiments/architecture.md ("SYNAPSE's search space").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from synapse_pt.common.errors import ConfigError
from synapse_pt.retrieval.settings import (
    PAPER_FIELDS,
    READING_FIELDS,
    SETTINGS,
    Choice,
    Range,
    check,
)

__all__ = ["ORDER", "SPACE", "Choice", "Range", "choices", "declare", "ranges", "searched"]


def declare(space: Mapping[str, Range | Choice]) -> dict[str, Range | Choice]:
    """``space`` as a dict, checked: every key is ``params.<field>`` or ``readings.<field>`` of
    :class:`~synapse_pt.retrieval.settings.SynapseParams`, every range has ``low <= high``,
    every choice at least one value, every entry a meaning, and every value it can draw is one
    the setting allows. A wrong entry is a :class:`~synapse_pt.common.errors.ConfigError` of one
    line naming its key."""
    for key, entry in space.items():
        node, _, name = key.partition(".")
        declared = SETTINGS.get(name)
        if declared is None or declared.node != node:
            raise ConfigError(f"SYNAPSE search space: {key}: not a SYNAPSE setting (params.<one "
                              f"of {list(PAPER_FIELDS)}> or readings.<one of "
                              f"{list(READING_FIELDS)}>)")
        if isinstance(entry, Range):
            if not float(entry.low) <= float(entry.high):
                raise ConfigError(f"SYNAPSE search space: {key}: low {entry.low} is above high "
                                  f"{entry.high}")
            values: tuple = (entry.low, entry.high)
        elif isinstance(entry, Choice):
            values = tuple(entry.values)
            if not values:
                raise ConfigError(f"SYNAPSE search space: {key}: a choice of no values")
        else:
            raise ConfigError(f"SYNAPSE search space: {key}: a Range or a Choice, got "
                              f"{type(entry).__name__}")
        if not entry.meaning.strip():
            raise ConfigError(f"SYNAPSE search space: {key}: no meaning given")
        for value in values:
            try:
                check(declared, value)
            except ConfigError as err:
                raise ConfigError(f"SYNAPSE search space: {key}: {err}") from None
    return dict(space)


#: the order of the search: the discrete readings and settings first (the held-out search's grid
#: is their product in this order), then the continuous hyperparameters (the batched sweep draws
#: them in this order, so this order fixes every sweep's configurations)
ORDER = ("readings.rank_episodic_only", "readings.energy", "readings.inhibition",
         "readings.inhibition_scope", "readings.pagerank_scale", "readings.fire_zero",
         "params.fan", "readings.k_anchor", "params.T",
         "params.S", "params.delta", "params.beta", "params.gamma", "params.theta",
         "params.lambda1", "params.lambda2", "params.lambda3", "params.tau_gate")


def searched(order: tuple[str, ...] = ORDER) -> dict[str, Range | Choice]:
    """The declared search entry of each key of ``order``, with its setting's meaning; ``order``
    must name every searched setting once and no other."""
    declared = {s.key: s.search for s in SETTINGS.values() if s.search is not None}
    if sorted(order) != sorted(declared):
        raise ConfigError(f"SYNAPSE search space: the order {list(order)} must name each searched "
                          f"setting once: {sorted(declared)}")
    return {key: replace(declared[key], meaning=SETTINGS[key.split(".", 1)[1]].meaning)
            for key in order}


#: SYNAPSE's search space: each searched setting's declared range or choices, in :data:`ORDER`
SPACE = declare(searched())


def ranges(space: Mapping[str, Range | Choice] = SPACE) -> dict[str, tuple[float, float]]:
    """The continuous entries of ``space``, ``{key: (low, high)}``, in declared order."""
    return {k: (e.low, e.high) for k, e in space.items() if isinstance(e, Range)}


def choices(space: Mapping[str, Range | Choice] = SPACE) -> dict[str, tuple]:
    """The discrete entries of ``space``, ``{key: values}``, in declared order."""
    return {k: tuple(e.values) for k, e in space.items() if isinstance(e, Choice)}
