"""Dense trigger: cosine similarity between query and node embeddings, for all queries at once."""

from __future__ import annotations

import torch

from synapse_pt.nn.sparse import column_topk


def cosine_scores(node_emb: torch.Tensor, query_emb: torch.Tensor) -> torch.Tensor:
    """``[N, B]`` cosines of L2-normalised node rows ``[N, d]`` and query rows ``[B, d]``.

    Both inputs are expected to be unit-normalised (the embedders guarantee it), so the cosine is a
    single matmul. It runs in float64 and is rounded to the inputs' dtype: a float32 GEMM's
    rounding depends on the matrix shapes (the BLAS picks its blocking by them, differently on
    different CPUs), so near-tied nodes would swap places with the number of queries in a batch;
    the float64 product rounded to float32 is the same whatever the batch (a retrieval in chunks
    equals one batch, tested).
    """
    return (node_emb.double() @ query_emb.double().T).to(node_emb.dtype)


def own_graph_mask(node_graph: torch.Tensor, query_graph: torch.Tensor) -> torch.Tensor:
    """``[N, B]`` bool: node ``i`` belongs to the conversation of query ``b``."""
    return node_graph[:, None] == query_graph[None, :]


def masked_topk(scores: torch.Tensor, mask: torch.Tensor | None, k: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` rows per column of ``scores`` ``[N, B]`` among the rows where ``mask`` is True
    (``None``: every row; no masked copy of ``scores`` is made).

    Returns ``(values [k, B], indices [k, B])``; where a column has fewer than ``k`` allowed rows
    the surplus entries have value ``-inf`` (callers drop them). Ties are broken by the lower node
    index, exactly as a stable descending sort would order them, so the ranking does not depend
    on how many other nodes or conversations share the tensor, nor on the device.

    No full sort: one ``topk`` of ``k + 1`` rows. Where a column's ``(k+1)``-th value is below its
    ``k``-th, its ``k`` rows are the set a stable sort takes, put in stable order by sorting
    those ``k`` rows (by index, then stably by value). The columns with a tie across the
    boundary (or fewer than ``k + 1`` allowed rows) are redone by :func:`_masked_topk_ties`.
    """
    n, b = scores.shape
    k = min(k, n)
    masked = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
    if k == 0 or b == 0:
        empty = masked[:0]
        return empty, empty.long()
    vals, rows = column_topk(masked, min(k + 1, n))
    values, rows = vals[:k], rows[:k]
    order = rows.sort(dim=0).indices
    rows, values = rows.gather(0, order), values.gather(0, order)
    order = values.sort(dim=0, descending=True, stable=True).indices
    values, rows = values.gather(0, order), rows.gather(0, order)
    if vals.size(0) > k:
        tied = (vals[k] == vals[k - 1]).nonzero().flatten()
        if tied.numel():  # one host sync; rare except for columns with < k + 1 allowed rows
            v_t, r_t = _masked_topk_ties(masked[:, tied], k)
            values[:, tied], rows[:, tied] = v_t, r_t
    return values, rows


def _masked_topk_ties(masked: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`masked_topk` for columns whose ``k``-th value ties with rows past it: every row
    above the ``k``-th value is taken, and the rows equal to it fill the remaining places in
    index order (a cumulative count); the ``k`` taken rows are then sorted by value among
    themselves (stable: equal values keep index order)."""
    n, b = masked.shape
    kth = column_topk(masked, k, sorted=False)[0].amin(dim=0)  # [B]
    above = masked > kth
    tied = masked == kth
    room = k - above.sum(dim=0)  # places left for rows equal to the k-th value
    taken = above | (tied & (tied.cumsum(dim=0) <= room))
    # column-major positions of the taken rows: exactly k per column, rows ascending
    flat = torch.nonzero_static(taken.T.reshape(-1), size=k * b).squeeze(1)
    rows = (flat % n).view(b, k).T  # [k, B], ascending within each column
    values = masked.gather(0, rows)
    values, order = values.sort(dim=0, descending=True, stable=True)
    return values, rows.gather(0, order)
