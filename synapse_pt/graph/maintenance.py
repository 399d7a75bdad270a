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
    r"""Record which nodes were *activated* in ``window``; returns their ids (ascending).

    The activation of node :math:`i` in a window is 1 if the node was created in it (ids
    ``>= first_new``), else the largest weight of the edges touching :math:`i` (as source or
    target) that were added or reinforced in the window, before the in-edge cap. A node counts as
    activated when that value is :math:`\ge \epsilon`; untouched nodes never do. Activated nodes
    get ``last_active_window = window``. The largest weight is :math:`\ge \epsilon` exactly when
    one of the weights is, so only the touched nodes are visited (the cost follows the window's
    edges, not the graph).

    Args:
        touched: ``(source, target, weight)`` triples of the edges added or reinforced.
        eps: :math:`\epsilon` (``dormancy_eps``).
    """
    dev = graph.device
    parts = [torch.arange(first_new, graph.num_nodes, device=dev)]
    for src, dst, weight in touched:
        strong = weight >= eps
        parts += [src[strong], dst[strong]]
    nodes = torch.unique(torch.cat(parts))
    nodes = nodes[graph.active[nodes]]
    graph.last_active_window[nodes] = window
    return nodes


def in_edge_keep_mask(edge_index: Tensor, edge_weight: Tensor, num_nodes: int,
                      max_in_edges: int) -> Tensor:
    """``[E]`` bool: the edges kept when every node keeps at most ``max_in_edges`` incoming edges,
    the highest weights, ties to the earlier edge (smaller position = older slot).

    Only the edges into nodes over the cap are sorted (each window that is the few nodes that just
    gained edges), so the cost follows those, not the whole graph.
    """
    keep = torch.ones(edge_index.size(1), dtype=torch.bool, device=edge_index.device)
    if edge_index.size(1) == 0:
        return keep
    target = edge_index[1]
    deg = torch.bincount(target, minlength=num_nodes)
    over = (deg > max_in_edges)[target].nonzero().view(-1)  # edges into over-cap nodes
    if over.numel() == 0:
        return keep
    # Stable sorts: by weight (desc), then by target; equal weights keep position (= age) order.
    order = over[torch.sort(edge_weight[over], descending=True, stable=True).indices]
    order = order[torch.sort(target[order], stable=True).indices]
    t = target[order]
    first = torch.ones_like(t, dtype=torch.bool)
    first[1:] = t[1:] != t[:-1]
    group_start = torch.cummax(torch.where(first, torch.arange(t.numel(), device=t.device), 0),
                               0).values
    rank = torch.arange(t.numel(), device=t.device) - group_start
    keep[order] = rank < max_in_edges
    return keep


def cap_in_edges(graph: MemoryGraph, max_in_edges: int) -> int:
    """Keep at most ``max_in_edges`` incoming edges per node: the highest weights, ties to the older
    edge (smaller slot), see :func:`in_edge_keep_mask`. Returns the number of edges dropped."""
    if graph.num_edges == 0:
        return 0
    keep = in_edge_keep_mask(graph.edge_index, graph.edge_weight, graph.num_nodes, max_in_edges)
    if bool(keep.all()):
        return 0
    return graph.keep_edges(keep)


def dormant_mask(graph: MemoryGraph, window: int, dormancy_windows: int) -> Tensor:
    """Active nodes not activated for ``dormancy_windows`` consecutive windows up to ``window``:
    ``window - last_active_window >= dormancy_windows``."""
    return graph.active & (window - graph.last_active_window >= dormancy_windows)


def collect_dormant(graph: MemoryGraph, window: int, max_nodes: int,
                    dormancy_windows: int, collect_to: int | None = None) -> Tensor:
    """When more than ``max_nodes`` nodes are active, collect dormant nodes, lowest cached
    PageRank first (ties: smaller id), until ``collect_to`` (default ``max_nodes``) are active:
    mark them inactive and drop their edges; ids stay stable. Returns the collected ids
    (possibly fewer than the excess: the cap is soft, only dormant nodes go).

    ``collect_to < max_nodes`` is a low-water mark: one collection makes room for many windows,
    so its PageRank and edge compaction run once per ``max_nodes - collect_to`` new nodes
    instead of in every window at the cap."""
    active = graph.num_active
    if active <= max_nodes:
        return torch.zeros(0, dtype=torch.long, device=graph.device)
    excess = active - (max_nodes if collect_to is None else min(collect_to, max_nodes))
    if excess <= 0:
        return torch.zeros(0, dtype=torch.long, device=graph.device)
    cand = dormant_mask(graph, window, dormancy_windows).nonzero().view(-1)
    order = torch.sort(graph.pagerank[cand], stable=True).indices
    victims = cand[order[:excess]]
    graph.deactivate(victims)
    return victims


def refresh_pagerank(graph: MemoryGraph, damping: float = 0.85, *, warm: bool = False) -> Tensor:
    """Recompute the weighted PageRank over the active nodes and cache it in ``graph.pagerank``;
    collected nodes score 0. ``warm``: start the power iteration from the cached scores (new
    nodes at the uniform value) instead of uniform: the same fixed point and stopping tolerance,
    a few iterations after one window's change. Returns the scores ``[N]``."""
    n = graph.num_nodes
    active = graph.active
    if n == 0 or not bool(active.any()):
        graph.set_pagerank(torch.zeros(n, device=graph.device))
        return graph.pagerank
    init = None
    if warm:
        init = graph.pagerank.clone()
        fresh = init == 0  # nodes added since the last refresh
        init[fresh] = 1.0 / max(1, int(active.sum()))
    if bool(active.all()):
        scores = pagerank(graph.edge_index, graph.edge_weight, n, damping=damping, init=init)
    else:
        ids = active.nonzero().view(-1)
        relabel = torch.full((n,), -1, dtype=torch.long, device=graph.device)
        relabel[ids] = torch.arange(ids.numel(), device=graph.device)
        sub = pagerank(relabel[graph.edge_index], graph.edge_weight, ids.numel(), damping=damping,
                       init=None if init is None else init[ids])
        scores = torch.zeros(n, dtype=sub.dtype, device=graph.device)
        scores[ids] = sub
    graph.set_pagerank(scores)
    return scores
