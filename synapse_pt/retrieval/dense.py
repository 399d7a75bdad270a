"""Dense trigger: cosine similarity between query and node embeddings, for all queries at once."""

from __future__ import annotations

import torch


def cosine_scores(node_emb: torch.Tensor, query_emb: torch.Tensor) -> torch.Tensor:
    """``[N, B]`` cosines of L2-normalised node rows ``[N, d]`` and query rows ``[B, d]``.

    Both inputs are expected to be unit-normalised (the embedders guarantee it), so the cosine is a
    single matmul.
    """
    return node_emb @ query_emb.T


def own_graph_mask(node_graph: torch.Tensor, query_graph: torch.Tensor) -> torch.Tensor:
    """``[N, B]`` bool: node ``i`` belongs to the conversation of query ``b``."""
    return node_graph[:, None] == query_graph[None, :]


def masked_topk(scores: torch.Tensor, mask: torch.Tensor, k: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` rows per column of ``scores`` ``[N, B]`` among the rows where ``mask`` is True.

    Returns ``(values [k, B], indices [k, B])``; where a column has fewer than ``k`` allowed rows
    the surplus entries have value ``-inf`` (callers drop them). Ties are broken by the lower node
    index (a stable sort, unlike ``topk``), so the ranking does not depend on how many other nodes
    or conversations share the tensor, nor on the device.
    """
    k = min(k, scores.shape[0])
    masked = scores.masked_fill(~mask, float("-inf"))
    values, indices = masked.sort(dim=0, descending=True, stable=True)
    return values[:k], indices[:k]
