r"""Personalised PageRank for many seed vectors at once, each on its own candidate subgraph
(GAAMA's retrieval, SPEC §2), by batched power iteration in torch.

For query column :math:`b` with seed distribution :math:`s_b` (non-negative, summing to 1) and
candidate set :math:`C_b`, the scores on the subgraph induced by :math:`C_b` solve

.. math::
    p_b = (1 - \alpha)\, s_b + \alpha \Big( P_b^\top p_b + s_b \sum_{j \in D_b} p_{b,j} \Big),
    \qquad (P_b)_{ji} = \frac{w_{ji}\, h_j}{\sum_{k \in C_b} w_{jk}}\ \ (j, i \in C_b)

with continuation :math:`\alpha` (GAAMA: 0.6, restart 0.4), :math:`D_b` the candidates without an
out-edge inside :math:`C_b` (their mass returns along :math:`s_b`, networkx's default), and
:math:`h_j` the *effective* hub factor (1 unless dampening takes effect, below). This is networkx's
``pagerank(G[C_b], alpha, personalization=s_b)`` for every column, without an ``[E, B]`` message
tensor: with :math:`c_b` the candidate indicator,

.. math::
    \deg_b = A\, c_b, \qquad
    P_b^\top p_b = c_b \odot A^\top \big( h \odot c_b \odot p_b / \deg_b \big).

Hub dampening (GAAMA, nodes of total degree above ``hub_degree`` = 50): the code multiplies a
hub's outgoing weights by :math:`50 / \deg` and then re-normalises per source, which cancels it
(``"code"``: the same scores as ``"off"``); ``"effective"`` applies :math:`h_j = 50 / \deg_j` after
the normalisation, so a hub passes on only that share of its mass (the rest is lost, as if it
restarted; scores are then compared after dividing by their maximum).
"""

from __future__ import annotations

import torch
from torch import Tensor

HUB_DAMPENING = ("code", "effective", "off")


def _adjacency(edge_index: Tensor, edge_weight: Tensor, num_nodes: int) -> Tensor:
    """Sparse ``[N, N]`` with ``A[j, i] = w_ji`` (source row, target column; repeats add up)."""
    return torch.sparse_coo_tensor(edge_index, edge_weight, (num_nodes, num_nodes),
                                   check_invariants=False).coalesce()


def neighbourhood(edge_index: Tensor, num_nodes: int, seeds: Tensor, depth: int) -> Tensor:
    """``[N, B]`` bool: nodes within ``depth`` hops of a column's seeds (``seeds`` ``[N, B]``
    bool), following edges in their stored direction."""
    adj = _adjacency(edge_index, torch.ones(edge_index.shape[1], device=seeds.device,
                                            dtype=torch.float32), num_nodes)
    reach = seeds.clone()
    for _ in range(depth):
        reach = reach | (torch.sparse.mm(adj.t(), reach.float()) > 0)
    return reach


def personalised_pagerank(edge_index: Tensor, edge_weight: Tensor, num_nodes: int,
                          seeds: Tensor, candidates: Tensor, *, alpha: float = 0.6,
                          max_iter: int = 100, tol: float = 1e-6, hub_dampening: str = "code",
                          hub_degree: int = 50) -> Tensor:
    """``[N, B]`` personalised PageRank of each column on its candidate subgraph (0 elsewhere).

    Args:
        edge_index: ``[2, E]`` (source, target); store both directions for an undirected graph.
        edge_weight: ``[E]`` non-negative weights.
        num_nodes: :math:`N`.
        seeds: ``[N, B]`` non-negative seed weights (normalised per column here).
        candidates: ``[N, B]`` bool, the nodes each column's walk may visit (seeds included).
        alpha: continuation probability (GAAMA 0.6). max_iter, tol: power iteration cap and
            per-column L1 tolerance (GAAMA 100, 1e-6).
        hub_dampening: ``"code"`` | ``"effective"`` | ``"off"`` (module docstring).
        hub_degree: the degree above which a node is a hub.
    """
    if hub_dampening not in HUB_DAMPENING:
        raise ValueError(f"hub_dampening must be one of {HUB_DAMPENING}, got {hub_dampening!r}")
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"alpha must lie in [0, 1), got {alpha}")
    dtype = torch.float64
    cand = candidates.to(dtype)
    s = seeds.to(dtype) * cand
    s = s / s.sum(dim=0, keepdim=True).clamp_min(torch.finfo(dtype).tiny)
    adj = _adjacency(edge_index, edge_weight.to(dtype), num_nodes)
    deg = torch.sparse.mm(adj, cand) * cand  # [N, B] out-weight inside the candidate set
    hub = torch.ones(num_nodes, 1, dtype=dtype, device=s.device)
    if hub_dampening == "effective":
        degree = torch.bincount(edge_index[0], minlength=num_nodes).to(dtype)[:, None]
        hub = torch.where(degree > hub_degree, hub_degree / degree.clamp_min(1), hub)
    dangling = cand * (deg <= 0)
    p = s.clone()
    adj_t = adj.t().coalesce()
    for _ in range(max_iter):
        out = torch.where(deg > 0, hub * p / deg.clamp_min(torch.finfo(dtype).tiny),
                          torch.zeros_like(p))
        spread = cand * torch.sparse.mm(adj_t, out)
        new = (1.0 - alpha) * s + alpha * (spread + s * (dangling * p).sum(dim=0, keepdim=True))
        err = (new - p).abs().sum(dim=0)
        p = new
        if bool((err < tol).all()):
            break
    return p
