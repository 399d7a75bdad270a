"""Triple-signal score, top-k and the uncertainty gate (SPEC §1.2 steps 6-7).

.. math::
    S(v_i) = \\lambda_1 \\cos(h_i, h_q) + \\lambda_2 a_i(T) + \\lambda_3 \\mathrm{PR}_i

with :math:`\\mathrm{PR}` rescaled to [0, 1] per conversation. The retrieval confidence
:math:`C_{ret}` is the activation of the top-ranked node (``c_ret_source="activation"``), or one of
the other readings of SPEC §1.5 (:func:`retrieval_confidence`). A query is gated when
:math:`C_{ret} < \\tau_{gate}`.
"""

from __future__ import annotations

import torch

from synapse_pt.nn.sparse import row_blocks

from .dense import masked_topk

#: the readings of C_ret (SPEC §1.5; :func:`retrieval_confidence`'s ``source``)
C_RET_READINGS = ("activation", "max_activation", "potential", "score", "similarity")


def triple_score(cos: torch.Tensor, activation: torch.Tensor, pagerank_unit: torch.Tensor,
                 lambda1: float | torch.Tensor = 0.5, lambda2: float | torch.Tensor = 0.3,
                 lambda3: float | torch.Tensor = 0.2) -> torch.Tensor:
    """``[N, B]`` score from cosine ``[N, B]``, activation ``[N, B]`` and PageRank ``[N]``.

    Each lambda may be a float or a ``[B]`` tensor (one value per query column, for batched sweeps).
    Without autograd it runs row block by row block into one output (no ``[N, B]`` temporaries;
    the same products and sums in the same order, so the same floats as the plain expression).
    """
    tensors = [t for t in (cos, activation, pagerank_unit, lambda1, lambda2, lambda3)
               if isinstance(t, torch.Tensor)]
    if (any(t.dtype != cos.dtype for t in tensors)
            or (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))):
        return lambda1 * cos + lambda2 * activation + lambda3 * pagerank_unit[:, None]
    out = torch.empty_like(cos)
    blocks = row_blocks(out)
    if not blocks:
        return out
    tmp = out.new_empty(blocks[0].stop - blocks[0].start, out.size(1))
    for blk in blocks:
        o = out[blk]
        t = tmp[: o.size(0)]
        torch.mul(cos[blk], lambda1, out=o)
        o.add_(torch.mul(activation[blk], lambda2, out=t))
        if isinstance(lambda3, torch.Tensor) and lambda3.dim():
            o.add_(torch.mul(pagerank_unit[blk, None], lambda3, out=t))
        else:  # one value per row
            o.add_(pagerank_unit[blk, None] * lambda3)
    return out


def rank(score: torch.Tensor, mask: torch.Tensor | None, k: int
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` node indices ``[k, B]`` and scores ``[k, B]`` per query inside its conversation
    (``mask`` ``None``: every node is the query's)."""
    return masked_topk(score, mask, k)


def at_top(signal: torch.Tensor, top_index: torch.Tensor) -> torch.Tensor:
    """``[B]``: ``signal`` ``[N, B]`` read at each query's top node ``top_index`` ``[B]``."""
    return signal.gather(0, top_index[None, :])[0]


def retrieval_confidence(source: str, top_index: torch.Tensor, *, top_score: torch.Tensor,
                         activation: torch.Tensor, potential: torch.Tensor | None,
                         cos: torch.Tensor,
                         mask: torch.Tensor) -> torch.Tensor:
    r"""``C_ret`` ``[B]`` by one of the readings of SPEC §1.5 (``SynapseParams.c_ret_source``):

    * ``"activation"``: :math:`a_{top}(T)`, the activation of the top-ranked node (the paper);
    * ``"max_activation"``: :math:`\max_i a_i(T)` over the query's graph;
    * ``"potential"``: :math:`\hat{u}_{top}(T)`, the top node's pre-sigmoid potential;
    * ``"score"``: :math:`S(v_{top})`, the top score;
    * ``"similarity"``: :math:`\cos(h_{top}, h_q)` (the ``no_activation`` ablation).

    ``top_index`` / ``top_score`` are ``[B]``; the other signals ``[N, B]``.
    """
    if source == "activation":
        return at_top(activation, top_index)
    if source == "max_activation":
        return activation.masked_fill(~mask, float("-inf")).amax(dim=0).clamp_min(0.0)
    if source == "potential":
        if potential is None:
            raise ValueError("C_ret reading 'potential' needs the last step's potential")
        return at_top(potential, top_index)
    if source == "score":
        return top_score
    if source == "similarity":
        return at_top(cos, top_index)
    raise ValueError(f"unknown C_ret reading {source!r}")


def gate(c_ret: torch.Tensor, tau_gate: float | torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: True where the memory refuses to answer (``C_ret < tau_gate``)."""
    return c_ret < tau_gate
