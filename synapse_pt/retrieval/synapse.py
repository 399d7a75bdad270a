"""SYNAPSE retrieval for a batch of queries over a batch of conversation graphs (SPEC §1.2).

Everything here is ``[N, B]`` tensor work on the graph's device: triggers -> initial energy ->
spreading activation with lateral inhibition (``synapse_pt.nn``) -> triple score -> top-k -> gate.
Queries only ever see nodes of their own conversation (``node_graph == query_graph``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from synapse_pt.nn.functional import spreading_activation

from .anchors import initial_energy
from .dense import cosine_scores, own_graph_mask
from .scoring import gate, rank, retrieval_confidence, triple_score

Scalar = float | torch.Tensor


@dataclass
class SynapseParams:
    """Retrieval hyperparameters, named as in SPEC §1.2 (defaults: the paper's values).

    The continuous ones may be ``[B]`` tensors (one value per query column), which is how a batched
    sweep evaluates many configurations in one pass.
    """

    S: Scalar = 0.8
    delta: Scalar = 0.5
    beta: Scalar = 0.15
    M: int = 7
    gamma: Scalar = 5.0
    theta: Scalar = 0.5
    T: int = 3
    fan: bool = True
    fire_zero: bool = False
    lambda1: Scalar = 0.5
    lambda2: Scalar = 0.3
    lambda3: Scalar = 0.2
    tau_gate: Scalar = 0.12
    k: int = 30
    k_anchor: int = 10
    bm25_trigger: bool = True
    # "activation" (paper) or "similarity" (the no_activation ablation)
    c_ret_source: str = "activation"
    rank_episodic_only: bool = False  # True: semantic nodes spread activation but are not returned

    def __post_init__(self) -> None:
        if self.c_ret_source not in ("activation", "similarity"):
            raise ValueError(f"c_ret_source must be 'activation' or 'similarity', "
                             f"got {self.c_ret_source!r}")

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

    def select(self, columns: torch.Tensor) -> SynapseParams:
        """The parameters of a subset of query columns (per-column ``[B]`` tensors are sliced)."""
        values = {}
        for name in self.__dataclass_fields__:
            v = getattr(self, name)
            if isinstance(v, torch.Tensor) and v.dim() == 1 and v.numel() > 1:
                v = v[columns.to(v.device)]
            values[name] = v
        return SynapseParams(**values)


@dataclass
class RankedBatch:
    """Top-k per query: ``index``, ``score``, ``valid`` ``[B, k]``; ``c_ret``, ``gated`` ``[B]``."""

    index: torch.Tensor
    score: torch.Tensor
    valid: torch.Tensor
    c_ret: torch.Tensor
    gated: torch.Tensor


def synapse_retrieve(*, x: torch.Tensor, node_graph: torch.Tensor, edge_index: torch.Tensor,
                     edge_weight: torch.Tensor, pagerank_unit: torch.Tensor,
                     query_emb: torch.Tensor, query_graph: torch.Tensor, bm25: torch.Tensor,
                     params: SynapseParams, node_active: torch.Tensor | None = None,
                     episodic: torch.Tensor | None = None) -> RankedBatch:
    """Retrieve for ``B`` queries at once.

    Args:
        x: ``[N, d]`` unit node embeddings; node_graph: ``[N]`` conversation id per node.
        edge_index: ``[2, E]`` (source, target); edge_weight: ``[E]``.
        pagerank_unit: ``[N]`` PageRank rescaled to [0, 1] per conversation.
        query_emb: ``[B, d]`` unit query embeddings; query_graph: ``[B]`` conversation id per query.
        bm25: ``[N, B]`` BM25 scores of each node's text for each query (0 outside its graph).
        params: hyperparameters.
        node_active: optional ``[N]`` bool; inactive (collected) nodes are never retrieved.
        episodic: optional ``[N]`` bool marking episodic nodes; with
            ``params.rank_episodic_only`` only they are ranked and returned.
    """
    p = params
    mask = own_graph_mask(node_graph, query_graph)
    if node_active is not None:
        mask &= node_active[:, None]
    cos = cosine_scores(x, query_emb)
    a0, _ = initial_energy(cos, bm25, mask, p.k_anchor, use_bm25=p.bm25_trigger)
    activation = spreading_activation(
        edge_index, edge_weight, a0, num_nodes=x.shape[0], S=p.S, delta=p.delta, beta=p.beta,
        M=p.M, gamma=p.gamma, theta=p.theta, T=p.T, fan=p.fan, fire_zero=p.fire_zero,
        node_mask=mask,
    )
    score = triple_score(cos, activation, pagerank_unit, p.lambda1, p.lambda2, p.lambda3)
    rank_mask = mask
    if p.rank_episodic_only:
        if episodic is None:
            raise ValueError("rank_episodic_only needs the episodic node mask")
        rank_mask = mask & episodic[:, None]
    top_score, top_index = rank(score, rank_mask, p.k)
    valid = torch.isfinite(top_score)
    signal = activation if p.c_ret_source == "activation" else cos
    c_ret = retrieval_confidence(signal, top_index[0])
    c_ret = torch.where(valid[0], c_ret, torch.zeros_like(c_ret))  # an empty memory: no confidence
    return RankedBatch(top_index.T, top_score.T, valid.T, c_ret, gate(c_ret, p.tau_gate))
