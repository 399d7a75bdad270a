r"""Sparse graph kernels: the fan-normalised adjacency, sparse products, frontier edge lists and
column top-k.

The general tensor kernels that the activation dynamics (:class:`~synapse_pt.nn.ActivationDynamics`
and its storage, :mod:`synapse_pt.nn.frontier`), the graph (PageRank) and retrieval (dense top-k,
scoring) build on. Edges run from a source :math:`j` to a target :math:`i` (``edge_index[0] = j``,
``edge_index[1] = i``, PyG's ``source_to_target`` flow); the propagation matrix is

.. math::
    P_{ij} = \sum_{(j, i) \in E} \frac{w_{ji}}{\mathrm{fan}(j)}

stored transposed as PyG's ``adj_t`` (row = target, column = source), built once per graph
(:func:`activation_adjacency`) and reused by every batch of queries.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = [
    "FrontierEdges",
    "OutEdges",
    "activation_adjacency",
    "adjacency_edges",
    "column_topk",
    "csr_by_row",
    "fan_out",
    "frontier_edges",
    "frontier_messages",
    "gather_mask",
    "normalized_edge_weight",
    "out_edges",
    "row_blocks",
    "spmm_sum",
]

# On the CPU the elementwise chains of a step (the spread update, the passes of lateral
# inhibition, firing) run over row blocks of about this many elements (256 KiB of float32), so a
# block stays in cache and no [N, B] temporaries are allocated (~5x faster than whole-matrix
# passes on a 2-core EPYC). On CUDA whole-matrix kernels are bandwidth-bound: one block.
_CPU_BLOCK_ELEMS = 1 << 16


def row_blocks(x: Tensor) -> list[slice]:
    """Row slices of ``x`` ``[N, B]``: cache-sized blocks on the CPU, one block elsewhere."""
    n = x.size(0)
    if x.device.type != "cpu":
        return [slice(0, n)]
    rows = max(1, _CPU_BLOCK_ELEMS // max(1, x.size(1)))
    return [slice(s, s + rows) for s in range(0, n, rows)]


def check_edge_index(edge_index: Tensor, num_nodes: int) -> None:
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
    check_edge_index(edge_index, num_nodes)
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

    Never materialises an ``[E, B]`` message tensor; always returns a fresh tensor.

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
    if x.device.type == "cpu" and adj_t.layout == torch.sparse_csr and not needs_grad(adj_t, x):
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
    graph: OutEdges, nodes: Tensor, cols: Tensor, values: Tensor, num_nodes: int,
    num_cols: int, *, selected: FrontierEdges | None = None,
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
        graph: the edge list (:class:`OutEdges`: ``source``, ``target`` and ``weight`` as
            :func:`adjacency_edges` or :func:`out_edges` give them, weights fan-normalised unless
            ``fan``, ``None``: all 1; repeated edges add up; ``ptr`` needs the edges sorted by
            source, as :func:`out_edges` gives them).
        nodes, cols, values: the non-zero activations as pairs, sorted by node.
        num_nodes, num_cols: :math:`N` and :math:`B`.
        selected: this step's :func:`frontier_edges`, when the caller has them already.

    Returns:
        ``(packed_nodes, spread, a)``, each ``[L, B]``.
    """
    device = values.device
    target, weight, fan = graph.target, graph.weight, graph.fan
    if selected is None:
        selected = frontier_edges(graph, nodes, num_nodes)
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


def needs_grad(*xs: Tensor) -> bool:
    """Whether autograd tracks any of ``xs`` (then the kernels run out of place)."""
    return torch.is_grad_enabled() and any(x.requires_grad for x in xs)


# On the CPU ``topk`` along dim 0 of an [N, B] matrix treats one column at a time: it copies the
# strided column out and keeps a heap of k, about 1 ns per cell in cache on an idle 2-core EPYC
# and 3-8x more beyond (10^6 x 64: 0.49 s), plus about 1 us per column, while a vectorised
# reduction along dim 0 (``amax``) reads a cell in about a tenth of that. From these sizes on,
# ``column_topk`` finds the top k through row-group maxima and vectorised rounds
# (:func:`_candidate_column_topk`): 10^6 x 64 and the LoCoMo sweep's blocks (~1,300 x ~3,000)
# alike; below them ``topk`` itself is as fast (``scripts/bench_kernels.py``).
_CANDIDATE_MIN_ROWS, _CANDIDATE_MIN_CELLS = 256, 1 << 19
# Blocks of fewer rows (every LoCoMo block) keep ``torch.topk``'s own answer where the answer is
# not unique: an unsorted request keeps its order of values (the general inhibition loop sums
# them in that order) and a tie across the k-th value its choice of rows, as the recorded results
# hold them. Larger blocks return the values sorted, and any of the tied rows.
_TOPK_CHOICE_ROWS = 2_000


def column_topk(x: Tensor, k: int, *, sorted: bool = True) -> tuple[Tensor, Tensor]:
    """The ``k`` largest values of each column of ``x`` ``[N, B]`` and rows holding them:
    ``(values, indices)``, each ``[k, B]``, values descending with ``sorted``.

    The values are exactly ``torch.topk(x, k, dim=0, sorted=sorted)``'s, and so is the set of
    rows wherever no row past the ``k``-th ties with it. Where one does, blocks of fewer than
    ``_TOPK_CHOICE_ROWS`` rows return ``torch.topk``'s choice of the tied rows (those columns are
    handed to it), larger ones any of them. The order of rows among equal values inside the top
    may differ from ``topk``'s, as it may between two ``topk`` implementations; callers that rank
    canonicalise it (see :func:`~synapse_pt.retrieval.dense.masked_topk`), and lateral
    inhibition gives tied rows the same value. Large CPU blocks take the candidate path (see
    ``_CANDIDATE_MIN_ROWS``), the rest ``topk``.
    """
    n = x.size(0) if x.dim() == 2 else 0
    if (x.device.type == "cpu" and k > 0 and 8 * k <= n and n >= _CANDIDATE_MIN_ROWS
            and n * x.size(1) >= _CANDIDATE_MIN_CELLS
            and x.dtype in (torch.float32, torch.float64)  # row numbers exact in its floats
            and (sorted or n >= _TOPK_CHOICE_ROWS) and not needs_grad(x)):
        return _candidate_column_topk(x.contiguous(), k)
    values, indices = torch.topk(x, k, dim=0, sorted=sorted)
    return values, indices


def _largest(y: Tensor, k: int) -> tuple[Tensor, Tensor]:
    r"""The ``k`` largest values of each column of ``y`` ``[R, B]`` in descending order and the
    rows holding them; ``y`` may be overwritten.

    Wide and short (``B`` at least ``4 R``, where ``topk``'s cost per column dominates): ``k``
    rounds of vectorised passes. A round takes each column's maximum :math:`v` (``amax``), the
    last row holding it (the largest of :math:`(r + 1)[y_r \ge v]`, a float product: boolean
    passes cost about 3x a float one here) and sets that cell to :math:`-\infty`, so equal
    values are taken one at a time. Exact while every round's maximum exceeds :math:`-\infty`
    (the caller checks) and ``y`` holds no NaN. Otherwise ``torch.topk``.
    """
    rows, b = y.shape
    if b < 4 * rows:
        values, at = torch.topk(y, k, dim=0)
        return values, at
    place = torch.arange(1, rows + 1, dtype=y.dtype, device=y.device).unsqueeze(1)
    hit, last = torch.empty_like(y), y.new_empty(b)
    values = y.new_empty(k, b)
    at = torch.empty(k, b, dtype=torch.long, device=y.device)
    for r in range(k):
        torch.amax(y, dim=0, out=values[r])
        torch.ge(y, values[r], out=hit)
        torch.amax(hit.mul_(place), dim=0, out=last)
        row = last.sub_(1).long()
        at[r] = row
        y.scatter_(0, row.unsqueeze(0), float("-inf"))
    return values, at


def _candidate_column_topk(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    r""":func:`column_topk` through row groups, with vectorised passes only.

    Split the rows into :math:`G` groups of :math:`g \approx \sqrt{N / k}` consecutive rows
    (the last :math:`N \bmod g` rows apart, candidates in every column), take each group's
    maximum (one ``amax`` pass over ``x``), the :math:`k` groups with the largest maxima in each
    column, and the :math:`k` largest values among their :math:`k g` rows and the leftover rows
    (both selections by :func:`_largest`, over :math:`G` and :math:`k g` rows instead of
    :math:`N`).

    Exact: a value above the :math:`k`-th largest :math:`v_k` lies in a group whose maximum
    exceeds :math:`v_k`; were that group left out, each of the :math:`k` taken groups would hold
    a value above :math:`v_k` as well, :math:`k + 1` in all, more than there are. A left-out
    group may hold a value equal to :math:`v_k` only if its maximum is :math:`v_k`. So where
    no candidate past the :math:`k`-th and no left-out group's maximum equals :math:`v_k`, the
    top :math:`k` rows are unique and these are they. Columns with fewer than :math:`k` groups
    above :math:`-\infty` and blocks holding NaN are answered by ``torch.topk``, and so are the
    columns with a tie across the :math:`k`-th value in blocks of fewer than
    ``_TOPK_CHOICE_ROWS`` rows (its choice among the tied rows is then the one returned).
    """
    n, b = x.shape
    g = max(1, round(math.sqrt(n / k)))
    full = n // g
    if full < k:
        return torch.topk(x, k, dim=0)
    group_max = x[: full * g].view(full, g, b).amax(dim=1)  # [G, B]
    tail = x[full * g:]
    if bool(group_max.amax().isnan()) or (tail.numel() and bool(tail.amax().isnan())):
        return torch.topk(x, k, dim=0)  # NaN counts as the largest value in topk
    group_top, groups = _largest(group_max.clone(), k)
    # the candidates [k g + leftover, B]: the taken groups' rows, then the leftover rows
    column = torch.arange(b, device=x.device)
    within = torch.arange(g, device=x.device).mul_(b).view(1, g, 1)
    flat = (groups * (g * b) + column).unsqueeze(1) + within  # [k, g, B] positions in x
    cand = x.new_empty(k * g + tail.size(0), b)
    torch.index_select(x.view(-1), 0, flat.view(-1), out=cand[: k * g].view(-1))
    cand[k * g:] = tail
    values, at = _largest(cand.clone(), k)
    kth = values[-1]
    redo = group_top[-1] == float("-inf")  # fewer than k groups above -inf
    if n < _TOPK_CHOICE_ROWS:
        # a tie across the k-th value: another candidate, or a left-out group's maximum, equals it
        redo |= torch.ge(cand, kth, out=cand).sum(dim=0) > k
        redo |= (torch.ge(group_max, kth, out=group_max).sum(dim=0)
                 > torch.ge(group_top, kth, out=group_top).sum(dim=0))
    taken = at < k * g  # a candidate of a taken group: its row from the group's index
    indices = torch.where(taken, groups.gather(0, torch.where(taken, at // g, 0)) * g + at % g,
                          at - k * g + full * g)
    cols = redo.nonzero().flatten()
    if cols.numel():
        v_t, i_t = torch.topk(x.index_select(1, cols), k, dim=0)
        values[:, cols], indices[:, cols] = v_t, i_t
    return values, indices
