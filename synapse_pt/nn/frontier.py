r"""How :class:`~synapse_pt.nn.ActivationDynamics` stores its activations between steps: a dense
``[N, B]`` matrix (:class:`DenseActivations`) or each column's packed active frontier
(:class:`FrontierActivations`), picked per call by :class:`FrontierEngine`. The layer's loop is
the same on both (``spread``, ``mask``, its inhibition and firing stages, ``fire``); a storage
decides only where the numbers live and how a step's propagation reads them.

Under the default firing rule a silent node stays silent (:math:`a_i = 0 \Rightarrow` it sends
nothing, and with :math:`\beta \ge 0` inhibition never excites it), so a step only touches each
column's *active frontier*: its nodes with :math:`a_{ib} \ne 0` and their out-neighbours. While
that frontier holds a small share of the :math:`N \times B` cells, the frontier storage packs it
``[L, B]`` (:func:`~synapse_pt.nn.sparse.frontier_messages`) instead of a sparse product over the
whole graph, and turns dense once it grows past ``density``. The result is the dense storage's
(up to float summation order). Where only firing or inhibition reaches every node
(``fire_zero=True``, :math:`\beta < 0`), the first step's propagation still runs on
:math:`\mathbf{a}(0)`'s frontier and the storage turns dense after it.

Everything a storage needs of the layer (its spreading stage) it reads from the layer passed in,
so a layer with swapped stages and an engine of another kind compose.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch_geometric.utils import is_torch_sparse_tensor

from .functional import NodeMasks, StepParams, _apply_node_mask, _retain_and_spread_
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

#: the layer a storage serves (:class:`~synapse_pt.nn.ActivationDynamics`, whose module imports
#: this one): a storage reads its ``spreading`` and ``firing`` stages and ``stock_spreading()``
Layer = nn.Module

__all__ = ["FRONTIER_MODES", "DenseActivations", "FrontierActivations", "FrontierEngine",
           "GraphInput"]

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


class GraphInput(NamedTuple):
    """The graph of one call as the layer got it: an edge list ``[2, E]`` (source, target) with
    raw weights, or a sparse transposed adjacency; ``normalized``: already the fan-normalised
    ``adj_t`` of :meth:`~synapse_pt.nn.SpreadingActivation.normalize`."""

    edge_index: Tensor
    edge_weight: Tensor | None
    normalized: bool


class DenseActivations:
    r"""The activations as one dense ``[N, B]`` matrix: a step's propagation is the layer's
    spreading stage over the whole graph (normalised on the first step).

    The layer's loop reads ``candidates`` (the nodes that may inhibit, in the storage's layout)
    and calls :meth:`spread`, :meth:`mask`, :meth:`fire` and :meth:`dense`."""

    def __init__(self, layer: Layer, a: Tensor, graph: GraphInput,
                 masks: NodeMasks) -> None:
        self.layer, self.graph, self.masks = layer, graph, masks
        self.a = a
        self._adj: tuple[Tensor, Tensor | None] | None = None
        self._dense_masks()

    def _dense_masks(self) -> None:
        """The masks in the dense layout: ``outside`` (nodes kept at 0) and the candidates."""
        self.outside = None if self.masks.node_mask is None else ~self.masks.node_mask
        self.candidates = self.masks.candidates

    def spread(self, p: StepParams) -> Tensor:
        r""":math:`u = (1 - \delta)\, a + S\, P a` of the stored activations (a new tensor)."""
        if self._adj is None:
            g = self.graph
            self._adj = (g.edge_index, g.edge_weight) if g.normalized else (
                self.layer.spreading.normalize(g.edge_index, g.edge_weight, self.a.size(0),
                                               self.a.dtype))
        return self.layer.spreading(self.a, *self._adj, S=p.S, delta=p.delta, normalized=True)

    def mask(self, x: Tensor) -> Tensor:
        """``x`` (this step's layout) with the nodes outside each column's graph set to 0."""
        return _apply_node_mask(x, self.outside)

    def fire(self, a: Tensor) -> None:
        """Store the step's fired activations ``a`` (this step's layout), masked."""
        self.a = self.mask(a)

    def dense(self, x: Tensor | None = None) -> Tensor:
        """The stored activations as ``[N, B]``, or ``x`` of this step's layout as ``[N, B]``."""
        return self.a if x is None else x


class FrontierActivations(DenseActivations):
    r"""The activations as each column's non-zero cells; a step propagates, inhibits and fires on
    their frontier packed ``[L, B]`` (:func:`~synapse_pt.nn.sparse.frontier_messages`). A node
    outside its column's frontier has :math:`u_i = 0`, hence :math:`\hat{u}_i = 0` (for
    :math:`\beta \ge 0`) and :math:`a_i = 0` (silent nodes do not fire), and its zero inhibits
    nobody (nor does a padding slot).

    The storage turns dense (:class:`DenseActivations`' steps from then on) when a step's
    frontier would hold more than the engine's ``density`` of the ``N x B`` cells, and, where
    silent nodes may fire (``exact=False``: ``fire_zero``, :math:`\beta < 0`), right after the
    first step's propagation.
    """

    def __init__(self, engine: FrontierEngine, layer: Layer, a: Tensor,
                 graph: GraphInput, masks: NodeMasks, edges: OutEdges,
                 cells: tuple[Tensor, Tensor], exact: bool) -> None:
        self.engine, self.edges, self.exact = engine, edges, exact
        nodes, cols = cells  # sorted by node
        #: the non-zero cells ``(nodes, cols, values)``, sorted by node; ``None`` once dense
        self.cells: tuple[Tensor, Tensor, Tensor] | None = (nodes, cols, a[nodes, cols])
        self.packed: Tensor | None = None  # this step's frontier nodes [L, B] (-1: padding)
        self.steps = 0  # steps fired on the frontier
        super().__init__(layer, a, graph, masks)

    def _dense_masks(self) -> None:
        if self.cells is None:
            super()._dense_masks()
        else:  # each step's spread sets them for its packed frontier (no [N, B] mask here)
            self.outside = self.candidates = None

    def spread(self, p: StepParams) -> Tensor:
        if self.cells is None:
            return super().spread(p)
        N, B = self.a.shape
        step = self.engine.potential(*self.cells, self.edges, N, B, p.S, p.delta)
        if step is None:  # the frontier overflows: dense from here
            self._densify()
            return super().spread(p)
        packed, u = step
        if not self.exact:  # silent nodes may fire: every later stage is dense
            self._densify()
            return scatter_packed(u, packed, N)
        node_mask, candidates = self.masks.node_mask, self.masks.candidates
        self.packed = packed
        self.outside = ~gather_mask(node_mask, packed) if node_mask is not None else packed < 0
        self.candidates = (gather_mask(candidates, packed) if candidates is not None
                           else ~self.outside)
        return u

    def fire(self, a: Tensor) -> None:
        if self.cells is None:
            return super().fire(a)
        a = self.mask(a)
        slot, cols = a.nonzero(as_tuple=True)
        nodes, values = self.packed[slot, cols], a[slot, cols]
        order = torch.argsort(nodes, stable=True)
        self.cells = (nodes[order], cols[order], values[order])
        self.steps += 1
        return None

    def dense(self, x: Tensor | None = None) -> Tensor:
        if self.cells is None:
            return super().dense(x)
        N = self.a.size(0)
        if x is not None:
            return scatter_packed(x, self.packed, N)
        if self.steps == 0:  # nothing fired yet: a(0) as given
            return self.a
        nodes, cols, values = self.cells
        out = self.a.new_zeros(self.a.shape)
        out[nodes, cols] = values
        return out

    def _densify(self) -> None:
        self.a = self.dense()
        self.cells = self.packed = None
        self._dense_masks()


class FrontierEngine:
    r"""Picks how a call's activations are stored: each column's active frontier while it is
    sparse (:class:`FrontierActivations`), else dense (:class:`DenseActivations`; see the module
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

    def store(self, layer: Layer, a: Tensor, graph: GraphInput, masks: NodeMasks,
              p: StepParams) -> DenseActivations:
        r"""The storage of ``layer``'s activations from ``a`` = :math:`\mathbf{a}(0)`: the
        frontier where it gives the dense result exactly (every step, while it stays sparse),
        or, where only firing or inhibition needs every node, for the first step's propagation
        alone; dense elsewhere."""
        exact = self.applies(layer, a, p.beta)
        if exact or (self.mode == "auto" and self.blocker(layer, a) is None):
            edges = self.edge_list(layer, a, graph)
            cells = self.active_cells(a, edges)
            if cells is not None:
                return FrontierActivations(self, layer, a, graph, masks, edges, cells, exact)
        return DenseActivations(layer, a, graph, masks)

    def blocker(self, layer: Layer, a: Tensor) -> str | None:
        """Why the frontier cannot compute a step's propagation (``None``: it can)."""
        if not layer.stock_spreading():
            return "the spreading stage is swapped (the frontier computes the stock one)"
        if _needs_grad(a):
            return "autograd needs the dense graph"
        return None

    def applies(self, layer: Layer, a: Tensor, beta_t: Tensor | None) -> bool:
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

    def edge_list(self, layer: Layer, a: Tensor, graph: GraphInput) -> OutEdges:
        """The graph's edges for the frontier path, without building the sparse adjacency when
        an edge list is given: a sparse (normalised) adjacency gives its entries sorted by
        source, built once and kept with it (:func:`~synapse_pt.nn.sparse.out_edges`); an
        edge list is read as it is, each step normalising only its own edges' weights."""
        sp = layer.spreading
        edge_index, edge_weight, normalized = graph
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
