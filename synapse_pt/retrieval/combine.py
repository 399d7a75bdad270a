r"""Fusion of several ``[N, B]`` retrieval signals, and priors over turns (issue 16).

For question :math:`b` with conversation mask :math:`m_{\cdot b}` each signal :math:`s` is first
min-max normalised over the question's own conversation,

.. math::
    \tilde s_{ib} = \frac{s_{ib} - \min_{j: m_{jb}} s_{jb}}
                         {\max_{j: m_{jb}} s_{jb} - \min_{j: m_{jb}} s_{jb}} \in [0, 1]

(0 for a constant column and outside the mask), then the signals are summed with weights,
:math:`f_{ib} = \sum_s w_s \tilde s_{ib}`, and optionally propagated to neighbouring turns of the
same session and to the session,

.. math::
    f'_{ib} = f_{ib} + \rho \max(f_{p(i) b}, f_{n(i) b}) + \sigma \max_{j \in s(i)} f_{jb}

with :math:`p(i)`, :math:`n(i)` the previous and next turn (a turn without one gets 0 from that
side) and :math:`s(i)` the turns of :math:`i`'s session (itself included: a session with a strong
hit lifts all its turns, the order inside the session is kept). Everything runs
on tensors for all questions (and, in :func:`fuse_many`, many weight vectors) at once.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

__all__ = ["fuse", "fuse_many", "minmax_normalise", "neighbour_propagation", "session_maximum",
           "speaker_prior"]


def minmax_normalise(scores: Tensor, mask: Tensor) -> Tensor:
    """``[N, B]`` scores rescaled to [0, 1] per column over the rows in ``mask`` (0 elsewhere)."""
    inf = torch.finfo(scores.dtype).max
    lo = scores.masked_fill(~mask, inf).amin(dim=0, keepdim=True)
    hi = scores.masked_fill(~mask, -inf).amax(dim=0, keepdim=True)
    span = hi - lo
    out = (scores - lo) / torch.where(span > 0, span, torch.ones_like(span))
    out = torch.where(span > 0, out, torch.zeros_like(out))
    return out.masked_fill(~mask, 0.0)


def speaker_prior(node_speaker: Tensor, query_speaker: Tensor) -> Tensor:
    """``[N, B]`` 1.0 where turn ``i`` is spoken by the speaker question ``b`` names.

    ``node_speaker`` ``[N]``: 0 (speaker a) or 1 (speaker b) per turn; ``query_speaker`` ``[B]``:
    the speaker a question names, or -1 (none or both: the prior is 0 for every turn)."""
    named = query_speaker[None, :] >= 0
    return ((node_speaker[:, None] == query_speaker[None, :]) & named).to(torch.float32)


def neighbour_propagation(scores: Tensor, prev: Tensor, nxt: Tensor, rho: float | Tensor
                          ) -> Tensor:
    """``scores + rho * max(scores[prev], scores[next])`` ``[..., N, B]``; ``prev``/``nxt`` ``[N]``
    hold the neighbour's row or -1 (no neighbour: contributes 0). Scores must be >= 0."""
    zero = torch.zeros_like(scores[..., :1, :])
    padded = torch.cat([scores, zero], dim=-2)  # row N is the "no neighbour" row
    n = scores.shape[-2]
    p = torch.where(prev >= 0, prev, torch.full_like(prev, n))
    q = torch.where(nxt >= 0, nxt, torch.full_like(nxt, n))
    rho = torch.as_tensor(rho, dtype=scores.dtype, device=scores.device)
    if rho.dim() == 1:  # one rho per leading (configuration) slice
        rho = rho.view(-1, 1, 1)
    return scores + rho * torch.maximum(padded[..., p, :], padded[..., q, :])


def session_maximum(scores: Tensor, session: Tensor) -> Tensor:
    """``[..., N, B]``: each turn's session's highest score, ``max_{j in s(i)} scores[j]``;
    ``session`` ``[N]`` holds session ids ``0..S-1``. Scores must be >= 0."""
    num = int(session.max()) + 1 if session.numel() else 0
    shape = (*scores.shape[:-2], num, scores.shape[-1])
    index = session.view(*([1] * (scores.dim() - 2)), -1, 1).expand_as(scores)
    best = torch.zeros(shape, dtype=scores.dtype, device=scores.device)
    best = best.scatter_reduce(-2, index, scores, reduce="amax", include_self=True)
    return best.gather(-2, index)


def _propagate(out: Tensor, prev: Tensor | None, nxt: Tensor | None, rho: Tensor | float | None,
               session: Tensor | None, sigma: Tensor | float | None) -> Tensor:
    """Neighbour and session propagation of ``out`` (both read the unpropagated scores)."""
    base = out
    if rho is not None:
        if prev is None or nxt is None:
            raise ValueError("neighbour propagation (rho > 0) needs the prev/next turn rows")
        out = neighbour_propagation(base, prev, nxt, rho)
    if sigma is not None:
        if session is None:
            raise ValueError("session propagation (sigma > 0) needs the session of every turn")
        sigma = torch.as_tensor(sigma, dtype=base.dtype, device=base.device)
        if sigma.dim() == 1:
            sigma = sigma.view(-1, 1, 1)
        out = out + sigma * session_maximum(base, session)
    return out


def fuse(signals: Mapping[str, Tensor], weights: Mapping[str, float], mask: Tensor, *,
         prev: Tensor | None = None, nxt: Tensor | None = None, rho: float = 0.0,
         session: Tensor | None = None, sigma: float = 0.0) -> Tensor:
    """``[N, B]`` weighted sum of the normalised signals named in ``weights`` (zero weights are
    skipped), then neighbour propagation when ``rho > 0`` and session propagation when
    ``sigma > 0``; ``-inf`` outside ``mask``."""
    unknown = sorted(set(weights) - set(signals))
    if unknown:
        raise KeyError(f"fusion weights for unknown signals {unknown}; known: {sorted(signals)}")
    if any(float(w) < 0 for w in weights.values()) or rho < 0 or sigma < 0:
        raise ValueError(f"fusion weights, rho and sigma must be >= 0, got {dict(weights)}, "
                         f"rho={rho}, sigma={sigma}")
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    for name, w in weights.items():
        if float(w) != 0.0:
            out = out + float(w) * minmax_normalise(signals[name].float(), mask)
    out = _propagate(out, prev, nxt, rho if rho > 0 else None, session,
                     sigma if sigma > 0 else None)
    return out.masked_fill(~mask, float("-inf"))


def fuse_many(normalised: Tensor, weights: Tensor, mask: Tensor, *, prev: Tensor | None = None,
              nxt: Tensor | None = None, rho: Tensor | None = None,
              session: Tensor | None = None, sigma: Tensor | None = None) -> Tensor:
    """``[C, N, B]`` fused scores of ``C`` weight vectors at once (sweeps).

    ``normalised`` ``[S, N, B]``: signals already passed through :func:`minmax_normalise`;
    ``weights`` ``[C, S]``; ``rho``, ``sigma`` ``[C]`` (optional). Equal to :func:`fuse` per row
    of weights.
    """
    out = torch.einsum("cs,snb->cnb", weights.to(normalised.dtype), normalised)
    out = _propagate(out, prev, nxt, None if rho is None else rho.to(out.dtype), session,
                     None if sigma is None else sigma.to(out.dtype))
    return out.masked_fill(~mask, float("-inf"))
