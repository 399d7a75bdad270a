"""SYNAPSE's retrieval settings, each declared once (issue 60): :class:`SynapseParams`.

Every field of :class:`SynapseParams` is a setting of the config node ``memory.params`` (the
paper's hyperparameters, SPEC §1.2) or ``memory.readings`` (what SPEC §1.5 leaves open, and our
defaults where the paper is silent), declared by :func:`setting` in one place (the mechanism,
shared with the other settings groups, is :mod:`synapse_pt.common.declared`): its type (the
field's annotation), its default, its allowed range or choices, its one-line meaning and, where
a search varies it, its search :class:`Range` or :class:`Choice`. Everything reads that
declaration (:data:`SETTINGS`):

* the check of every value (:func:`check`; one line naming the key), run by
  ``SynapseParams.__post_init__``, beside the two rules between settings (:data:`CROSS_RULES`);
* the search space that the batched sweep, the held-out search and Optuna search
  (:mod:`synapse_pt.retrieval.search_space`);
* the defaults of ``configs/memory/synapse.yaml`` (its ``params`` and ``readings`` blocks) and
  the table ``docs/settings.md``, both written by ``scripts/settings_doc.py`` from it and checked
  current by ``tests/retrieval/test_settings.py``.

Why plain dataclass fields and not Hydra's structured configs: experiments/architecture.md
("Step four: every setting declared once").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from synapse_pt.common.declared import Choice, Range, Setting, check, setting, settings_of
from synapse_pt.common.errors import ConfigError
from synapse_pt.graph.pagerank import PAGERANK_SCALES
from synapse_pt.nn import INHIBITION_SCHEDULES
from synapse_pt.retrieval.anchors import ENERGY_READINGS
from synapse_pt.retrieval.scoring import C_RET_READINGS

__all__ = ["CROSS_RULES", "PAPER_FIELDS", "READING_FIELDS", "SETTINGS", "STORAGE", "Choice",
           "Range", "Setting", "SynapseParams", "check", "setting"]

Scalar = float | torch.Tensor

#: where the top-M inhibitors are chosen (``readings.inhibition_scope``)
INHIBITION_SCOPES = ("all", "neighbourhood")
#: how the activation layer stores its activations unless told (``memory.engine.frontier`` and
#: ``frontier_density``: :mod:`synapse_pt.nn.frontier`; never what it computes)
STORAGE: dict[str, Any] = {"frontier": "auto", "frontier_density": 0.05}


#: the rules between settings, checked after each setting's own (their words: docs/settings.md)
CROSS_RULES = (
    "params.tau_gate may exceed 1 when readings.c_ret_source is potential (the pre-sigmoid "
    "potential is not bounded above; every other C_ret reading lies in [0, 1])",
    "readings.k_concepts > 0 needs readings.rank_episodic_only = true (the concepts are listed "
    "apart from the k turns)",
)

#: the two config nodes of the settings
_P, _R = "params", "readings"


@dataclass
class SynapseParams:
    """Retrieval hyperparameters, named as in SPEC §1.2, and the readings of SPEC §1.5: one value
    object for the retrieval maths, composed from the config's two nodes ``memory.params``
    (:data:`PAPER_FIELDS`) and ``memory.readings`` (:data:`READING_FIELDS`) by
    :meth:`from_config`. Each field is a declared setting (:func:`setting`: default, allowed
    values, meaning, search entry); the defaults are the paper's values and, where it is silent,
    the literal readings. docs/settings.md tabulates them.

    The numbers may be ``[B]`` tensors (one value per query column), which is how a batched
    sweep evaluates many configurations in one pass.
    """

    # memory.params: the paper's hyperparameters, at the paper's values (SPEC §1.2, steps 1-7)
    S: Scalar = setting(
        _P, 0.8, "spreading factor of u_i += S * w_ji * a_j / fan(j) (step 3)",
        low=0.0, search=Range(0.2, 1.0))
    delta: Scalar = setting(
        _P, 0.5, "decay: the share of its activation a node loses per step (step 3)",
        low=0.0, high=1.0, search=Range(0.0, 1.0))
    beta: Scalar = setting(
        _P, 0.15, "lateral inhibition strength (step 4)",
        low=0.0, search=Range(0.0, 0.5))
    M: int = setting(
        _P, 7, "inhibition acts from the top-M nodes (step 4)",
        low=0)
    gamma: Scalar = setting(
        _P, 5.0, "firing sigmoid gain (step 5; third-party ports agree)",
        low=0.0, search=Range(1.0, 10.0))
    theta: Scalar = setting(
        _P, 0.5, "firing threshold (step 5; third-party ports agree)",
        low=0.0, high=1.0, search=Range(0.1, 0.9))
    T: int = setting(
        _P, 3, "propagation steps (step 3)",
        low=0, search=Choice((1, 2, 3)))
    fan: bool = setting(
        _P, True, "fan(j) = the out-degree of j divides what j spreads; false: fan = 1 (step 3)",
        search=Choice((True, False)))
    lambda1: Scalar = setting(
        _P, 0.5, "score weight of the cosine cos(h_i, h_q) (step 6)",
        low=0.0, search=Range(0.0, 1.0))
    lambda2: Scalar = setting(
        _P, 0.3, "score weight of the activation a_i(T) (step 6)",
        low=0.0, search=Range(0.0, 1.0))
    lambda3: Scalar = setting(
        _P, 0.2, "score weight of PageRank, rescaled per conversation by "
                 "readings.pagerank_scale (step 6)",
        low=0.0, search=Range(0.0, 0.5))
    tau_gate: Scalar = setting(
        _P, 0.12, "reject the question when C_ret < tau_gate (step 7)",
        low=0.0, high=1.0, search=Range(0.0, 0.3))
    k: int = setting(
        _P, 30, "nodes returned (step 6)",
        low=1)
    bm25_trigger: bool = setting(
        _P, True, "the lexical BM25 trigger on (step 1)")

    # memory.readings: what SPEC §1.5 leaves open; each default the literal reading, or ours
    # where the paper is silent (study: experiments/readings.md)
    k_anchor: int = setting(
        _R, 10, "anchors per trigger, dense and BM25 (step 1); the paper is silent: ours",
        low=1, search=Choice((5, 10, 20)))
    fire_zero: bool = setting(
        _R, False, "false: nodes with potential 0 stay at 0 (ours, SPEC step 5); true: the "
                   "literal sigmoid fires them too",
        search=Choice((False, True)))
    energy: str = setting(
        _R, "cosine", "initial energy of the anchors: cosine (dense anchors their cosine, "
                      "BM25-only anchors their normalised BM25; ours, retrieval/anchors.py) | "
                      "max (the larger of both, every anchor) | constant (1, every anchor)",
        choices=ENERGY_READINGS, search=Choice(ENERGY_READINGS))
    c_ret_source: str = setting(
        _R, "activation", "C_ret: activation (the top node's activation; paper) | "
                          "max_activation (the largest anywhere) | potential (the top node's "
                          "pre-sigmoid potential) | score (the top S(v)) | similarity (the top "
                          "node's cosine: the no_activation ablation)",
        choices=C_RET_READINGS)
    inhibition: str = setting(
        _R, "every_step", "lateral inhibition after every step (paper) | last_step (once, "
                          "after the last)",
        choices=INHIBITION_SCHEDULES, search=Choice(INHIBITION_SCHEDULES))
    inhibition_scope: str = setting(
        _R, "all", "top-M inhibitors among all the graph's nodes | neighbourhood (the anchors "
                   "and their out-neighbours)",
        choices=INHIBITION_SCOPES, search=Choice(INHIBITION_SCOPES))
    pagerank_scale: str = setting(
        _R, "minmax", "PageRank into the score, per conversation: minmax (to [0, 1]) | max "
                      "(divided by the maximum) | none (raw)",
        choices=PAGERANK_SCALES, search=Choice(PAGERANK_SCALES))
    rank_episodic_only: bool = setting(
        _R, False, "false: the top-k holds nodes of either type (paper); true: turns only, "
                   "concepts still spread activation (ours)",
        search=Choice((False, True)))
    k_concepts: int = setting(
        _R, 0, "with rank_episodic_only: concepts listed after the k turns, for the answer "
               "model (recall counts turns only)",
        low=0)

    @classmethod
    def from_config(cls, params: Mapping[str, Any] | None,
                    readings: Mapping[str, Any] | None = None) -> SynapseParams:
        """The value object of the config nodes ``memory.params`` (the paper's
        hyperparameters) and ``memory.readings``; a key in the wrong node is an error naming
        the right one."""
        params, readings = dict(params or {}), dict(readings or {})
        for node, values, other in (("params", params, "readings"),
                                    ("readings", readings, "params")):
            for key in values:
                declared = SETTINGS.get(key)
                if declared is None or declared.node != node:
                    where = (f"it belongs in memory.{other}.{key}" if declared is not None
                             else f"known: {[n for n, s in SETTINGS.items() if s.node == node]}")
                    raise ConfigError(f"memory.{node}.{key}: not a setting of memory.{node}; "
                                      f"{where}")
        return cls(**params, **readings)

    def __post_init__(self) -> None:
        for declared in _CHECK_ORDER:
            if declared.name == "tau_gate" and self.c_ret_source == "potential":
                declared = replace(declared, high=None)  # CROSS_RULES[0]
            check(declared, getattr(self, declared.name))
        if self.k_concepts and not self.rank_episodic_only:  # CROSS_RULES[1]
            raise ConfigError("memory.readings.k_concepts lists concepts apart from the k turns "
                              "and needs memory.readings.rank_episodic_only=true")

    def repeat_columns(self, per_config: int) -> SynapseParams:
        """``[C]`` tensors -> ``[C * per_config]`` (each configuration's value repeated for its
        block of columns); scalars stay scalars."""
        values = {}
        for name in self.__dataclass_fields__:
            v = getattr(self, name)
            if isinstance(v, torch.Tensor) and v.dim() == 1:
                v = v.repeat_interleave(per_config)
            values[name] = v
        return SynapseParams(**values)

    def to(self, device: torch.device | str) -> SynapseParams:
        """The same parameters with every tensor on ``device`` (scalars stay scalars)."""
        return SynapseParams(**{name: v.to(device) if isinstance(v, torch.Tensor) else v
                                for name in self.__dataclass_fields__
                                for v in (getattr(self, name),)})

    def select(self, columns: torch.Tensor) -> SynapseParams:
        """The parameters of a subset of query columns (per-column ``[B]`` tensors are sliced)."""
        values = {}
        for name in self.__dataclass_fields__:
            v = getattr(self, name)
            if isinstance(v, torch.Tensor) and v.dim() == 1 and v.numel() > 1:
                v = v[columns.to(v.device)]
            values[name] = v
        return SynapseParams(**values)


def _declared() -> dict[str, Setting]:
    """Each field's :class:`Setting` (:func:`synapse_pt.common.declared.settings_of`), each of node
    params or readings (the search entries are checked by
    :func:`synapse_pt.retrieval.search_space.declare`)."""
    out = settings_of(SynapseParams)
    for name, s in out.items():
        if s.node not in (_P, _R) or s.optional or s.kind == "text":
            raise TypeError(f"SynapseParams.{name}: a setting of params or readings, never null")
    return out


#: every setting, by field name, in declared order (``memory.params``, then ``memory.readings``)
SETTINGS: dict[str, Setting] = _declared()
#: the paper's hyperparameters (SPEC §1.2; config node ``memory.params``)
PAPER_FIELDS = tuple(name for name, s in SETTINGS.items() if s.node == _P)
#: the readings SPEC §1.5 leaves open and our defaults where the paper is silent (config node
#: ``memory.readings``)
READING_FIELDS = tuple(name for name, s in SETTINGS.items() if s.node == _R)
#: the order of the checks: the choices first (tau_gate's bound depends on c_ret_source)
_CHECK_ORDER = sorted(SETTINGS.values(), key=lambda s: s.kind != "choice")
