r"""Where :class:`~synapse_pt.nn.ActivationDynamics` keeps :math:`\mathbf{a}(t)` between steps:
a dense ``[N, B]`` matrix (:class:`DenseActivations`) or each column's packed active frontier
(:class:`FrontierActivations`); :func:`activation_storage` picks one per call.

The interface the layer's loop reads, the same for both: :meth:`~DenseActivations.neighbours`
gives :math:`\mathbf{P}\mathbf{a}` and :math:`\mathbf{a}` over this step's rows; ``outside`` (the
cells held at 0), ``candidates`` (the cells that may inhibit) and ``zero_outside`` are the masks
in that layout; :meth:`~DenseActivations.update` stores the fired activations and
:meth:`~DenseActivations.dense` turns a step's rows into ``[N, B]``.

Under the default firing rule a silent node stays silent (:math:`a_i = 0` sends nothing, and
with :math:`\beta \ge 0` inhibition never excites it), so a step only touches each column's
*active frontier*: its nodes with :math:`a_{ib} \ne 0` and their out-neighbours. While that
frontier holds a small share of the :math:`N \times B` cells, the frontier storage packs it
``[L, B]`` (:func:`~synapse_pt.nn.sparse.frontier_messages`) instead of a sparse product over the
whole graph, and turns dense once it grows past ``density``: the dense result up to float
summation order. Where firing or inhibition reaches every node (``fire_zero=True``,
:math:`\beta < 0`), the first step's propagation still runs on :math:`\mathbf{a}(0)`'s frontier and
the storage turns dense after it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from .sparse import (
    FrontierEdges,
    OutEdges,
    activation_adjacency,
    check_edge_index,
    frontier_edges,
    frontier_messages,
    gather_mask,
    needs_grad,
    out_edges,
    spmm_sum,
)

__all__ = ["FRONTIER_MODES", "DenseActivations", "FrontierActivations", "GraphInput",
           "NodeMasks", "activation_storage"]

#: ``"auto"`` (the frontier while it is sparse), ``"sparse"`` (always the frontier; an error
#: where it is not exact), ``"dense"``
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
# Narrower blocks of at most this many cells on a sparse adjacency (LoCoMo's batched retrieval:
# ~1,100 x ~200) check the whole bound before listing a(0)'s cells: one float pass over a(0) and
# a matrix-vector product with 1 + the out-degrees, a fraction of ``nonzero``'s cost, so a block
# whose frontier overflows turns dense at once (issue 62: auto within a few per cent of dense).
_BOUND_MAX_CELLS = 1 << 22


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


def _cell_degree(nodes: Tensor, graph: OutEdges, selected: FrontierEdges | None) -> Tensor:
    """The out-degree of each active cell's node (``nodes`` sorted): from the graph's CSR
    pointer where it has one, else from the step's edges ``selected``."""
    if graph.ptr is not None:
        return graph.ptr[nodes + 1] - graph.ptr[nodes]
    assert selected is not None
    return selected.degree[torch.searchsorted(selected.nodes, nodes)]


def _column_bound(nodes: Tensor, cols: Tensor, degree: Tensor, num_cols: int,
                  dtype: torch.dtype) -> float:
    r"""The largest packed frontier of one step, :math:`\max_b \sum_{j \in \mathcal{A}_b}
    (1 + \mathrm{fan}(j))` rows, from the active cells ``(nodes, cols)`` and their nodes'
    out-degrees ``degree`` (:func:`_cell_degree`; 0 when there are no cells)."""
    bound = torch.bincount(cols, weights=(degree + 1).to(dtype), minlength=num_cols)
    return float(bound.max()) if bound.numel() else 0.0


def _dense_bound_exceeds(a: Tensor, ptr: Tensor, limit: float) -> bool:
    r"""The first step's check ``bound * B > limit`` without listing a(0)'s cells: each
    column's :math:`\sum_{j : a_{jb} \ne 0} (1 + \mathrm{fan}(j))` as the product of the
    float indicator :math:`[a \ne 0]` ``[N, B]`` with :math:`1 + \mathrm{fan}` ``[N]`` (from the
    CSR pointer ``ptr`` of :func:`~synapse_pt.nn.sparse.out_edges`). Sums of integers, exact in
    any order below :math:`2^{24}`: the decision of :func:`_column_bound` (NaN counts as
    non-zero, -0.0 does not, as in ``nonzero``)."""
    weight = (ptr[1:] - ptr[:-1]).add_(1).to(a.dtype)  # [N]
    active = torch.ne(a, 0, out=torch.empty_like(a))  # a float pass: 1 where a != 0
    bound = torch.mv(active.T, weight)  # [B]
    return bool(bound.numel()) and float(bound.max()) * a.size(1) > limit


def _bound_exceeds(a: Tensor, graph: OutEdges, num_cols: int, limit: float) -> bool:
    """The step's check ``bound * B > limit`` over some columns ``a`` ``[N, b]`` of the
    ``B``: the same sums and comparison, so a True here is a True there."""
    nodes, cols = a.nonzero(as_tuple=True)
    selected = None if graph.ptr is not None else frontier_edges(graph, nodes, a.size(0))
    degree = _cell_degree(nodes, graph, selected)
    return _column_bound(nodes, cols, degree, a.size(1), a.dtype) * num_cols > limit


class GraphInput(NamedTuple):
    """The graph of one call as the layer got it: an edge list ``[2, E]`` (source, target) with
    raw weights, or a sparse transposed adjacency; ``normalized``: already the fan-normalised
    ``adj_t`` of :func:`~synapse_pt.nn.sparse.activation_adjacency`; ``fan``: the normalisation
    to apply otherwise."""

    edge_index: Tensor
    edge_weight: Tensor | None
    normalized: bool
    fan: bool


def _check_mask(mask: Tensor | None, a: Tensor, name: str) -> Tensor | None:
    if mask is None:
        return None
    if mask.dtype != torch.bool:
        raise ValueError(f"{name} must be bool, got {mask.dtype}")
    if mask.dim() == 1:
        mask = mask.unsqueeze(1)
    N, B = a.shape
    if mask.dim() != 2 or mask.size(0) != N or mask.size(1) not in (1, B):
        raise ValueError(f"{name} has shape {tuple(mask.shape)}; expected [N, B] or [N, 1] "
                         f"with N = {N}, B = {B}")
    return mask.to(a.device)


class NodeMasks(NamedTuple):
    """The node masks of one call, each bool ``[N, B]`` or ``[N, 1]`` on the activations'
    device, or ``None`` (every node): ``node_mask`` (each column's graph), ``candidates`` (the
    nodes that may inhibit: in the graph and in the inhibitor mask), ``zero_outside`` (no
    inhibitor mask narrows the candidates, so the non-candidates hold 0)."""

    node_mask: Tensor | None
    candidates: Tensor | None
    zero_outside: bool

    @classmethod
    def of(cls, a: Tensor, node_mask: Tensor | None = None,
           inhibitor_mask: Tensor | None = None) -> NodeMasks:
        node_mask = _check_mask(node_mask, a, "node_mask")
        inhibitor_mask = _check_mask(inhibitor_mask, a, "inhibitor_mask")
        candidates = node_mask
        if inhibitor_mask is not None:
            candidates = inhibitor_mask if node_mask is None else node_mask & inhibitor_mask
        return cls(node_mask, candidates, inhibitor_mask is None)


class DenseActivations:
    r"""The activations as one dense ``[N, B]`` matrix; a step's neighbour sum is one sparse
    product over the whole graph (normalised on the first step)."""

    def __init__(self, a: Tensor, graph: GraphInput, masks: NodeMasks) -> None:
        self.a, self.graph, self.masks = a, graph, masks
        self.zero_outside = masks.zero_outside
        self._dense_masks()

    def _dense_masks(self) -> None:
        self.outside = None if self.masks.node_mask is None else ~self.masks.node_mask
        self.candidates = self.masks.candidates

    def neighbours(self) -> tuple[Tensor, Tensor]:
        r""":math:`(\mathbf{P}\mathbf{a}, \mathbf{a})` over this step's rows (a fresh first
        tensor: the step may overwrite it)."""
        g = self.graph
        if not g.normalized:
            self.graph = g = GraphInput(_normalize(g, self.a), None, True, g.fan)
        return spmm_sum(g.edge_index, self.a), self.a

    def update(self, a: Tensor) -> None:
        """Store the step's fired activations ``a`` (this step's layout, already masked)."""
        self.a = a

    def dense(self, x: Tensor | None = None) -> Tensor:
        """The stored activations as ``[N, B]``, or ``x`` of this step's layout as ``[N, B]``."""
        return self.a if x is None else x


def _normalize(graph: GraphInput, a: Tensor) -> Tensor:
    """The fan-normalised sparse ``adj_t`` of a raw edge list or sparse adjacency."""
    edge_index, edge_weight, num_nodes = graph.edge_index, graph.edge_weight, a.size(0)
    if edge_index.layout != torch.strided:
        coo = edge_index.to_sparse_coo().coalesce()
        target, source = coo.indices()
        edge_index, edge_weight, num_nodes = torch.stack([source, target]), coo.values(), \
            coo.size(0)
    return activation_adjacency(edge_index, edge_weight, num_nodes, fan=graph.fan,
                                dtype=a.dtype)


class FrontierActivations(DenseActivations):
    r"""The activations as each column's non-zero cells; a step's neighbour sum covers their
    frontier packed ``[L, B]``. A node outside its column's frontier has :math:`u_i = 0`, hence
    :math:`\hat{u}_i = 0` (:math:`\beta \ge 0`) and :math:`a_i = 0`, and its zero inhibits nobody
    (nor does a padding slot). Turns dense when a step's frontier would exceed ``limit`` cells
    and, where silent nodes may fire (not ``exact``), after the first step's neighbour sum."""

    def __init__(self, a: Tensor, graph: GraphInput, masks: NodeMasks, edges: OutEdges,
                 cells: tuple[Tensor, Tensor], exact: bool, limit: float) -> None:
        self.edges, self.exact, self.limit = edges, exact, limit
        nodes, cols = cells  # sorted by node
        #: the non-zero cells ``(nodes, cols, values)``, sorted by node; ``None`` once dense
        self.cells: tuple[Tensor, Tensor, Tensor] | None = (nodes, cols, a[nodes, cols])
        self.packed: Tensor | None = None  # this step's frontier nodes [L, B] (-1: padding)
        self.steps = 0  # steps fired on the frontier
        super().__init__(a, graph, masks)

    def _dense_masks(self) -> None:
        if self.cells is None:
            super()._dense_masks()
        else:  # each step sets them for its packed frontier
            self.outside = self.candidates = None

    def neighbours(self) -> tuple[Tensor, Tensor]:
        if self.cells is None:
            return super().neighbours()
        N, B = self.a.shape
        nodes, cols, values = self.cells
        # with the out-degree pointer (a sparse adjacency) the bound needs no edge list: a block
        # whose frontier overflows (LoCoMo's) turns dense before listing its edges
        selected = None if self.edges.ptr is not None else frontier_edges(self.edges, nodes, N)
        if self.limit < math.inf and _column_bound(
                nodes, cols, _cell_degree(nodes, self.edges, selected), B,
                values.dtype) * B > self.limit:
            self._densify()  # the frontier overflows: dense from here
            return super().neighbours()
        if selected is None:
            selected = frontier_edges(self.edges, nodes, N)
        packed, spread, a = frontier_messages(self.edges, nodes, cols, values, N, B,
                                              selected=selected)
        if packed.numel() > self.limit:
            self._densify()
            return super().neighbours()
        if not self.exact:  # silent nodes may fire: dense from this step's u on (a is a(0))
            self._densify()
            return scatter_packed(spread, packed, N), self.a
        node_mask, candidates = self.masks.node_mask, self.masks.candidates
        self.packed = packed
        self.outside = ~gather_mask(node_mask, packed) if node_mask is not None else packed < 0
        self.candidates = (gather_mask(candidates, packed) if candidates is not None
                           else ~self.outside)
        return spread, a

    def update(self, a: Tensor) -> None:
        if self.cells is None:
            return super().update(a)
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


def activation_storage(a: Tensor, graph: GraphInput, masks: NodeMasks, *, mode: str,
                       density: float, inexact: str | None) -> DenseActivations:
    r"""The storage of a call's activations from ``a`` = :math:`\mathbf{a}(0)`.

    ``mode`` (:data:`FRONTIER_MODES`): ``"auto"`` keeps the frontier while it holds at most
    ``density`` of the :math:`N \times B` cells, and checks the first step's bound before it
    lists a(0)'s cells where that is cheap (a few columns of a wide block; the whole of a narrow,
    cache-sized block on a sparse adjacency), so a block dense from the start costs about what
    ``"dense"`` costs. Measured on LoCoMo-10 (1,100-node graphs, a
    first-step frontier of 5-35 % of them) the dense step is cheaper there; from 10^4 nodes on the
    frontier covers about 1 % and wins by 2-16x (experiments/bench_retrieval.md,
    bench_scaling.md). ``inexact``: why silent nodes may fire in this call (the layer knows its
    dynamics: ``fire_zero``, :math:`\beta < 0`; ``None``: they stay silent, and the frontier is
    exact unless autograd runs); where it is not exact, ``"auto"`` (no autograd) still runs the
    first step's neighbour sum on it. On a sparse adjacency a step reads only its active nodes'
    out-edges (sorted by source once, kept with the adjacency:
    :func:`~synapse_pt.nn.sparse.out_edges`); on an edge list, one pass over the sources per
    step, each step normalising only its own edges' weights.
    """
    if mode not in FRONTIER_MODES:
        raise ValueError(f"frontier must be one of {FRONTIER_MODES}, got {mode!r}")
    if mode == "dense" or (mode == "auto" and needs_grad(a)):
        return DenseActivations(a, graph, masks)
    why = "autograd needs the dense graph" if needs_grad(a) else inexact
    if why is not None and mode == "sparse":
        raise ValueError(f"frontier='sparse' is not exact here: {why}")
    if graph.edge_index.layout != torch.strided and not graph.normalized:
        graph = GraphInput(_normalize(graph, a), None, True, graph.fan)
    if graph.normalized:
        edges = out_edges(graph.edge_index)
    else:
        check_edge_index(graph.edge_index, a.size(0))
        w = None if graph.edge_weight is None else graph.edge_weight.to(a.dtype)
        edges = OutEdges(graph.edge_index[0], graph.edge_index[1], w, fan=graph.fan)
    N, B = a.shape
    limit = density * N * B if mode == "auto" else math.inf
    if mode == "auto" and B >= _PROBE_MIN_COLUMNS and _bound_exceeds(
            a[:, :_PROBE_COLUMNS], edges, B, limit):
        return DenseActivations(a, graph, masks)
    if (mode == "auto" and B < _PROBE_MIN_COLUMNS and a.numel() <= _BOUND_MAX_CELLS
            and edges.ptr is not None and _dense_bound_exceeds(a, edges.ptr, limit)):
        return DenseActivations(a, graph, masks)
    cells = _nonzero_cells(a)
    return FrontierActivations(a, graph, masks, edges, cells, why is None, limit)
