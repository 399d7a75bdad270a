"""Triggers and initial energy (SPEC §1.2 steps 1-2).

Anchors are the union of the top-``k_anchor`` nodes by cosine and the top-``k_anchor`` nodes by BM25
(positive scores only), each within the query's own conversation. Initial energy sits on anchors
only:

.. math::
    a_i(0) = \\begin{cases}
        \\max(0, \\cos(h_i, h_q)) & i \\in \\text{dense anchors} \\\\
        \\mathrm{bm25}_i / \\max_j \\mathrm{bm25}_j & i \\in \\text{BM25-only anchors} \\\\
        0 & \\text{otherwise}
    \\end{cases}

The paper does not say how BM25-only anchors are energised; normalising by the query's best BM25
score puts them on the same [0, 1] scale as the cosine (our documented default).
"""

from __future__ import annotations

import torch

from .dense import masked_topk

#: the readings of the anchors' initial energy (SPEC §1.5; :func:`initial_energy`'s ``energy``)
ENERGY_READINGS = ("cosine", "max", "constant")


def anchor_mask(scores: torch.Tensor, mask: torch.Tensor | None, k: int,
                positive_only: bool = False) -> torch.Tensor:
    """``[N, B]`` bool marking each column's top-``k`` rows of ``scores`` inside ``mask``
    (``None``: every row)."""
    values, idx = masked_topk(scores, mask, k)
    keep = torch.isfinite(values)
    if positive_only:
        keep &= values > 0
    out = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
    out.scatter_(0, idx, keep)
    return out


def initial_energy(cos: torch.Tensor, bm25: torch.Tensor, mask: torch.Tensor | None,
                   k_anchor: int,
                   use_bm25: bool = True, energy: str = "cosine"
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Initial activation ``a(0)`` ``[N, B]`` and the anchor mask ``[N, B]``.

    Args:
        cos: ``[N, B]`` cosine of node and query embeddings.
        bm25: ``[N, B]`` BM25 scores (0 outside the query's conversation).
        mask: ``[N, B]`` node belongs to the query's conversation (``None``: every node does,
            as in one conversation's own block).
        k_anchor: anchors per trigger.
        use_bm25: with False only dense anchors are used.
        energy: the reading of SPEC §1.5: ``"cosine"`` (the formula above), ``"max"`` (every
            anchor gets :math:`\max(\cos^+, \mathrm{bm25}/\max \mathrm{bm25})`) or
            ``"constant"`` (every anchor gets 1).
    """
    dense = anchor_mask(cos, mask, k_anchor)
    pos_cos = cos.clamp_min(0.0)
    a0 = torch.where(dense, pos_cos, torch.zeros_like(cos))
    anchors = dense
    bm25_unit = torch.zeros_like(cos)
    if use_bm25:
        lexical = anchor_mask(bm25, mask, k_anchor, positive_only=True)
        inside = bm25 if mask is None else bm25.masked_fill(~mask, 0.0)
        best = inside.amax(dim=0, keepdim=True).clamp_min(1e-12)
        bm25_unit = (bm25 / best).clamp_min(0.0).to(cos.dtype)
        lexical_only = lexical & ~dense
        a0 = torch.where(lexical_only, bm25_unit, a0)
        anchors = dense | lexical
    if energy == "max":
        a0 = torch.where(anchors, torch.maximum(pos_cos, bm25_unit), torch.zeros_like(cos))
    elif energy == "constant":
        a0 = anchors.to(cos.dtype)
    elif energy != "cosine":
        raise ValueError(f"initial energy reading must be one of {list(ENERGY_READINGS)}, got "
                         f"{energy!r}")
    return a0, anchors
