r"""Functional form of the SYNAPSE activation dynamics (SPEC §1.2, steps 3-5).

Activations are a dense matrix :math:`\mathbf{A} \in \mathbb{R}^{N \times B}`: one row per memory
node, one column per query (or per ``(query, hyperparameter configuration)`` pair in a sweep).
Edges run from a source :math:`j` to a target :math:`i` (``edge_index[0] = j``,
``edge_index[1] = i``), PyG's ``source_to_target`` flow. One step :math:`t \to t + 1` is

.. math::
    u_i &= (1 - \delta)\, a_i + \sum_{j \in \mathcal{N}_{in}(i)}
           S \, \frac{w_{ji}}{\mathrm{fan}(j)} \, a_j

    \hat{u}_i &= \max\Big(0,\; u_i - \beta \sum_{k \in \text{top-}M(u)}
                 (u_k - u_i)\, [u_k > u_i]\Big)

    a_i &= \sigma\big(\gamma (\hat{u}_i - \theta)\big)\,[\hat{u}_i > 0]

with :math:`\mathrm{fan}(j)` the out-degree of :math:`j` (propagation, lateral inhibition, firing;
the indicator is our default reading of step 5, ``fire_zero=True`` drops it).
Every hyperparameter except :math:`M` and :math:`T` may be a Python float or a tensor
broadcastable to ``[B]`` (one value per column), so thousands of configurations run in one pass.

The building blocks are public so that callers can cache the normalised adjacency
(:func:`activation_adjacency`) once per graph and run :func:`activation_dynamics` per batch of
queries; :func:`spreading_activation` does both.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = [
    "FrontierEdges",
    "OutEdges",
    "activation_adjacency",
    "activation_dynamics",
    "activation_step",
    "adjacency_edges",
    "column_topk",
    "csr_by_row",
    "fan_out",
    "frontier_edges",
    "frontier_messages",
    "fire",
    "inhibit_and_fire",
    "lateral_inhibition",
    "normalized_edge_weight",
    "out_edges",
    "propagate",
    "row_blocks",
    "spmm_sum",
    "spreading_activation",
]

Hyper = float | Tensor

# On the CPU the elementwise chains (propagation update, the M passes of lateral inhibition,
# firing) run over row blocks of about this many elements (256 KiB of float32), so a block stays
# in cache and no [N, B] temporaries are allocated (~5x faster than whole-matrix passes on a
# 2-core EPYC). On CUDA whole-matrix kernels are bandwidth-bound and launch-cheap: one block.
_CPU_BLOCK_ELEMS = 1 << 16


def _column_param(value: Hyper, num_columns: int, like: Tensor, name: str) -> Tensor:
    """Turn a hyperparameter into a tensor that broadcasts over the ``[N, B]`` activations.

    Returns a 0-d tensor for a scalar and a ``[B]`` tensor otherwise, in ``like``'s dtype and
    device.
    """
    t = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    if t.dim() == 0:
        return t
    if t.numel() == 1:
        return t.reshape(())
    try:
        return torch.broadcast_to(t.reshape(-1) if t.dim() > 1 else t, (num_columns,))
    except RuntimeError as e:
        raise ValueError(
            f"hyperparameter {name!r} has shape {tuple(t.shape)}; expected a float or a tensor "
            f"broadcastable to [B] = [{num_columns}]"
        ) from e


def _check_edge_index(edge_index: Tensor, num_nodes: int) -> None:
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"edge_index must have shape [2, E], got {tuple(edge_index.shape)}")
    if edge_index.numel() > 0:
        lo, hi = (int(v) for v in torch.aminmax(edge_index))
        if lo < 0 or hi >= num_nodes:
            raise ValueError(
                f"edge_index holds node ids in [{lo}, {hi}] but num_nodes = {num_nodes}"
            )


def fan_out(edge_index: Tensor, num_nodes: int) -> Tensor:
    r"""Fan of every node: :math:`\mathrm{fan}(j) = |\{(j, i) \in E\}|`, its out-degree.

    Counts outgoing edges (a repeated edge counts twice), whatever their weights.

    Args:
        edge_index (LongTensor): ``[2, E]``, row 0 the source :math:`j`, row 1 the target
            :math:`i`.
        num_nodes (int): :math:`N`; nodes past the largest id in ``edge_index`` get fan 0.

    Returns:
        LongTensor ``[N]``.
    """
    return torch.bincount(edge_index[0], minlength=num_nodes)


def normalized_edge_weight(
    edge_index: Tensor,
    edge_weight: Tensor | None,
    num_nodes: int,
    fan: bool = True,
) -> Tensor:
    r"""Per-edge propagation weight :math:`w_{ji} / \mathrm{fan}(j)` (SPEC §1.2 step 3).

    Computed once per graph and cacheable. Every source of an edge has fan >= 1, so no division
    by zero; a node with out-degree 0 simply owns no edge and sends nothing.

    Args:
        edge_index (LongTensor): ``[2, E]`` (source, target).
        edge_weight (Tensor, optional): ``[E]`` edge weights :math:`w_{ji}`; ``None`` = all 1.
        num_nodes (int): :math:`N`.
        fan (bool): divide by the out-degree of the source; ``False`` is the ``no_fan`` ablation
            (:math:`\mathrm{fan}(j) = 1`). (default: ``True``)

    Returns:
        Tensor ``[E]`` (floating; float32 when ``edge_weight`` is ``None``).
    """
    if edge_weight is None:
        edge_weight = torch.ones(edge_index.size(1), device=edge_index.device)
    elif not edge_weight.is_floating_point():
        edge_weight = edge_weight.float()
    if not fan:
        return edge_weight
    deg = fan_out(edge_index, num_nodes).to(edge_weight.dtype)
    return edge_weight / deg[edge_index[0]]


def activation_adjacency(
    edge_index: Tensor,
    edge_weight: Tensor | None,
    num_nodes: int,
    *,
    fan: bool = True,
    dtype: torch.dtype | None = None,
) -> Tensor:
    r"""Transposed, fan-normalised adjacency :math:`\mathbf{P}` as a sparse CSR ``[N, N]`` tensor.

    .. math::
        P_{ij} = \sum_{(j, i) \in E} \frac{w_{ji}}{\mathrm{fan}(j)}

    so that :math:`\mathbf{P}\mathbf{A}` is the neighbour sum of SPEC §1.2 step 3 (repeated edges
    are stored side by side and add up in products, see :func:`csr_by_row`). Row = target,
    column = source: the ``adj_t`` convention of PyG. Build it once per graph and reuse it for
    every batch of queries and every step.

    Args:
        edge_index (LongTensor): ``[2, E]`` (source, target).
        edge_weight (Tensor, optional): ``[E]``; ``None`` = all 1.
        num_nodes (int): :math:`N` (isolated trailing nodes keep their rows).
        fan (bool): fan normalisation on/off. (default: ``True``)
        dtype (torch.dtype, optional): value dtype (default: that of the normalised weights).

    Returns:
        sparse CSR Tensor ``[N, N]`` on ``edge_index``'s device.
    """
    _check_edge_index(edge_index, num_nodes)
    if dtype is not None and edge_weight is not None:
        edge_weight = edge_weight.to(dtype)  # normalise in the target precision
    w = normalized_edge_weight(edge_index, edge_weight, num_nodes, fan=fan)
    if dtype is not None:
        w = w.to(dtype)
    return csr_by_row(edge_index[1], edge_index[0], w, num_nodes)  # (target i, source j)


def _row_pointer(sorted_keys: Tensor, num_rows: int, stride: int = 1) -> Tensor:
    """The CSR pointer ``[num_rows + 1]`` of entries sorted by ``row * stride + ...`` keys:
    row ``r`` starts at the first key ``>= r * stride`` (one ``searchsorted``, no count)."""
    bounds = torch.arange(num_rows + 1, device=sorted_keys.device).mul_(stride)
    return torch.searchsorted(sorted_keys, bounds)


def csr_by_row(row: Tensor, col: Tensor, value: Tensor, num_nodes: int) -> Tensor:
    r"""The ``[N, N]`` sparse CSR matrix with entries ``value[e]`` at ``(row[e], col[e])``,
    columns ascending within each row.

    Repeated ``(row, col)`` pairs are kept side by side in their input order, so products add
    them up as a coalesced matrix would (up to float rounding where pairs repeat). One stable
    sort of the ``E`` keys ``row * N + col``; the sorted keys then give the row pointer (row
    :math:`r` starts at the first key :math:`\ge rN`) and the columns (their remainders), so
    only the values are gathered. ``activation_adjacency`` at 15 M edges, normalisation
    included (``scripts/bench_kernels.py``, 2 cores): 1.6-2.0 s against 5.7-6.5 s for
    ``coalesce()`` + ``to_sparse_csr`` on an AMD EPYC (2.4-2.5 s when the columns were gathered
    and the rows counted); 1.2 s against 2.8 s on an Intel Xeon.
    """
    key, order = torch.sort(torch.add(col, row, alpha=num_nodes), stable=True)
    crow = _row_pointer(key, num_nodes, stride=num_nodes)
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, key.remainder_(num_nodes),
                                       value.index_select(0, order), (num_nodes, num_nodes),
                                       check_invariants=False)


def spmm_sum(adj_t: Tensor, x: Tensor) -> Tensor:
    r"""Sparse-dense product :math:`\mathbf{P}\mathbf{X}` (``[N, N] x [N, B] -> [N, B]``).

    One code path for the functional form and the module, so both give bit-identical results.
    Never materialises an ``[E, B]`` message tensor. Always returns a fresh tensor.

    On the CPU without autograd the product is written straight into a fresh, unfilled tensor
    (``addmm`` with ``beta = 0`` and ``out``): ``torch.sparse.mm`` zero-fills its output and
    then copies MKL's result into it, two extra passes over ``[N, B]`` (a LoCoMo-sized block:
    3.4 -> 2.4 ms, the same floats; ``scripts/bench_kernels.py``).
    """
    if adj_t.layout == torch.sparse_coo:
        adj_t = adj_t.to_sparse_csr()
    if adj_t.dtype != x.dtype:
        adj_t = adj_t.to(x.dtype)
    if adj_t._nnz() == 0:
        return x.new_zeros(adj_t.size(0), x.size(1))
    if x.device.type == "cpu" and adj_t.layout == torch.sparse_csr and not _needs_grad(adj_t, x):
        out = x.new_empty(adj_t.size(0), x.size(1))
        return torch.addmm(out, adj_t, x, beta=0, out=out)
    return torch.sparse.mm(adj_t, x)


def adjacency_edges(adj_t: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r"""The stored entries of a sparse ``adj_t`` as an edge list ``(source, target, weight)``.

    ``adj_t`` is :math:`\mathbf{P}` (row = target :math:`i`, column = source :math:`j`), so the
    weights are the fan-normalised :math:`P_{ij}`. One pass over the :math:`E` entries.
    """
    if adj_t.layout == torch.sparse_csr:
        crow = adj_t.crow_indices()
        target = torch.repeat_interleave(
            torch.arange(adj_t.size(0), device=crow.device), crow.diff())
        return adj_t.col_indices(), target, adj_t.values()
    coo = adj_t.coalesce()
    target, source = coo.indices()
    return source, target, coo.values()


class OutEdges(NamedTuple):
    r"""A graph's edges as the frontier path reads them (:func:`frontier_edges`).

    ``source``, ``target`` and ``weight`` ``[E]`` (``None``: every weight 1); repeated edges
    add up.

    - With ``ptr`` ``[N + 1]`` the edges are sorted by source and node :math:`j`'s out-edges are
      ``ptr[j]:ptr[j + 1]``: a step reads only its frontier's edges (:func:`out_edges`).
      Without it a step finds them with one pass over the ``E`` sources.
    - With ``fan`` the weights are the raw :math:`w_{ji}` and a step divides its own edges'
      weights by their source's out-degree, which it counts among them (a step holds every
      out-edge of its active nodes): the floats of :func:`normalized_edge_weight`, without a
      pass over all ``E`` edges to count the degrees or divide. Without it the weights are
      already the propagation weights :math:`P_{ij}`.
    """

    source: Tensor
    target: Tensor
    weight: Tensor | None
    ptr: Tensor | None = None
    fan: bool = False


def out_edges(adj_t: Tensor) -> OutEdges:
    r"""The entries of a sparse ``adj_t`` (:math:`\mathbf{P}`, row = target) sorted by source,
    with their CSR pointer: the frontier path then reads only the active nodes' out-edges,
    never all ``E``.

    Sorting costs one stable sort of the ``E`` sources, so the result is kept on ``adj_t``
    itself and built once per adjacency (a graph's cached adjacency serves every batch of
    queries); it holds 20 bytes per entry with float32 weights (0.19 GiB more at 10^6 nodes
    and 15 M edges). Within a source the entries keep ``adj_t``'s order, so a step's messages add up
    in the same order as on the unsorted entries (:func:`adjacency_edges`).
    """
    cached = getattr(adj_t, "_synapse_out_edges", None)
    if cached is not None:
        return cached
    source, target, weight = adjacency_edges(adj_t)
    order = torch.argsort(source, stable=True)
    source, target, weight = source[order], target[order], weight[order]
    edges = OutEdges(source, target, weight, _row_pointer(source, adj_t.size(1)))
    adj_t._synapse_out_edges = edges  # type: ignore[attr-defined]
    return edges


def _concat_ranges(start: Tensor, count: Tensor) -> Tensor:
    """``cat([arange(s, s + c) for s, c in zip(start, count)])`` without a Python loop."""
    total = int(count.sum()) if count.numel() else 0
    offset = torch.repeat_interleave(start - (torch.cumsum(count, 0) - count), count,
                                     output_size=total)
    return offset + torch.arange(total, device=start.device)


class FrontierEdges(NamedTuple):
    """The out-edges of a step's active nodes (:func:`frontier_edges`): ``edges`` (positions in
    the :class:`OutEdges`) and their ``source``, sorted by source; the distinct active
    ``nodes`` (ascending) and each one's out-degree ``degree``."""

    edges: Tensor
    source: Tensor
    nodes: Tensor
    degree: Tensor


def frontier_edges(graph: OutEdges, nodes: Tensor, num_nodes: int) -> FrontierEdges:
    """The out-edges of the active ``nodes`` (sorted, repeats allowed), sorted by source, then
    by position in ``graph``: ranges of the CSR pointer where ``graph`` has one, otherwise one
    pass over its sources. The out-degrees are counted among them (every out-edge of an active
    node is one of them)."""
    active = torch.unique_consecutive(nodes)
    device = nodes.device
    if graph.ptr is not None:
        start, degree = graph.ptr[active], graph.ptr[active + 1] - graph.ptr[active]
        edges = _concat_ranges(start, degree)
        return FrontierEdges(edges, torch.repeat_interleave(active, degree,
                                                            output_size=edges.numel()),
                             active, degree)
    is_active = torch.zeros(num_nodes, dtype=torch.bool, device=device)
    is_active[active] = True
    edges = is_active.index_select(0, graph.source).nonzero().flatten()
    src = graph.source[edges]
    order = torch.argsort(src, stable=True)
    edges, src = edges[order], src[order]
    degree = (torch.searchsorted(src, active, right=True) - torch.searchsorted(src, active))
    return FrontierEdges(edges, src, active, degree)


def frontier_messages(
    source: Tensor, target: Tensor, weight: Tensor | None, nodes: Tensor, cols: Tensor,
    values: Tensor, num_nodes: int, num_cols: int, *, ptr: Tensor | None = None,
    fan: bool = False, selected: FrontierEdges | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    r"""One propagation step on the per-column active frontier, packed column by column.

    The activations are given sparsely, as the pairs :math:`(j, b)` with :math:`a_{jb} \neq 0`
    (``nodes``, ``cols``, ``values``). Column :math:`b`'s frontier is
    :math:`\mathcal{R}_b = \mathcal{A}_b \cup \{i : (j, i) \in E,\ j \in \mathcal{A}_b\}`;
    every node outside it has :math:`u_{ib} = 0` after the step. The frontier is returned packed
    as ``[L, B]`` matrices, slot :math:`l` of column :math:`b` holding its :math:`l`-th frontier
    node (ascending ids; ``L`` the largest frontier, shorter columns padded with node ``-1`` and
    zeros):

    .. math::
        \mathrm{spread}_{lb} = \sum_{(j, i) \in E,\ j \in \mathcal{A}_b} P_{ij}\, a_{jb},
        \qquad a_{lb} = a_{ib}, \qquad i = \mathrm{node}_{lb}

    so the step's :math:`u = S\,\mathrm{spread} + (1 - \delta)\,a` and the inhibition and
    firing run on ``[L, B]`` instead of ``[N, B]``. Cost: work in the frontier's (edge, column)
    pairs, never :math:`N \times B`; plus, without ``ptr``, one pass over the :math:`E` sources
    to find the active ones' edges (:func:`frontier_edges`).

    Args:
        source, target, weight: the graph as an edge list (:func:`adjacency_edges`), weights
            fan-normalised unless ``fan`` (``None``: all 1); repeated edges add up.
        nodes, cols, values: the non-zero activations as pairs, sorted by node.
        num_nodes, num_cols: :math:`N` and :math:`B`.
        ptr, fan: see :class:`OutEdges` (``ptr`` needs the edges sorted by source, as
            :func:`out_edges` gives them).
        selected: this step's :func:`frontier_edges`, when the caller has them already.

    Returns:
        ``(packed_nodes, spread, a)``, each ``[L, B]``.
    """
    device = values.device
    if selected is None:
        selected = frontier_edges(OutEdges(source, target, weight, ptr, fan), nodes, num_nodes)
    edges, src = selected.edges, selected.source
    if weight is None:
        edge_w = torch.ones(edges.numel(), dtype=torch.float32, device=device)
    else:
        edge_w = weight[edges]
    if fan:  # normalized_edge_weight's division, on these edges only
        degree = torch.repeat_interleave(selected.degree, selected.degree,
                                         output_size=edges.numel())
        edge_w = edge_w / degree.to(edge_w.dtype)
    if fan or weight is None:
        edge_w = edge_w.to(values.dtype)
    lo = torch.searchsorted(nodes, src)
    count = torch.searchsorted(nodes, src, right=True) - lo  # pairs of each edge's source
    msg_edge = torch.repeat_interleave(torch.arange(edges.numel(), device=device), count)
    msg_pair = _concat_ranges(lo, count)
    msg_key = cols[msg_pair] * num_nodes + target[edges[msg_edge]]
    key, inverse = torch.unique(torch.cat([msg_key, cols * num_nodes + nodes]),
                                return_inverse=True)  # sorted: column-major, ascending nodes
    spread_f = torch.zeros(key.numel(), dtype=values.dtype, device=device)
    spread_f.index_add_(0, inverse[: msg_key.numel()], edge_w[msg_edge] * values[msg_pair])
    a_f = torch.zeros_like(spread_f)
    a_f[inverse[msg_key.numel():]] = values
    col_f = key // num_nodes
    per_col = torch.bincount(col_f, minlength=num_cols)
    slot = torch.arange(key.numel(), device=device) - (torch.cumsum(per_col, 0) - per_col)[col_f]
    L = int(per_col.max()) if key.numel() else 0
    packed_nodes = torch.full((L, num_cols), -1, dtype=torch.long, device=device)
    packed_nodes[slot, col_f] = key % num_nodes
    spread = torch.zeros(L, num_cols, dtype=values.dtype, device=device)
    spread[slot, col_f] = spread_f
    a = torch.zeros_like(spread)
    a[slot, col_f] = a_f
    return packed_nodes, spread, a


def gather_mask(mask: Tensor | None, packed_nodes: Tensor) -> Tensor | None:
    """``mask`` (``[N, B]`` or ``[N, 1]``) at the packed frontier's ``(node, column)`` slots;
    padding slots are ``False``."""
    if mask is None:
        return None
    valid = packed_nodes >= 0
    rows = packed_nodes.clamp(min=0)
    out = mask[rows, 0] if mask.size(1) == 1 else mask.gather(0, rows)
    return out & valid


def _needs_grad(*xs: Tensor) -> bool:
    return torch.is_grad_enabled() and any(x.requires_grad for x in xs)


# On the CPU ``topk`` along dim 0 of an [N, B] matrix costs about 1 ns per cell while the block
# fits in cache and 3-8x more beyond (strided columns): 10^6 x 64 takes 0.49 s, 3,000 x 3,000
# 32 ms against 3.4 ms for 1,000 x 3,000. Past these sizes ``column_topk`` takes the top k of
# row-group maxima first and ``topk`` only inside the groups that can hold the answer
# (:func:`_grouped_column_topk`): 10^6 x 64 in 15 ms, 3,000 x 3,000 in 6 ms; below them (every
# LoCoMo block: at most 1,331 rows) ``topk`` itself is as fast (``scripts/bench_kernels.py``).
_GROUPED_MIN_ROWS, _GROUPED_MIN_COLS, _GROUPED_MIN_CELLS = 2_000, 16, 1 << 19


def column_topk(x: Tensor, k: int, *, sorted: bool = True) -> tuple[Tensor, Tensor]:
    """The ``k`` largest values of each column of ``x`` ``[N, B]`` and rows holding them:
    ``(values, indices)``, each ``[k, B]``, values descending with ``sorted``.

    The values are exactly ``torch.topk(x, k, dim=0, sorted=sorted)``'s. Where several rows tie
    across the ``k``-th value, which of them is returned (and the order among equal values) is
    unspecified, as for ``torch.topk``; callers that rank canonicalise (see
    :func:`~synapse_pt.retrieval.dense.masked_topk`), lateral inhibition does not depend on it.
    Large CPU blocks take the grouped path (see ``_GROUPED_MIN_ROWS``), the rest ``topk``.
    """
    n = x.size(0) if x.dim() == 2 else 0
    if (x.device.type == "cpu" and n >= _GROUPED_MIN_ROWS and x.size(1) >= _GROUPED_MIN_COLS
            and n * x.size(1) >= _GROUPED_MIN_CELLS and 64 * k <= n):
        return _grouped_column_topk(x, k, sorted)
    values, indices = torch.topk(x, k, dim=0, sorted=sorted)
    return values, indices


def _grouped_column_topk(x: Tensor, k: int, sorted: bool) -> tuple[Tensor, Tensor]:
    r""":func:`column_topk` through row groups: split the rows into :math:`G` groups of
    :math:`g \approx \sqrt{N / k}` consecutive rows (the last :math:`N \bmod g` rows apart),
    take each group's maximum (one vectorised pass), the :math:`k` groups with the largest maxima
    per column, and ``topk`` over their :math:`k g` rows plus the leftover rows.

    Exact: a value above the :math:`k`-th largest :math:`v_k` lies in a group whose maximum
    exceeds :math:`v_k`; were that group left out, each of the :math:`k` taken groups would hold
    a value above :math:`v_k` as well, :math:`k + 1` in all, more than there are. Were a group
    holding a value equal to :math:`v_k` left out, the taken groups would each hold a value of
    at least :math:`v_k`, so the candidates still hold :math:`k` of them.
    """
    n, b = x.shape
    g = max(1, round(math.sqrt(n / k)))
    full = n // g
    group_max = x[: full * g].reshape(full, g, b).amax(dim=1)  # [G, B]
    groups = torch.topk(group_max, min(k, full), dim=0, sorted=False)[1]  # [k', B]
    offsets = torch.arange(g, device=x.device).view(1, g, 1)
    rows = (groups.unsqueeze(1) * g + offsets).reshape(-1, b)  # [k' g, B]
    if full * g < n:  # the leftover rows are candidates in every column
        tail = torch.arange(full * g, n, device=x.device).unsqueeze(1).expand(-1, b)
        rows = torch.cat([rows, tail])
    values, at = torch.topk(x.gather(0, rows), k, dim=0, sorted=sorted)
    return values, rows.gather(0, at)


def row_blocks(x: Tensor) -> list[slice]:
    """Row slices of ``x`` ``[N, B]``: cache-sized blocks on the CPU, one block elsewhere.

    Elementwise chains run block by block so each block stays in cache and no ``[N, B]``
    temporary is allocated (fresh ``[N, B]`` buffers cost page faults on every step).
    """
    n = x.size(0)
    if x.device.type != "cpu" or torch.compiler.is_compiling():  # one kernel fuses the chain
        return [slice(0, n)]
    rows = max(1, _CPU_BLOCK_ELEMS // max(1, x.size(1)))
    return [slice(s, s + rows) for s in range(0, n, rows)]


def _retain_and_spread_(spread: Tensor, a: Tensor, S: Tensor, delta: Tensor) -> Tensor:
    r""":math:`u = S \cdot \text{spread} + (1 - \delta)\, a`, written into the fresh ``spread``.

    Shared by :func:`propagate` and :class:`~synapse_pt.nn.SpreadingActivation`.
    """
    retain = 1.0 - delta
    if _needs_grad(spread, a, S, delta):
        return S * spread + a * retain
    for blk in row_blocks(spread):
        spread[blk].mul_(S).addcmul_(a[blk], retain)
    return spread


def propagate(adj_t: Tensor, a: Tensor, *, S: Hyper = 0.8, delta: Hyper = 0.5) -> Tensor:
    r"""Propagation with decay (SPEC §1.2 step 3).

    .. math::
        \mathbf{U} = (1 - \delta)\,\mathbf{A} + S\, \mathbf{P} \mathbf{A}

    Args:
        adj_t (Tensor): sparse ``[N, N]`` from :func:`activation_adjacency`.
        a (Tensor): activations ``[N, B]``.
        S (float or Tensor): spreading factor, scalar or ``[B]``. (default: ``0.8``)
        delta (float or Tensor): decay, scalar or ``[B]``; ``0`` is the ``no_decay``
            ablation (full self-retention), ``1`` keeps nothing of :math:`a_i`.
            (default: ``0.5``)

    Returns:
        Tensor ``[N, B]``: :math:`u` (a new tensor).
    """
    B = a.size(1)
    S_t = _column_param(S, B, a, "S")
    delta_t = _column_param(delta, B, a, "delta")
    return _retain_and_spread_(spmm_sum(adj_t, a), a, S_t, delta_t)


def _clamp_nonneg(u: Tensor, inplace: bool) -> Tensor:
    if inplace and not _needs_grad(u):
        return u.clamp_(min=0)
    return u.clamp(min=0)


def lateral_inhibition(
    u: Tensor,
    M: int = 7,
    beta: Hyper = 0.15,
    *,
    node_mask: Tensor | None = None,
    inplace: bool = False,
    zero_outside: bool = False,
) -> Tensor:
    r"""Lateral inhibition by the top-:math:`M` nodes of each column (SPEC §1.2 step 4).

    .. math::
        \hat{u}_i = \max\Big(0,\; u_i - \beta \sum_{k \in \text{top-}M(u)}
        \mathrm{relu}(u_k - u_i)\Big)

    :math:`\mathrm{relu}(u_k - u_i)` equals :math:`(u_k - u_i)[u_k > u_i]`, so ties inhibit
    nothing and which of several tied values ``topk`` picks does not matter.

    With the top values :math:`v_1 \ge \dots \ge v_M` of a column, every row below them
    (:math:`u_i \le v_M`) has :math:`u_k \ge u_i` for all :math:`M` inhibitors, so

    .. math::
        \hat{u}_i = \max\Big(0,\; (1 + \beta M)\, u_i - \beta \sum_{k=1}^{M} v_k\Big)

    one pass instead of :math:`M`; the :math:`M` top rows themselves get the exact sum over
    the ``[M, M, B]`` differences of their values. That holds for every row when all rows are
    candidates (``node_mask`` ``None``), and when ``zero_outside`` says the rows outside
    ``node_mask`` hold 0 and :math:`v_M \ge 0` in every column (the activation layer's case).
    Elsewhere (inhibitors restricted to a neighbourhood, autograd) the sum is a loop over the
    :math:`M` top values. Both run row block by row block on the CPU, never an ``[N, B, M]``
    tensor; they agree up to float rounding (tested).

    Args:
        u (Tensor): ``[N, B]``.
        M (int): number of inhibiting nodes per column, clipped to :math:`N`; ``0`` disables.
            (default: ``7``)
        beta (float or Tensor): inhibition strength, scalar or ``[B]``; ``0`` is the ``beta0``
            ablation (then :math:`\hat{u} = \max(0, u)`). (default: ``0.15``)
        node_mask (BoolTensor, optional): ``[N, B]`` or ``[N, 1]``; nodes outside the mask are
            not candidates for the top-:math:`M` (each query is inhibited only by its own graph).
        inplace (bool): write :math:`\hat{u}` into ``u`` (ignored when autograd needs ``u``).
            (default: ``False``)
        zero_outside (bool): ``u`` is 0 at every row outside ``node_mask`` (lets the one-pass
            form run with a mask). (default: ``False``)

    Returns:
        Tensor ``[N, B]``: :math:`\hat{u}`.
    """
    B = u.size(1)
    M = min(int(M), u.size(0))
    if M <= 0 or (isinstance(beta, (int, float)) and beta == 0):
        return _clamp_nonneg(u, inplace)  # equal to the general path with beta = 0
    beta_t = _column_param(beta, B, u, "beta")
    cand = u if node_mask is None else u.masked_fill(~node_mask, float("-inf"))
    # relu(-inf - u) = 0 for finite u: a masked-out candidate inhibits nobody.
    if (node_mask is None or zero_outside) and not _needs_grad(u, beta_t):
        top, rows = column_topk(cand, M)  # [M, B], descending
        if node_mask is None or bool((top[-1] >= 0).all()):
            return _inhibit_closed_form(u, top, rows, beta_t, inplace)
    else:
        top = column_topk(cand, M, sorted=False)[0]  # [M, B]
    if _needs_grad(u, beta_t):
        acc = torch.zeros_like(u)
        for v_k in top:
            acc = acc + torch.relu(v_k - u)
        return torch.clamp(u - beta_t * acc, min=0)
    out = u if inplace else u.clone()
    blocks = row_blocks(out)
    rows = blocks[0].stop - blocks[0].start if blocks else 0
    acc = out.new_empty(min(rows, out.size(0)), B)
    tmp = torch.empty_like(acc)
    for blk in blocks:
        u_b = out[blk]
        acc_b, tmp_b = acc[: u_b.size(0)], tmp[: u_b.size(0)]
        acc_b.zero_()
        for v_k in top:
            torch.sub(v_k, u_b, out=tmp_b)
            acc_b.add_(tmp_b.clamp_(min=0))
        u_b.sub_(acc_b.mul_(beta_t)).clamp_(min=0)
    return out


def _inhibit_closed_form(u: Tensor, top: Tensor, rows: Tensor, beta: Tensor,
                         inplace: bool) -> Tensor:
    r""":func:`lateral_inhibition` when no row outside the top :math:`M` exceeds the
    :math:`M`-th value: one pass :math:`\max(0, (1 + \beta M) u - \beta \sum_k v_k)` over
    the rows, then the exact value at the top rows ``rows`` ``[M, B]`` (values ``top``)."""
    out = u if inplace else u.clone()
    _inhibit_rows_(out, *_closed_form_terms(top, beta))
    out.scatter_(0, rows, _inhibit_top(top, beta))
    return out


def _closed_form_terms(top: Tensor, beta: Tensor) -> tuple[Tensor, Tensor]:
    """``(1 + beta M, beta sum_k v_k)`` of the one-pass form, from the top values ``[M, B]``."""
    return 1.0 + beta * top.size(0), beta * top.sum(dim=0)


def _inhibit_rows_(out: Tensor, gain: Tensor, offset: Tensor) -> Tensor:
    r"""The one-pass form :math:`\max(0, \text{gain}\, u - \text{offset})`, in place."""
    for blk in row_blocks(out):
        out[blk].mul_(gain).sub_(offset).clamp_(min=0)
    return out


def _inhibit_top(top: Tensor, beta: Tensor) -> Tensor:
    """The top rows' exact values ``v_r - beta sum_k relu(v_k - v_r)``, from the ``[M, M, B]``
    differences of the top values ``top`` ``[M, B]``."""
    pressure = (top.unsqueeze(0) - top.unsqueeze(1)).clamp_(min=0).sum(dim=1)  # [M, B]
    return (top - beta * pressure).clamp_(min=0)


def _inhibit_fire_rows_(u: Tensor, gain: Tensor, offset: Tensor, gamma: Tensor, theta: Tensor,
                        fire_zero: bool) -> Tensor:
    """The one-pass inhibition of every row, then firing, in place on ``u``: the body of
    :func:`inhibit_and_fire`'s compiled kernel (the same two functions as the eager stages)."""
    return fire(_inhibit_rows_(u, gain, offset), gamma, theta, fire_zero, inplace=True)


_FUSED_KERNELS: dict[str, Callable[..., Tensor]] = {}


def _fused_kernel(device: torch.device) -> Callable[..., Tensor]:
    """:func:`_inhibit_fire_rows_` compiled once per device type (dynamic shapes: one kernel
    for every block size)."""
    if device.type not in _FUSED_KERNELS:
        _FUSED_KERNELS[device.type] = torch.compile(_inhibit_fire_rows_, dynamic=True)
    return _FUSED_KERNELS[device.type]


def inhibit_and_fire(u: Tensor, M: int = 7, beta: Hyper = 0.15, gamma: Hyper = 5.0,
                     theta: Hyper = 0.5, fire_zero: bool = False, *,
                     compiled: bool = True) -> Tensor:
    r""":func:`fire` of :func:`lateral_inhibition` for every column of ``u`` ``[N, B]`` (all
    rows candidates, no node mask), in place on ``u``:

    .. math::
        a_i = \sigma\big(\gamma (\hat{u}_i - \theta)\big)\,[\hat{u}_i > 0],\qquad
        \hat{u}_i = \max\big(0,\; (1 + \beta M)\, u_i - \beta \textstyle\sum_{k=1}^{M} v_k\big)

    below the top :math:`M` values :math:`v_k` of each column, and the exact inhibition at the
    :math:`M` top rows (see :func:`lateral_inhibition`). With ``compiled`` the row pass and the
    firing run as one kernel (``torch.compile``: one read and one write of ``u`` instead of eight
    eager passes; the first call compiles, seconds); the top rows are fired apart, ``[M, B]``.
    Results equal the two eager stages up to float rounding (tested). Not for autograd.
    """
    B = u.size(1)
    M = min(int(M), u.size(0))
    beta_t = _column_param(beta, B, u, "beta")
    gamma_t = _column_param(gamma, B, u, "gamma")
    theta_t = _column_param(theta, B, u, "theta")
    if _needs_grad(u, beta_t, gamma_t, theta_t):
        raise ValueError("inhibit_and_fire runs in place without autograd; use "
                         "lateral_inhibition and fire")
    if M <= 0:
        return fire(u.clamp_(min=0), gamma_t, theta_t, fire_zero, inplace=True)
    top, rows = column_topk(u, M)
    gain, offset = _closed_form_terms(top, beta_t)
    if compiled:  # [B] parameters whatever was given: one compiled graph for every call
        gain, gamma_c, theta_c = (t.expand(B).contiguous() for t in (gain, gamma_t, theta_t))
        a = _fused_kernel(u.device)(u, gain, offset, gamma_c, theta_c, fire_zero)
    else:
        a = _inhibit_fire_rows_(u, gain, offset, gamma_t, theta_t, fire_zero)
    return a.scatter_(0, rows, fire(_inhibit_top(top, beta_t), gamma_t, theta_t, fire_zero))


def fire(
    uhat: Tensor,
    gamma: Hyper = 5.0,
    theta: Hyper = 0.5,
    fire_zero: bool = False,
    *,
    inplace: bool = False,
) -> Tensor:
    r"""Sigmoid firing (SPEC §1.2 step 5).

    .. math::
        a_i = \sigma\big(\gamma (\hat{u}_i - \theta)\big) \cdot [\hat{u}_i > 0]

    The indicator is the default reading (a node with no input stays silent, otherwise
    :math:`\sigma(-\gamma\theta) > 0` would hand every node energy); ``fire_zero=True`` drops it
    (the literal formula).

    Args:
        uhat (Tensor): ``[N, B]``, non-negative.
        gamma (float or Tensor): gain, scalar or ``[B]``. (default: ``5.0``)
        theta (float or Tensor): threshold, scalar or ``[B]``. (default: ``0.5``)
        fire_zero (bool): let nodes with :math:`\hat{u}_i = 0` fire too. (default: ``False``)
        inplace (bool): write the result into ``uhat`` (ignored when autograd needs it).
            (default: ``False``)

    Returns:
        Tensor ``[N, B]``.
    """
    B = uhat.size(1)
    gamma_t = _column_param(gamma, B, uhat, "gamma")
    theta_t = _column_param(theta, B, uhat, "theta")
    if _needs_grad(uhat, gamma_t, theta_t):
        a = torch.sigmoid(gamma_t * (uhat - theta_t))
        return a if fire_zero else a.masked_fill(uhat <= 0, 0.0)
    out = uhat if inplace else torch.empty_like(uhat)
    for blk in row_blocks(uhat):
        x_b, o_b = uhat[blk], out[blk]
        silent = None if fire_zero else x_b <= 0
        torch.sub(x_b, theta_t, out=o_b).mul_(gamma_t).sigmoid_()
        if silent is not None:
            o_b.masked_fill_(silent, 0.0)
    return out


def _apply_node_mask(x: Tensor, outside: Tensor | None) -> Tensor:
    """Zero the nodes outside each query's graph (in place on a fresh ``x`` when allowed)."""
    if outside is None:
        return x
    if _needs_grad(x):
        return x.masked_fill(outside, 0.0)
    return x.masked_fill_(outside, 0.0)


def _check_node_mask(node_mask: Tensor | None, a: Tensor) -> Tensor | None:
    if node_mask is None:
        return None
    if node_mask.dtype != torch.bool:
        raise ValueError(f"node_mask must be bool, got {node_mask.dtype}")
    if node_mask.dim() == 1:
        node_mask = node_mask.unsqueeze(1)
    N, B = a.shape
    if node_mask.dim() != 2 or node_mask.size(0) != N or node_mask.size(1) not in (1, B):
        raise ValueError(
            f"node_mask has shape {tuple(node_mask.shape)}; expected [N, B] or [N, 1] with "
            f"N = {N}, B = {B}"
        )
    return node_mask.to(a.device)


def activation_step(
    adj_t: Tensor,
    a: Tensor,
    *,
    S: Hyper = 0.8,
    delta: Hyper = 0.5,
    beta: Hyper = 0.15,
    M: int = 7,
    gamma: Hyper = 5.0,
    theta: Hyper = 0.5,
    fire_zero: bool = False,
    node_mask: Tensor | None = None,
    inhibitor_mask: Tensor | None = None,
    potential: list[Tensor] | None = None,
) -> Tensor:
    r"""One step :math:`a(t) \to a(t+1)`: :func:`propagate`, :func:`lateral_inhibition`,
    :func:`fire`, with nodes outside ``node_mask`` set to 0 before inhibition and after firing
    (the layer :class:`~synapse_pt.nn.ActivationDynamics` with ``T = 1``: one implementation).

    ``node_mask`` (and ``inhibitor_mask``) must already be bool ``[N, B]`` or ``[N, 1]`` tensors
    on ``a``'s device. ``inhibitor_mask`` further restricts which nodes may be among the top-M
    inhibitors (the "anchors' neighbourhood" reading, SPEC §1.5); ``M = 0`` skips inhibition.
    When ``potential`` is a list, the step appends a copy of :math:`\hat{u}` (the pre-sigmoid
    potential) to it. Returns a new tensor (``a`` is not modified).
    """
    from synapse_pt.nn.activation import ActivationDynamics  # the layer imports this module

    layer = ActivationDynamics(M=M, fire_zero=fire_zero, T=1)
    out = layer(a, adj_t, normalized=True, node_mask=node_mask, inhibitor_mask=inhibitor_mask,
                S=S, delta=delta, beta=beta, gamma=gamma, theta=theta,
                return_potential=potential is not None)
    if potential is None:
        return out
    a_next, uhat = out
    potential.append(uhat)
    return a_next


INHIBITION_SCHEDULES = ("every_step", "last_step")


def activation_dynamics(
    adj_t: Tensor,
    a0: Tensor,
    *,
    S: Hyper = 0.8,
    delta: Hyper = 0.5,
    beta: Hyper = 0.15,
    M: int = 7,
    gamma: Hyper = 5.0,
    theta: Hyper = 0.5,
    T: int = 3,
    fire_zero: bool = False,
    node_mask: Tensor | None = None,
    inhibition: str = "every_step",
    inhibitor_mask: Tensor | None = None,
    return_potential: bool = False,
    compile: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    r""":math:`T` steps of the dynamics from a cached :func:`activation_adjacency`, run by the
    layer :class:`~synapse_pt.nn.ActivationDynamics` (the one implementation of the loop; each
    step is :func:`activation_step`'s maths).

    Same arguments and result as :func:`spreading_activation`, with ``adj_t`` in place of
    ``(edge_index, edge_weight, num_nodes, fan)``, plus the readings of SPEC §1.5:

    Args:
        inhibition (str): ``"every_step"`` (default, the literal reading: inhibit after every
            propagation) or ``"last_step"`` (steps :math:`1 \dots T-1` propagate and fire
            without inhibition; only the last one inhibits).
        inhibitor_mask (BoolTensor, optional): ``[N, B]``: the nodes that may be among a column's
            top-:math:`M` inhibitors (default: every node of the query's graph).
        return_potential (bool): also return :math:`\hat{u}` of the last step, the pre-sigmoid
            potential (``a0`` itself when ``T = 0``).
        compile (bool): inhibition and firing as one compiled kernel where no mask restricts
            the inhibitors (:class:`~synapse_pt.nn.ActivationDynamics` ``compile``).

    Returns:
        Tensor ``[N, B]``: :math:`a(T)`; with ``return_potential`` the pair
        ``(a(T), uhat(T))``.
    """
    from synapse_pt.nn.activation import ActivationDynamics  # the layer imports this module

    if T < 0:
        raise ValueError(f"T must be >= 0, got {T}")
    squeeze = a0.dim() == 1
    a = a0.unsqueeze(1) if squeeze else a0
    if a.dim() != 2 or a.size(0) != adj_t.size(0):
        raise ValueError(
            f"a0 must have shape [N, B] with N = {adj_t.size(0)}, got {tuple(a0.shape)}"
        )
    if T == 0:
        return (a0, a0) if return_potential else a0
    layer = ActivationDynamics(M=M, fire_zero=fire_zero, T=T, inhibition_schedule=inhibition,
                               compile=compile)
    out = layer(a, adj_t, node_mask=node_mask, inhibitor_mask=inhibitor_mask, S=S, delta=delta,
                beta=beta, gamma=gamma, theta=theta, normalized=True,
                return_potential=return_potential)
    if not squeeze:
        return out
    if return_potential:
        return out[0].squeeze(1), out[1].squeeze(1)
    return out.squeeze(1)


def spreading_activation(
    edge_index: Tensor,
    edge_weight: Tensor | None,
    a0: Tensor,
    *,
    num_nodes: int,
    S: Hyper = 0.8,
    delta: Hyper = 0.5,
    beta: Hyper = 0.15,
    M: int = 7,
    gamma: Hyper = 5.0,
    theta: Hyper = 0.5,
    T: int = 3,
    fan: bool = True,
    fire_zero: bool = False,
    node_mask: Tensor | None = None,
    compile: bool = False,
) -> Tensor:
    r"""SYNAPSE spreading activation with lateral inhibition and firing (SPEC §1.2 steps 3-5).

    Runs :math:`T` steps of

    .. math::
        u_i &= (1 - \delta)\, a_i + \sum_{j \in \mathcal{N}_{in}(i)}
               S \, \frac{w_{ji}}{\mathrm{fan}(j)} \, a_j

        \hat{u}_i &= \max\Big(0,\; u_i - \beta \sum_{k \in \text{top-}M(u)}
                     (u_k - u_i)\, [u_k > u_i]\Big)

        a_i &= \sigma\big(\gamma (\hat{u}_i - \theta)\big)\,[\hat{u}_i > 0]

    for all :math:`B` columns at once (sparse matmul; no ``[E, B]`` tensor).

    Args:
        edge_index (LongTensor): ``[2, E]``, source :math:`j` -> target :math:`i`.
        edge_weight (Tensor, optional): ``[E]`` weights :math:`w_{ji}` (``None`` = all 1).
        a0 (Tensor): initial activations ``[N, B]`` (a ``[N]`` vector is one column).
        num_nodes (int): :math:`N`.
        S (float or Tensor): spreading factor, scalar or ``[B]``. (default: ``0.8``)
        delta (float or Tensor): decay; ``0`` = ``no_decay``. (default: ``0.5``)
        beta (float or Tensor): inhibition strength; ``0`` = ``beta0``. (default: ``0.15``)
        M (int): inhibiting top nodes per column, clipped to :math:`N`. (default: ``7``)
        gamma (float or Tensor): firing gain. (default: ``5.0``)
        theta (float or Tensor): firing threshold. (default: ``0.5``)
        T (int): number of steps; ``0`` returns ``a0`` itself. (default: ``3``)
        fan (bool): divide by the source's out-degree; ``False`` = ``no_fan``.
            (default: ``True``)
        fire_zero (bool): literal firing, nodes with :math:`\hat{u}_i = 0` fire
            :math:`\sigma(-\gamma\theta)`. (default: ``False``)
        node_mask (BoolTensor, optional): ``[N, B]`` or ``[N, 1]``: the nodes of each query's
            own graph. Outside it :math:`u` and :math:`a` are kept at 0 after every step and
            nodes do not take part in inhibition (needed with ``fire_zero=True`` when many
            conversations are batched in one graph). ``a0`` is used as given.
        compile (bool): inhibition and firing as one compiled kernel where no node mask is
            given (:class:`~synapse_pt.nn.ActivationDynamics` ``compile``; the first call
            compiles). (default: ``False``)

    Returns:
        Tensor ``[N, B]``: :math:`a(T)`.
    """
    from synapse_pt.nn.activation import ActivationDynamics  # the layer imports this module

    if T == 0:
        return a0
    squeeze = a0.dim() == 1
    a = a0.unsqueeze(1) if squeeze else a0
    if a.dim() != 2 or a.size(0) != num_nodes:
        raise ValueError(f"a0 must have shape [N, B] with N = {num_nodes}, got "
                         f"{tuple(a0.shape)}")
    # The layer builds the sparse adjacency only if it propagates densely: on a sparse frontier
    # it reads the edge list directly.
    layer = ActivationDynamics(M=M, T=T, fan=fan, fire_zero=fire_zero, compile=compile)
    out = layer(a, edge_index, edge_weight, node_mask=node_mask, S=S, delta=delta, beta=beta,
                gamma=gamma, theta=theta)
    return out.squeeze(1) if squeeze else out
