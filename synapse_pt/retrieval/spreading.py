"""SYNAPSE retrieval for a batch of queries over a batch of conversation graphs (SPEC §1.2).

Everything here is ``[N, B]`` tensor work on the graph's device: triggers -> initial energy ->
spreading activation with lateral inhibition (the layer :class:`~synapse_pt.nn.ActivationDynamics`,
over the fan-normalised adjacency cached with the graph) -> triple score -> top-k -> gate.
Queries only ever see nodes of their own conversation (``node_graph == query_graph``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import yaml

from synapse_pt.common.errors import ConfigError
from synapse_pt.common.resources import config_file
from synapse_pt.graph.pagerank import PAGERANK_SCALES
from synapse_pt.nn import (
    INHIBITION_SCHEDULES,
    ActivationDynamics,
    Hyperparams,
    activation_adjacency,
)
from synapse_pt.retrieval.anchors import initial_energy
from synapse_pt.retrieval.dense import cosine_scores, own_graph_mask
from synapse_pt.retrieval.scoring import gate, rank, retrieval_confidence, triple_score

Scalar = float | torch.Tensor


#: the paper's hyperparameters (SPEC §1.2; config node ``memory.params``)
PAPER_FIELDS = ("S", "delta", "beta", "M", "gamma", "theta", "T", "fan", "lambda1", "lambda2",
                "lambda3", "tau_gate", "k", "bm25_trigger")
#: the readings SPEC §1.5 leaves open and our defaults where the paper is silent (config node
#: ``memory.readings``)
READING_FIELDS = ("k_anchor", "fire_zero", "energy", "c_ret_source", "inhibition",
                  "inhibition_scope", "pagerank_scale", "rank_episodic_only", "k_concepts")

ENERGY_READINGS = ("cosine", "max", "constant")
C_RET_READINGS = ("activation", "max_activation", "potential", "score", "similarity")
INHIBITION_SCOPES = ("all", "neighbourhood")

#: the config that runs SYNAPSE; its nodes ``params`` and ``readings`` are the one place each
#: default of :class:`SynapseParams` is written (the dataclass reads them, the layers take none)
CONFIG_FILE = config_file("memory/synapse.yaml")
_CONFIG = yaml.safe_load(CONFIG_FILE.read_text())
DEFAULTS: dict[str, Any] = {**_CONFIG["params"], **_CONFIG["readings"]}
#: how the activation layer stores its activations unless told (the same config's ``engine``)
STORAGE: dict[str, Any] = {k: _CONFIG["engine"][k] for k in ("frontier", "frontier_density")}
if (tuple(_CONFIG["params"]), tuple(_CONFIG["readings"])) != (PAPER_FIELDS, READING_FIELDS):
    raise ConfigError(f"{CONFIG_FILE}: memory.params and memory.readings must hold "
                      f"{list(PAPER_FIELDS)} and {list(READING_FIELDS)}, in this order")


@dataclass
class SynapseParams:
    """Retrieval hyperparameters, named as in SPEC §1.2, and the readings of SPEC §1.5: one value
    object for the retrieval maths, composed from the config's two nodes ``memory.params``
    (:data:`PAPER_FIELDS`) and ``memory.readings`` (:data:`READING_FIELDS`) by
    :meth:`from_config`. Its defaults are the config's values (:data:`CONFIG_FILE`: the paper's,
    and the literal readings), read from there.

    The continuous ones may be ``[B]`` tensors (one value per query column), which is how a batched
    sweep evaluates many configurations in one pass. The string-valued fields are the readings
    SPEC §1.5 leaves open; each default is the literal reading:

    * ``energy``: initial energy of anchors: ``"cosine"`` (dense anchors their cosine, BM25-only
      anchors their normalised BM25 score), ``"max"`` (every anchor max(cosine, normalised BM25)),
      ``"constant"`` (1 on every anchor);
    * ``c_ret_source``: ``C_ret`` is the activation of the top-ranked node (``"activation"``), the
      largest activation anywhere (``"max_activation"``), the top node's pre-sigmoid potential
      (``"potential"``), the top score S(v) (``"score"``), or the top node's cosine
      (``"similarity"``, the ``no_activation`` ablation);
    * ``inhibition``: after every step (``"every_step"``) or once after the last (``"last_step"``);
    * ``inhibition_scope``: top-M inhibitors among all of the graph's nodes (``"all"``) or only
      among the anchors and their out-neighbours (``"neighbourhood"``);
    * ``pagerank_scale``: ``"minmax"`` to [0, 1], ``"max"`` (divide by the maximum), ``"none"``
      (raw scores), per conversation;
    * ``rank_episodic_only`` / ``k_concepts``: the top-k may hold both node types (the paper) or
      turns only, concepts still spreading activation; with turns only, ``k_concepts`` concepts
      are listed after the k turns (for the answer model; recall counts turns only).
    """

    S: Scalar = DEFAULTS["S"]
    delta: Scalar = DEFAULTS["delta"]
    beta: Scalar = DEFAULTS["beta"]
    M: int = DEFAULTS["M"]
    gamma: Scalar = DEFAULTS["gamma"]
    theta: Scalar = DEFAULTS["theta"]
    T: int = DEFAULTS["T"]
    fan: bool = DEFAULTS["fan"]
    fire_zero: bool = DEFAULTS["fire_zero"]
    lambda1: Scalar = DEFAULTS["lambda1"]
    lambda2: Scalar = DEFAULTS["lambda2"]
    lambda3: Scalar = DEFAULTS["lambda3"]
    tau_gate: Scalar = DEFAULTS["tau_gate"]
    k: int = DEFAULTS["k"]
    k_anchor: int = DEFAULTS["k_anchor"]
    bm25_trigger: bool = DEFAULTS["bm25_trigger"]
    energy: str = DEFAULTS["energy"]
    c_ret_source: str = DEFAULTS["c_ret_source"]
    inhibition: str = DEFAULTS["inhibition"]
    inhibition_scope: str = DEFAULTS["inhibition_scope"]
    pagerank_scale: str = DEFAULTS["pagerank_scale"]
    rank_episodic_only: bool = DEFAULTS["rank_episodic_only"]
    k_concepts: int = DEFAULTS["k_concepts"]

    @classmethod
    def from_config(cls, params: Mapping[str, Any] | None,
                    readings: Mapping[str, Any] | None = None) -> SynapseParams:
        """The value object of the config nodes ``memory.params`` (the paper's
        hyperparameters) and ``memory.readings``; a key in the wrong node is an error naming
        the right one."""
        params, readings = dict(params or {}), dict(readings or {})
        for node, values, allowed, other in (("params", params, PAPER_FIELDS, "readings"),
                                             ("readings", readings, READING_FIELDS, "params")):
            for key in values:
                if key not in allowed:
                    where = (f"it belongs in memory.{other}.{key}"
                             if key in PAPER_FIELDS + READING_FIELDS
                             else f"known: {list(allowed)}")
                    raise ConfigError(f"memory.{node}.{key}: not a setting of memory.{node}; "
                                      f"{where}")
        return cls(**params, **readings)

    def __post_init__(self) -> None:
        choices = {"energy": ENERGY_READINGS, "c_ret_source": C_RET_READINGS,
                   "inhibition": INHIBITION_SCHEDULES, "inhibition_scope": INHIBITION_SCOPES,
                   "pagerank_scale": PAGERANK_SCALES}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{_node(name)}.{name} must be one of {list(allowed)}, "
                                  f"got {getattr(self, name)!r}")
        for name, lo in (("k", 1), ("k_anchor", 1), ("M", 0), ("T", 0), ("k_concepts", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise ConfigError(f"{_node(name)}.{name} must be an integer >= {lo}, "
                                  f"got {value!r}")
        ranges = {"S": (0.0, None), "delta": (0.0, 1.0), "beta": (0.0, None),
                  "gamma": (0.0, None), "theta": (0.0, 1.0), "lambda1": (0.0, None),
                  "lambda2": (0.0, None), "lambda3": (0.0, None),
                  # C_ret readings in [0, 1] except the pre-sigmoid potential
                  "tau_gate": (0.0, None if self.c_ret_source == "potential" else 1.0)}
        for name, (lo, hi) in ranges.items():
            value = getattr(self, name)
            if isinstance(value, str) or value is None:
                raise ConfigError(f"{_node(name)}.{name} must be a number, got {value!r}")
            t = torch.as_tensor(value, dtype=torch.float64)
            if t.numel() == 0 or not torch.isfinite(t).all():
                raise ConfigError(f"{_node(name)}.{name} must be finite, got {value!r}")
            if float(t.min()) < lo or (hi is not None and float(t.max()) > hi):
                allowed = f"[{lo:g}, {hi:g}]" if hi is not None else f">= {lo:g}"
                shown = value if t.numel() == 1 else f"values in [{float(t.min()):g}, " \
                                                     f"{float(t.max()):g}]"
                raise ConfigError(f"{_node(name)}.{name} must be {allowed}, got {shown}")
        if self.k_concepts and not self.rank_episodic_only:
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


def _node(name: str) -> str:
    """The config node that holds a field of :class:`SynapseParams`."""
    return "memory.readings" if name in READING_FIELDS else "memory.params"


def activation_layer(params: SynapseParams, frontier: str, frontier_density: float
                     ) -> ActivationDynamics:
    """The activation layer of ``params`` (its structure: M, T, fan, firing rule, inhibition
    schedule; the continuous hyperparameters go to each call, scalar or one per column), storing
    its activations as the engine settings say (``memory.engine.frontier``,
    ``frontier_density``: :mod:`synapse_pt.nn.frontier`; same result either way)."""
    return ActivationDynamics(M=params.M, T=params.T, fan=params.fan, fire_zero=params.fire_zero,
                              inhibition=params.inhibition, frontier=frontier,
                              frontier_density=frontier_density)


@dataclass
class RankedBatch:
    """Top-k per query: ``index``, ``score``, ``valid`` ``[B, k]``; ``c_ret``, ``gated`` ``[B]``."""

    index: torch.Tensor
    score: torch.Tensor
    valid: torch.Tensor
    c_ret: torch.Tensor
    gated: torch.Tensor


@dataclass
class SynapseSignals:
    """Every ``[N, B]`` signal of one retrieval pass (SPEC §1.2 steps 1-6), before ranking:
    the own-graph ``mask``, the similarity ``cos``, the initial energy ``a0`` and the ``anchors``
    it sits on, the ``activation`` :math:`a(T)`, the last ``potential`` (only with
    ``c_ret_source="potential"``), the triple ``score`` and the ``rank_mask`` of rankable nodes."""

    mask: torch.Tensor
    cos: torch.Tensor
    a0: torch.Tensor
    anchors: torch.Tensor
    activation: torch.Tensor
    potential: torch.Tensor | None
    score: torch.Tensor
    rank_mask: torch.Tensor
    #: every node belongs to every query (one conversation's own block, nothing collected):
    #: ``mask`` is then a broadcast view and the hot path runs unmasked
    unmasked: bool = False


@dataclass
class Triggers:
    """The start of a retrieval pass for ``B`` queries (SPEC §1.2 steps 1-2), each ``[N, B]``:
    the similarity ``cos``, the initial energy ``a0`` and the ``anchors`` it sits on. They
    depend on the queries and on ``k_anchor``, ``bm25_trigger`` and ``energy`` only, not on the
    swept hyperparameters, so a sweep computes them once per question set
    (:meth:`~synapse_pt.memory.synapse.SynapseMemory.sweep` keeps them per conversation)."""

    cos: torch.Tensor
    a0: torch.Tensor
    anchors: torch.Tensor


@dataclass
class SynapseInputs:
    """What one retrieval pass reads (SPEC §1.2): a graph (one conversation's block, or several
    conversations as one disjoint graph) and ``B`` queries over it.

    Graph:
        x: ``[N, d]`` unit node embeddings; node_graph: ``[N]`` conversation id per node.
        edge_index: ``[2, E]`` (source, target); edge_weight: ``[E]``.
        pagerank_unit: ``[N]`` PageRank as it enters the score (rescaled per conversation by
            ``params.pagerank_scale``, see :func:`~synapse_pt.graph.pagerank.rescale_pagerank`).
        node_active: optional ``[N]`` bool; inactive (collected) nodes are never retrieved.
        episodic: optional ``[N]`` bool marking episodic nodes; with
            ``params.rank_episodic_only`` only they are ranked and returned (then
            ``params.k_concepts`` semantic nodes follow them).

    Queries:
        query_emb: ``[B, d]`` unit query embeddings; query_graph: ``[B]`` conversation id per
            query.
        bm25: ``[N, B]`` BM25 scores of each node's text for each query (0 outside its graph);
            ``None`` when precomputed :class:`Triggers` are given.
        similarity: optional ``[N, B]`` query-node similarity replacing the cosine of ``x`` and
            ``query_emb`` wherever the cosine enters (dense anchors, their energy, the triple
            score, the ``similarity`` reading of C_ret): e.g. a fused retriever's score of the
            turns (:class:`~synapse_pt.memory.synapse.SynapseMemory`'s ``fused_trigger``).
    """

    x: torch.Tensor
    node_graph: torch.Tensor
    edge_index: torch.Tensor
    edge_weight: torch.Tensor
    pagerank_unit: torch.Tensor
    query_emb: torch.Tensor
    query_graph: torch.Tensor
    bm25: torch.Tensor | None = None
    node_active: torch.Tensor | None = None
    episodic: torch.Tensor | None = None
    similarity: torch.Tensor | None = None


def _query_mask(inputs: SynapseInputs) -> tuple[torch.Tensor, bool]:
    """``[N, B]`` own-graph mask (active nodes only) and whether it holds every cell."""
    mask = own_graph_mask(inputs.node_graph, inputs.query_graph)
    if inputs.node_active is not None:
        mask &= inputs.node_active[:, None]
    # In one conversation's own block (how the memory calls this) every node belongs to every
    # query: then no mask is applied anywhere (no masked copies, no fills; one host sync to know)
    return mask, bool(mask.all())


def _triggers(inputs: SynapseInputs, inner: torch.Tensor | None, p: SynapseParams) -> Triggers:
    if inputs.bm25 is None:
        raise ValueError("SYNAPSE's triggers need bm25 [N, B] unless triggers are given")
    x = inputs.x
    cos = (cosine_scores(x, inputs.query_emb) if inputs.similarity is None
           else inputs.similarity.to(x.dtype))
    a0, anchors = initial_energy(cos, inputs.bm25, inner, p.k_anchor, use_bm25=p.bm25_trigger,
                                 energy=p.energy)
    return Triggers(cos, a0, anchors)


def query_triggers(inputs: SynapseInputs, params: SynapseParams) -> Triggers:
    """The :class:`Triggers` that :func:`synapse_signals` computes for these queries, for a
    caller that reuses them across calls."""
    mask, unmasked = _query_mask(inputs)
    return _triggers(inputs, None if unmasked else mask, params)


def synapse_signals(inputs: SynapseInputs, params: SynapseParams, *,
                    adj_t: torch.Tensor | None = None,
                    dynamics: ActivationDynamics | None = None,
                    frontier: str = STORAGE["frontier"],
                    frontier_density: float = STORAGE["frontier_density"], repeat: int = 1,
                    triggers: Triggers | None = None) -> SynapseSignals:
    """Triggers, initial energy, the activation layer and the triple score for ``B`` queries at
    once (what :func:`synapse_retrieve` ranks); what a figure or an analysis of one question's
    activation reads. The arguments are :func:`synapse_retrieve`'s."""
    p = params
    mask, unmasked = _query_mask(inputs)
    inner = None if unmasked else mask
    if triggers is None:
        triggers = _triggers(inputs, inner, p)
    cos, a0, anchors = triggers.cos, triggers.a0, triggers.anchors
    if repeat > 1:
        cos, a0, anchors = (t.repeat(1, repeat) for t in (cos, a0, anchors))
        mask = (mask[:, :1].expand(mask.size(0), mask.size(1) * repeat) if unmasked
                else mask.repeat(1, repeat))
        inner = None if unmasked else mask
    if adj_t is None:
        adj_t = activation_adjacency(inputs.edge_index, inputs.edge_weight, inputs.x.shape[0],
                                     fan=p.fan, dtype=a0.dtype)
    inhibitors = None
    if p.inhibition_scope == "neighbourhood":  # anchors and the nodes they send energy to
        reached = torch.sparse.mm(adj_t, anchors.to(a0.dtype)) > 0 if adj_t._nnz() else anchors
        inhibitors = anchors | reached
    layer = activation_layer(p, frontier, frontier_density) if dynamics is None else dynamics
    out = layer(a0, adj_t, normalized=True, node_mask=inner, inhibitor_mask=inhibitors,
                hyper=Hyperparams(p.S, p.delta, p.beta, p.gamma, p.theta),
                return_potential=p.c_ret_source == "potential")
    activation, potential = out if p.c_ret_source == "potential" else (out, None)
    score = triple_score(cos, activation, inputs.pagerank_unit, p.lambda1, p.lambda2, p.lambda3)
    rank_mask = mask
    if p.rank_episodic_only:
        if inputs.episodic is None:
            raise ValueError("rank_episodic_only needs the episodic node mask")
        rank_mask = mask & inputs.episodic[:, None]
    return SynapseSignals(mask, cos, a0, anchors, activation, potential, score, rank_mask,
                          unmasked=unmasked)


def synapse_retrieve(inputs: SynapseInputs, params: SynapseParams, *,
                     adj_t: torch.Tensor | None = None,
                     dynamics: ActivationDynamics | None = None,
                     frontier: str = STORAGE["frontier"],
                     frontier_density: float = STORAGE["frontier_density"], repeat: int = 1,
                     triggers: Triggers | None = None) -> RankedBatch:
    """Retrieve for the ``B`` queries of ``inputs`` at once (SPEC §1.2 steps 1-7).

    Args:
        inputs: the graph and the queries (:class:`SynapseInputs`).
        params: hyperparameters and readings (:class:`SynapseParams`).
        adj_t: the fan-normalised sparse adjacency of ``(edge_index, edge_weight)``
            (:func:`~synapse_pt.nn.sparse.activation_adjacency` with ``fan=params.fan``, in
            the energies' dtype); given, it is used as is (the memory caches it per graph),
            else it is built here.
        dynamics: the activation layer; default :func:`activation_layer` of ``params``,
            ``frontier`` and ``frontier_density`` (how it stores its activations, the engine
            settings ``memory.engine.frontier`` and ``frontier_density``). A subclass changes
            retrieval and sweeps alike.
        repeat: ``C`` configurations of the same queries (a sweep): ``inputs`` holds ``B / C``
            queries and ``params`` ``B`` columns, configuration-major. What does not depend on
            the continuous hyperparameters (the own-graph mask, the cosine, the anchors and
            their energy: they depend on ``k_anchor``, ``bm25_trigger`` and ``energy``, shared
            by a sweep) is computed once for the ``B / C`` queries and repeated.
        triggers: the :class:`Triggers` of :func:`query_triggers` for the same ``B / C``
            queries and settings, computed earlier (then ``inputs.bm25`` and
            ``inputs.similarity`` are not read and may be ``None``).
    """
    p = params
    sig = synapse_signals(inputs, p, adj_t=adj_t, dynamics=dynamics, frontier=frontier,
                          frontier_density=frontier_density, repeat=repeat, triggers=triggers)
    mask, cos, score, rank_mask = sig.mask, sig.cos, sig.score, sig.rank_mask
    activation, potential = sig.activation, sig.potential
    top_score, top_index = rank(score, None if sig.unmasked and rank_mask is mask else rank_mask,
                                p.k)
    valid = torch.isfinite(top_score)
    c_ret = retrieval_confidence(
        p.c_ret_source, top_index[0], top_score=top_score[0], activation=activation,
        potential=potential, cos=cos, mask=mask)
    c_ret = torch.where(valid[0], c_ret, torch.zeros_like(c_ret))  # an empty memory: no confidence
    if p.k_concepts:
        c_score, c_index = rank(score, mask & ~inputs.episodic[:, None], p.k_concepts)
        top_score, top_index = torch.cat([top_score, c_score]), torch.cat([top_index, c_index])
        valid = torch.isfinite(top_score)
    return RankedBatch(top_index.T, top_score.T, valid.T, c_ret, gate(c_ret, p.tau_gate))
