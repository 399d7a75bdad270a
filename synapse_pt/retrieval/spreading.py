"""SYNAPSE retrieval for a batch of queries over a batch of conversation graphs (SPEC §1.2).

Everything here is ``[N, B]`` tensor work on the graph's device: triggers -> initial energy ->
spreading activation with lateral inhibition (the layer :class:`~synapse_pt.nn.ActivationDynamics`,
over the fan-normalised adjacency cached with the graph) -> triple score -> top-k -> gate.
Queries only ever see nodes of their own conversation (``node_graph == query_graph``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from synapse_pt.nn import ActivationDynamics, Hyperparams, activation_adjacency
from synapse_pt.retrieval.anchors import initial_energy
from synapse_pt.retrieval.dense import cosine_scores, own_graph_mask
from synapse_pt.retrieval.scoring import gate, rank, retrieval_confidence, triple_score
from synapse_pt.retrieval.settings import STORAGE, SynapseParams

__all__ = ["RankedBatch", "SynapseInputs", "SynapseSignals", "Triggers", "activation_layer",
           "query_triggers", "synapse_retrieve", "synapse_signals"]

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
