r"""The sparse-frontier engine of :class:`~synapse_pt.nn.ActivationDynamics`: how a step's
propagation is computed, not what it computes.

Under the default firing rule a silent node stays silent (:math:`a_i = 0 \Rightarrow` it sends
nothing, and with :math:`\beta \ge 0` inhibition never excites it), so a step only touches each
column's *active frontier*: its nodes with :math:`a_{ib} \ne 0` and their out-neighbours. While
that frontier holds a small share of the :math:`N \times B` cells, :class:`FrontierEngine` runs the
steps on it packed ``[L, B]`` (:func:`~synapse_pt.nn.sparse.frontier_messages`) instead of a sparse
product over the whole graph, with the layer's own inhibition and firing stages, and hands the
loop back its result once the frontier grows past ``density``. The result is the dense loop's
(up to float summation order). Where only firing or inhibition reaches every node
(``fire_zero=True``, :math:`\beta < 0`), the engine still computes the first step's propagation
on :math:`\mathbf{a}(0)`'s frontier and the loop runs the rest densely.

The layer calls :meth:`FrontierEngine.begin` before its loop; everything the frontier needs of the
layer (its stages, its schedule) it reads from the layer passed in, so a layer with swapped
stages and an engine of another kind compose.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor
from torch_geometric.utils import is_torch_sparse_tensor

from .functional import _apply_node_mask, _clamp_nonneg, _retain_and_spread_
from .sparse import (
    FrontierEdges,
    OutEdges,
    _check_edge_index,
    _needs_grad,
    frontier_edges,
    frontier_messages,
    gather_mask,
    out_edges,
)


class ActivationDynamics(Protocol):
    """What the engine reads of the layer that runs it
    (:class:`~synapse_pt.nn.activation.ActivationDynamics`): its stages, its steps and its
    inhibition schedule."""

    spreading: Any
    lateral_inhibition: Any
    firing: Any
    T: int

    def inhibits(self, last: bool) -> bool: ...

    def stock_spreading(self) -> bool: ...

__all__ = ["FRONTIER_MODES", "FrontierEngine", "FrontierStart"]

#: How :class:`ActivationDynamics` propagates: ``"auto"`` (the frontier while it is sparse),
#: ``"sparse"`` (always the frontier; an error where it is not exact), ``"dense"``.
FRONTIER_MODES = ("auto", "sparse", "dense")


def scatter_packed(x: Tensor, packed_nodes: Tensor, num_nodes: int) -> Tensor:
    """A packed ``[L, B]`` frontier matrix back to dense ``[N, B]`` (zeros elsewhere)."""
    out = x.new_zeros(num_nodes, x.size(1))
    slot, col = (packed_nodes >= 0).nonzero(as_tuple=True)
    out[packed_nodes[slot, col], col] = x[slot, col]
    return out


# Columns of a(0) whose frontier bound ActivationDynamics checks before listing every non-zero
# cell: in a sweep's dense LoCoMo blocks ([~1,300, ~3,000]) the first columns already overflow,
# and the index lists of the whole block (a.nonzero) cost 4 ms per block for nothing. Reading 8
# strided columns costs per cell about 8x what the full scan does (10^6 x 64: 63 ms against
# 151 ms), so blocks narrower than 64 x 8 columns, where the frontier is the likely path, are
# not probed.
_PROBE_COLUMNS, _PROBE_MIN_COLUMNS = 8, 512


def _nonzero_cells(a: Tensor) -> tuple[Tensor, Tensor]:
    """``a.nonzero(as_tuple=True)`` of a dense ``[N, B]`` matrix, the same pairs in the same
    (row-major) order, listed from the rows that hold a non-zero only.

    ``nonzero`` reads the whole matrix twice (a count, then the list) through a slow
    element-by-element path: 0.16 s for a 10^6 x 64 a(0), against 0.02 s for a vectorised row
    reduction on the same EPYC. Two reductions (``amax`` and ``amin``: a row is silent when both
    are 0; NaN propagates and counts as non-zero, as in ``nonzero``) find the rows, and
    ``nonzero`` runs on those rows alone. Where at least half of the rows hold a non-zero
    (LoCoMo's small blocks) it runs on ``a`` as it is.
    """
    if a.dim() != 2 or a.numel() == 0:
        return a.nonzero(as_tuple=True)
    rows = ((a.amax(1) != 0) | (a.amin(1) != 0)).nonzero().flatten()
    if 2 * rows.numel() >= a.size(0):
        return a.nonzero(as_tuple=True)
    r, cols = a.index_select(0, rows).nonzero(as_tuple=True)
    return rows[r], cols


def _column_bound(nodes: Tensor, cols: Tensor, selected: FrontierEdges, num_cols: int,
                  dtype: torch.dtype) -> float:
    r"""The largest packed frontier of one step, :math:`\max_b \sum_{j \in \mathcal{A}_b}
    (1 + \mathrm{fan}(j))` rows, from the active cells ``(nodes, cols)`` and their out-edges
    ``selected`` (:func:`~synapse_pt.nn.sparse.frontier_edges`; 0 when none)."""
    degree = selected.degree[torch.searchsorted(selected.nodes, nodes)]
    bound = torch.bincount(cols, weights=(degree + 1).to(dtype), minlength=num_cols)
    return float(bound.max()) if bound.numel() else 0.0


def _bound_exceeds(a: Tensor, graph: OutEdges, num_cols: int, limit: float) -> bool:
    """The step's check ``bound * B > limit`` over some columns ``a`` ``[N, b]`` of the
    ``B``: the same sums and comparison, so a True here is a True there."""
    nodes, cols = a.nonzero(as_tuple=True)
    selected = frontier_edges(graph, nodes, a.size(0))
    return _column_bound(nodes, cols, selected, a.size(1), a.dtype) * num_cols > limit


class FrontierStart(NamedTuple):
    """Where the dense loop starts after :meth:`FrontierEngine.begin`: the activations ``a``
    after ``done`` frontier steps (``a(0)`` itself when none ran), the last step's ``potential``
    when the frontier ran every step (with ``return_potential``), and ``first_u``, the first
    step's propagation when the engine computed it for a dense run (else ``None``)."""

    a: Tensor
    done: int
    potential: Tensor | None = None
    first_u: Tensor | None = None


class FrontierEngine:
    r"""Propagation on each column's active frontier while it is sparse (see the module
    docstring).

    Args:
        mode (str): ``"auto"``: the frontier while it holds at most ``density`` of the
            :math:`N \times B` cells, then dense; ``"sparse"``: always the frontier (an error
            where it is not exact); ``"dense"``: never. (default: ``"auto"``)
        density (float): the largest frontier, as a fraction of the :math:`N \times B` cells,
            that ``"auto"`` propagates sparsely. Measured on LoCoMo-10 (1,100-node graphs, a
            first-step frontier of 5-35 % of them) the dense step is cheaper there; from 10^4
            nodes on the frontier covers about 1 % and wins by 2-16x
            (experiments/bench_retrieval.md, bench_scaling.md). (default: ``0.05``)

    On a sparse adjacency a step reads only its active nodes' out-edges (the entries sorted by
    source, built on the first call and kept with the adjacency:
    :func:`~synapse_pt.nn.sparse.out_edges`); on an edge list, one pass over the sources per
    step, each step normalising only its own edges' weights.
    """

    def __init__(self, mode: str = "auto", density: float = 0.05) -> None:
        if mode not in FRONTIER_MODES:
            raise ValueError(f"frontier must be one of {FRONTIER_MODES}, got {mode!r}")
        self.mode = mode
        self.density = float(density)

    def __repr__(self) -> str:
        return f"FrontierEngine(mode={self.mode!r}, density={self.density})"

    def begin(self, layer: ActivationDynamics, a: Tensor, edge_index: Tensor,
              edge_weight: Tensor | None, normalized: bool, node_mask: Tensor | None,
              candidates: Tensor | None, hyper: tuple, return_potential: bool) -> FrontierStart:
        """Run what of ``layer``'s loop the frontier can run exactly: every step while the
        frontier stays sparse (then ``done == layer.T``), the first steps until it overflows,
        or, where only firing or inhibition needs every node, the first step's propagation."""
        S_t, delta_t, beta_t = hyper[0], hyper[1], hyper[2]
        if self.applies(layer, a, beta_t):
            edges = self.edge_list(layer, a, edge_index, edge_weight, normalized)
            out, done, potential = self.steps(layer, a, edges, node_mask, candidates, hyper,
                                              return_potential)
            return FrontierStart(out, done, potential)
        if self.mode == "auto" and self.blocker(layer, a) is None:
            # only inhibition or firing needs every node (fire_zero, beta < 0): the first
            # step's propagation still reads a(0)'s active cells alone
            edges = self.edge_list(layer, a, edge_index, edge_weight, normalized)
            return FrontierStart(a, 0, None, self.first_potential(a, edges, S_t, delta_t))
        return FrontierStart(a, 0)

    def blocker(self, layer: ActivationDynamics, a: Tensor) -> str | None:
        """Why the frontier cannot compute a step's propagation (``None``: it can)."""
        if not layer.stock_spreading():
            return "the spreading stage is swapped (the frontier computes the stock one)"
        if _needs_grad(a):
            return "autograd needs the dense graph"
        return None

    def applies(self, layer: ActivationDynamics, a: Tensor, beta_t: Tensor | None) -> bool:
        """Whether the frontier path gives the dense result exactly (see ``mode``)."""
        if self.mode == "dense":
            return False
        why = self.blocker(layer, a)
        if why is None and layer.firing.fire_zero:
            why = "fire_zero=True makes every node fire"
        elif why is None and beta_t is not None and bool((beta_t < 0).any()):
            why = "beta < 0 excites silent nodes"
        if why is not None and self.mode == "sparse":
            raise ValueError(f"frontier='sparse' is not exact here: {why}")
        return why is None

    def edge_list(self, layer: ActivationDynamics, a: Tensor, edge_index: Tensor,
                  edge_weight: Tensor | None, normalized: bool) -> OutEdges:
        """The graph's edges for the frontier path, without building the sparse adjacency when
        an edge list is given: a sparse (normalised) adjacency gives its entries sorted by
        source, built once and kept with it (:func:`~synapse_pt.nn.sparse.out_edges`); an
        edge list is read as it is, each step normalising only its own edges' weights."""
        sp = layer.spreading
        if normalized or is_torch_sparse_tensor(edge_index) or sp.cached:
            if not normalized:
                edge_index, edge_weight = sp.normalize(edge_index, edge_weight, a.size(0),
                                                       a.dtype)
            if edge_weight is None:
                return out_edges(edge_index)
            return OutEdges(edge_index[0], edge_index[1], edge_weight.to(a.dtype))
        _check_edge_index(edge_index, a.size(0))
        if edge_weight is not None:
            edge_weight = edge_weight.to(a.dtype)
        return OutEdges(edge_index[0], edge_index[1], edge_weight, fan=sp.fan)

    def steps(self, layer: ActivationDynamics, a: Tensor, edges: OutEdges,
              node_mask: Tensor | None, candidates: Tensor | None, hyper: tuple,
              return_potential: bool) -> tuple[Tensor, int, Tensor | None]:
        r"""Steps on each column's active frontier only (see
        :func:`~synapse_pt.nn.sparse.frontier_messages`).

        Inhibition and firing run as in the dense loop, on the packed ``[L, B]`` frontier: a
        node outside its column's frontier has :math:`u_i = 0`, hence :math:`\hat{u}_i = 0`
        (for :math:`\beta \ge 0`) and :math:`a_i = 0` (silent nodes do not fire), and its zero
        inhibits nobody (nor does a padding slot). Stops early when the frontier holds more
        than ``density`` of the ``N x B`` cells (``"auto"``). Returns ``a`` as a dense
        ``[N, B]`` tensor (the input itself when it stops before the first step), the steps
        done and the potential.
        """
        N, B = a.shape
        cells = self.active_cells(a, edges)
        if cells is None:
            return a, 0, None  # a few columns already overflow: no index lists for all of a
        nodes, cols = cells  # sorted by node
        values = a[nodes, cols]
        S_t, delta_t, beta_t, gamma_t, theta_t, zero_outside = hyper
        potential = None
        done = 0
        for t in range(layer.T):
            step = self.potential(nodes, cols, values, edges, N, B, S_t, delta_t)
            if step is None:
                break
            last = t == layer.T - 1
            packed, u = step
            outside = ~gather_mask(node_mask, packed) if node_mask is not None else packed < 0
            u = _apply_node_mask(u, outside)
            if layer.inhibits(last):
                cand = gather_mask(candidates, packed) if candidates is not None else ~outside
                uhat = layer.lateral_inhibition(u, beta=beta_t, node_mask=cand,
                                                zero_outside=zero_outside)
            else:
                uhat = _clamp_nonneg(u, inplace=True)
            if last and return_potential:
                potential = scatter_packed(uhat, packed, N)
            a_p = _apply_node_mask(layer.firing(uhat, gamma=gamma_t, theta=theta_t), outside)
            slot, cols = a_p.nonzero(as_tuple=True)
            nodes, values = packed[slot, cols], a_p[slot, cols]
            order = torch.argsort(nodes, stable=True)
            nodes, cols, values = nodes[order], cols[order], values[order]
            done = t + 1
        if done == 0 < layer.T:  # bailed out before the first step: the caller goes on from a(0)
            return a, 0, None
        out = a.new_zeros(N, B)
        out[nodes, cols] = values
        return out, done, potential

    def limit(self, N: int, B: int) -> float:
        """The most packed cells a frontier step of ``N x B`` may hold (``"auto"``)."""
        return self.density * N * B if self.mode == "auto" else math.inf

    def active_cells(self, a: Tensor, edges: OutEdges) -> tuple[Tensor, Tensor] | None:
        """``a``'s non-zero cells ``(nodes, cols)``, sorted by node, or ``None`` where a few
        probed columns of a wide block already show the first step's frontier too large."""
        N, B = a.shape
        if self.mode == "auto" and B >= _PROBE_MIN_COLUMNS and _bound_exceeds(
                a[:, :_PROBE_COLUMNS], edges, B, self.limit(N, B)):
            return None
        return _nonzero_cells(a)

    def potential(self, nodes: Tensor, cols: Tensor, values: Tensor, edges: OutEdges, N: int,
                  B: int, S_t: Tensor, delta_t: Tensor) -> tuple[Tensor, Tensor] | None:
        r"""One step's propagation on the frontier of the active cells ``(nodes, cols)``
        (values ``values``): the packed nodes and :math:`u = S\,\mathrm{spread} + (1 -
        \delta)\,a`, each ``[L, B]``; ``None`` where the frontier would hold more than
        ``density`` of the cells."""
        limit = self.limit(N, B)
        selected = frontier_edges(edges, nodes, N)
        if limit < math.inf and _column_bound(nodes, cols, selected, B, values.dtype) * B > limit:
            return None
        packed, spread, a_p = frontier_messages(
            edges.source, edges.target, edges.weight, nodes, cols, values, N, B,
            ptr=edges.ptr, fan=edges.fan, selected=selected)
        if packed.numel() > limit:
            return None
        return packed, _retain_and_spread_(spread, a_p, S_t, delta_t)

    def first_potential(self, a: Tensor, edges: OutEdges, S_t: Tensor, delta_t: Tensor
                        ) -> Tensor | None:
        """The first step's propagation ``u`` ``[N, B]`` computed on ``a``'s frontier (zeros
        off it), for a run whose later steps are dense; ``None`` where it is too large."""
        cells = self.active_cells(a, edges)
        if cells is None:
            return None
        nodes, cols = cells
        N, B = a.shape
        step = self.potential(nodes, cols, a[nodes, cols], edges, N, B, S_t, delta_t)
        if step is None:
            return None
        packed, u = step
        return scatter_packed(u, packed, N)
