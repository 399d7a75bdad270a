"""Graph maintenance after each consolidation window (SPEC §1.1, the paper's implementation table).

Functions over a :class:`~synapse_pt.graph.memory_graph.MemoryGraph`, in the order
:class:`~synapse_pt.graph.consolidation.GraphBuilder` calls them: :func:`mark_activity`,
:func:`cap_in_edges`, :func:`collect_dormant`, :func:`refresh_pagerank`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .memory_graph import MemoryGraph
from .pagerank import pagerank


def mark_activity(graph: MemoryGraph, window: int, first_new: int,
                  touched: Sequence[tuple[Tensor, Tensor, Tensor]], eps: float) -> Tensor:
    r"""Record which nodes were *activated* in ``window``; returns that mask ``[N]``.

    The activation of node :math:`i` in a window is 1 if the node was created in it (ids
    ``>= first_new``), else the largest weight of the edges touching :math:`i` (as source or
    target) that were added or reinforced in the window, before the in-edge cap. A node counts as
    activated when that value is :math:`\ge \epsilon`; untouched nodes never do. Activated nodes get
    ``last_active_window = window``.

    Args:
        touched: ``(source, target, weight)`` triples of the edges added or reinforced.
        eps: :math:`\epsilon` (``dormancy_eps``).
    """
    n = graph.num_nodes
    act = torch.full((n,), -1.0, device=graph.device)
    for src, dst, weight in touched:
        w = weight.to(act.dtype)
        act.scatter_reduce_(0, src, w, reduce="amax")
        act.scatter_reduce_(0, dst, w, reduce="amax")
    act[first_new:] = 1.0
    activated = (act >= 0) & (act >= eps) & graph.active
    graph.last_active_window[activated] = window
    return activated


def cap_in_edges(graph: MemoryGraph, max_in_edges: int) -> int:
    """Keep at most ``max_in_edges`` incoming edges per node: the highest weights, ties to the older
    edge (smaller slot). Returns the number of edges dropped."""
    ei, weight = graph.edge_index, graph.edge_weight
    deg = torch.bincount(ei[1], minlength=graph.num_nodes)
    if graph.num_edges == 0 or int(deg.max()) <= max_in_edges:
        return 0
    # Stable sorts: by weight (desc), then by target; equal weights keep slot (= age) order.
    order = torch.sort(weight, descending=True, stable=True).indices
    order = order[torch.sort(ei[1, order], stable=True).indices]
    start = torch.cumsum(deg, 0) - deg
    rank = torch.arange(graph.num_edges, device=graph.device) - start[ei[1, order]]
    keep = torch.zeros(graph.num_edges, dtype=torch.bool, device=graph.device)
    keep[order] = rank < max_in_edges
    return graph.keep_edges(keep)


def dormant_mask(graph: MemoryGraph, window: int, dormancy_windows: int) -> Tensor:
    """Active nodes not activated for ``dormancy_windows`` consecutive windows up to ``window``:
    ``window - last_active_window >= dormancy_windows``."""
    return graph.active & (window - graph.last_active_window >= dormancy_windows)


def collect_dormant(graph: MemoryGraph, window: int, max_nodes: int,
                    dormancy_windows: int) -> Tensor:
    """While more than ``max_nodes`` nodes are active, collect dormant nodes, lowest cached PageRank
    first (ties: smaller id): mark them inactive and drop their edges; ids stay stable. Returns the
    collected ids (possibly fewer than the excess: the cap is soft, only dormant nodes go)."""
    excess = int(graph.active.sum()) - max_nodes
    if excess <= 0:
        return torch.zeros(0, dtype=torch.long, device=graph.device)
    cand = dormant_mask(graph, window, dormancy_windows).nonzero().view(-1)
    order = torch.sort(graph.pagerank[cand], stable=True).indices
    victims = cand[order[:excess]]
    graph.deactivate(victims)
    return victims


def refresh_pagerank(graph: MemoryGraph, damping: float = 0.85) -> Tensor:
    """Recompute the weighted PageRank over the active nodes and cache it in ``graph.pagerank``;
    collected nodes score 0. Returns the scores ``[N]``."""
    n = graph.num_nodes
    active = graph.active
    if n == 0 or not bool(active.any()):
        graph.set_pagerank(torch.zeros(n, device=graph.device))
        return graph.pagerank
    if bool(active.all()):
        scores = pagerank(graph.edge_index, graph.edge_weight, n, damping=damping)
    else:
        ids = active.nonzero().view(-1)
        relabel = torch.full((n,), -1, dtype=torch.long, device=graph.device)
        relabel[ids] = torch.arange(ids.numel(), device=graph.device)
        sub = pagerank(relabel[graph.edge_index], graph.edge_weight, ids.numel(), damping=damping)
        scores = torch.zeros(n, dtype=sub.dtype, device=graph.device)
        scores[ids] = sub
    graph.set_pagerank(scores)
    return scores
