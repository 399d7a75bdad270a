r"""Weighted PageRank by batched power iteration, in torch (SPEC §1.1 maintenance, §1.2 step 6).

For a batch of graphs (``batch[i]`` = graph of node :math:`i`, :math:`n_g` nodes in graph
:math:`g`) the scores :math:`\pi` solve

.. math::
    \pi_i = \frac{1 - d}{n_{g(i)}} + d \Big( \sum_{j \to i} \frac{w_{ji}}{W_j} \pi_j
            + \frac{1}{n_{g(i)}} \sum_{j \in g(i),\, W_j = 0} \pi_j \Big),
    \qquad W_j = \sum_{j \to k} w_{jk}

i.e. the transition probability from :math:`j` to :math:`i` is :math:`w_{ji} / W_j`; a dangling
node (:math:`W_j = 0`, no out-edge or only zero-weight ones) hands its mass uniformly to its own
graph, and the teleport is uniform within each graph. Each graph's scores sum to 1. This is
networkx's ``pagerank(G, alpha=d, weight="weight")`` per graph, run for all graphs and on any
device at once (PyG's helpers run on CPU or invert a dense matrix).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.utils import scatter

from ..nn.sparse import csr_by_row

__all__ = ["pagerank", "rescale_unit_interval"]


def _num_graphs(batch: Tensor) -> int:
    return int(batch.max()) + 1 if batch.numel() > 0 else 0


def pagerank(
    edge_index: Tensor,
    edge_weight: Tensor | None,
    num_nodes: int,
    *,
    damping: float = 0.85,
    batch: Tensor | None = None,
    max_iter: int = 100,
    tol: float = 1e-6,
    init: Tensor | None = None,
) -> Tensor:
    r"""Weighted PageRank of every node, per graph of ``batch``.

    Args:
        edge_index (LongTensor): ``[2, E]`` (source :math:`j`, target :math:`i`); edges should
            stay inside their graph (an edge across graphs moves mass across them).
        edge_weight (Tensor, optional): ``[E]`` non-negative weights :math:`w_{ji}`
            (``None`` = all 1). Repeated edges add up.
        num_nodes (int): :math:`N`.
        damping (float): :math:`d`, probability of following an edge. (default: ``0.85``)
        batch (LongTensor, optional): ``[N]`` graph id of each node; ``None`` = one graph.
        max_iter (int): power-iteration cap. (default: ``100``)
        tol (float): stop when every graph's L1 change of :math:`\pi` is below ``tol``.
            (default: ``1e-6``)
        init (Tensor, optional): ``[N]`` starting vector (warm start, e.g. the scores cached
            before the graph last changed), renormalised to sum 1 per graph; a graph whose
            entries sum to 0 starts uniform. Same fixed point and stopping rule, far fewer
            iterations after a small change. (default: uniform)

    Returns:
        Tensor ``[N]`` in ``edge_weight``'s floating dtype (float32 when ``None``); each graph's
        scores sum to 1.
    """
    if not 0.0 <= damping <= 1.0:
        raise ValueError(f"damping must lie in [0, 1], got {damping}")
    device = edge_index.device
    if edge_weight is None:
        edge_weight = torch.ones(edge_index.size(1), device=device)
    elif not edge_weight.is_floating_point():
        edge_weight = edge_weight.float()
    dtype = edge_weight.dtype
    if num_nodes == 0:
        return torch.zeros(0, dtype=dtype, device=device)
    if edge_index.numel() > 0 and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise ValueError(f"edge_index holds node ids outside [0, {num_nodes})")
    if batch is None:
        batch = torch.zeros(num_nodes, dtype=torch.long, device=device)
    elif batch.numel() != num_nodes:
        raise ValueError(f"batch has {batch.numel()} entries, expected num_nodes = {num_nodes}")
    batch = batch.to(device=device, dtype=torch.long)
    num_graphs = _num_graphs(batch)

    trans, dangling = _transition(edge_index, edge_weight, num_nodes)
    n_g = torch.bincount(batch, minlength=num_graphs).to(dtype)  # [G]
    inv_n = (1.0 / n_g.clamp_min(1))[batch]  # [N] 1 / n_{g(i)}
    pr = inv_n.clone() if init is None else _warm_start(init, inv_n, batch, num_graphs)
    if num_graphs == 1:  # one graph: plain sums instead of per-graph scatters
        return _iterate_one(trans, pr, inv_n, dangling, damping, max_iter, tol)
    return _iterate_batched(trans, pr, inv_n, dangling, batch, damping, max_iter, tol)


def _transition(edge_index: Tensor, edge_weight: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    r"""The transposed transition matrix :math:`P^\top_{ij} = w_{ji} / W_j` (row = target) as
    sparse CSR, and the ``[N]`` bool mask of dangling nodes (:math:`W_j = 0`)."""
    src, dst = edge_index[0], edge_index[1]
    out_weight = scatter(edge_weight, src, dim=0, dim_size=num_nodes, reduce="sum")
    prob = edge_weight / out_weight[src].clamp_min(torch.finfo(edge_weight.dtype).tiny)
    return csr_by_row(dst, src, prob, num_nodes), out_weight == 0


def _warm_start(init: Tensor, inv_n: Tensor, batch: Tensor, num_graphs: int) -> Tensor:
    """``init`` clamped at 0 and renormalised to sum 1 per graph; a graph whose entries sum to
    0 starts uniform (``inv_n``)."""
    num_nodes, dtype = inv_n.numel(), inv_n.dtype
    if init.shape != (num_nodes,):
        raise ValueError(f"init has shape {tuple(init.shape)}, expected [{num_nodes}]")
    start = init.to(device=inv_n.device, dtype=dtype).clamp_min(0)
    mass = scatter(start, batch, dim=0, dim_size=num_graphs, reduce="sum")[batch]
    return torch.where(mass > 0, start / mass.clamp_min(torch.finfo(dtype).tiny), inv_n.clone())


def _iterate_one(trans: Tensor, pr: Tensor, inv_n: Tensor, dangling: Tensor, damping: float,
                 max_iter: int, tol: float) -> Tensor:
    """Power iteration of one graph from ``pr``: until the L1 change is below ``tol`` or
    ``max_iter`` steps."""
    has_edges = trans._nnz() > 0
    teleport, dangle = (1.0 - damping) * inv_n, damping * inv_n
    dangling_f = dangling.to(pr.dtype)
    for _ in range(max_iter):
        spread = torch.mv(trans, pr) if has_edges else 0.0
        new = teleport + damping * spread + dangle * torch.dot(pr, dangling_f)
        err = float((new - pr).abs().sum())
        pr = new
        if err < tol:
            break
    return pr


def _iterate_batched(trans: Tensor, pr: Tensor, inv_n: Tensor, dangling: Tensor, batch: Tensor,
                     damping: float, max_iter: int, tol: float) -> Tensor:
    """Power iteration of every graph of ``batch`` at once from ``pr``, a dangling node's mass
    spread within its own graph: until every graph's L1 change is below ``tol`` or ``max_iter``
    steps."""
    has_edges = trans._nnz() > 0
    num_graphs = _num_graphs(batch)
    for _ in range(max_iter):
        spread = torch.sparse.mm(trans, pr.unsqueeze(1)).squeeze(1) if has_edges else 0.0
        lost = scatter(pr * dangling, batch, dim=0, dim_size=num_graphs, reduce="sum")
        new = (1.0 - damping) * inv_n + damping * (spread + lost[batch] * inv_n)
        err = scatter((new - pr).abs(), batch, dim=0, dim_size=num_graphs, reduce="sum")
        pr = new
        if bool((err < tol).all()):
            break
    return pr


def _per_graph(pr: Tensor, batch: Tensor | None, num_graphs: int | None, reduce: str) -> Tensor:
    """``[N]``: the ``reduce`` (min, max) of ``pr`` over each node's graph."""
    if batch is None:
        batch = torch.zeros(pr.numel(), dtype=torch.long, device=pr.device)
    batch = batch.to(device=pr.device, dtype=torch.long)
    if num_graphs is None:
        num_graphs = _num_graphs(batch)
    return scatter(pr, batch, dim=0, dim_size=num_graphs, reduce=reduce)[batch]


def rescale_unit_interval(
    pr: Tensor,
    batch: Tensor | None = None,
    num_graphs: int | None = None,
    rtol: float = 1e-5,
) -> Tensor:
    r"""Min-max rescale scores to :math:`[0, 1]` within each graph (SPEC §1.2 step 6).

    .. math::
        \tilde{\pi}_i = \frac{\pi_i - \min_{g(i)} \pi}{\max_{g(i)} \pi - \min_{g(i)} \pi}

    A graph whose scores are all equal (one node, no edges, a symmetric graph) gets **0.0**
    everywhere: a constant carries no structural preference, so it adds nothing to the score.
    "Equal" allows for power-iteration noise: :math:`\max - \min \le` ``rtol`` :math:`\cdot
    \max |\pi|` within the graph (otherwise the noise would be stretched to :math:`[0, 1]`).

    Args:
        pr (Tensor): ``[N]`` scores.
        batch (LongTensor, optional): ``[N]`` graph id per node; ``None`` = one graph.
        num_graphs (int, optional): number of graphs (default: ``batch.max() + 1``).
        rtol (float): relative spread below which a graph counts as flat. (default: ``1e-5``)

    Returns:
        Tensor ``[N]``, same dtype as ``pr``.
    """
    if pr.numel() == 0:
        return pr.clone()
    lo = _per_graph(pr, batch, num_graphs, "min")
    hi = _per_graph(pr, batch, num_graphs, "max")
    span = hi - lo
    flat = span <= rtol * torch.maximum(hi.abs(), lo.abs())
    return torch.where(flat, torch.zeros_like(pr), (pr - lo) / torch.where(flat, 1.0, span))


PAGERANK_SCALES = ("minmax", "max", "none")


def rescale_pagerank(pr: Tensor, batch: Tensor | None = None, mode: str = "minmax",
                     num_graphs: int | None = None) -> Tensor:
    r"""PageRank as it enters the triple score, by one of the readings of SPEC §1.5.

    * ``"minmax"`` (default): :func:`rescale_unit_interval`, min-max to :math:`[0, 1]` per graph;
    * ``"max"``: :math:`\pi_i / \max_{g(i)} \pi` (the smallest node keeps a positive share);
    * ``"none"``: the raw scores (each graph's sum to 1, so about :math:`1/N_g` each).
    """
    if mode == "minmax":
        return rescale_unit_interval(pr, batch, num_graphs)
    if mode == "none":
        return pr.clone()
    if mode != "max":
        raise ValueError(f"pagerank_scale must be one of {PAGERANK_SCALES}, got {mode!r}")
    if pr.numel() == 0:
        return pr.clone()
    hi = _per_graph(pr, batch, num_graphs, "max")
    return torch.where(hi > 0, pr / torch.where(hi > 0, hi, 1.0), torch.zeros_like(pr))
