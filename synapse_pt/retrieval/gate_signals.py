r"""Rejection signals aimed at LoCoMo's adversarial questions (issue 14), batched over questions.

Category-5 questions take a real event and name the wrong person ("How did Caroline feel while
watching the meteor shower?" when Melanie watched it). Their retrieval energy looks like any other
question's, so C_ret cannot flag them; these signals look at *whose* life the best-matching
evidence describes. All read only the question text and the memory; higher values mean "more
answerable" and a gate rejects low values (:func:`~synapse_pt.retrieval.scoring.gate`).

* :func:`speaker_share`: the share of a question's top-``k`` turns spoken by the speaker it names,

  .. math:: \mathrm{share}_b = \frac{1}{k} \sum_{r=1}^{k} [\mathrm{speaker}(t_{b,r}) = n_b]

  (NaN where the question names no single speaker);
* :func:`swap_contrast`: the mean of the top-``k`` similarities of the question as asked minus
  that of the question with the two speakers' names exchanged
  (:func:`~synapse_pt.retrieval.text.swap_speakers`), over pronoun-resolved turns: an event the
  *other* speaker lived matches the swapped question better;
* :func:`ownership`: how much a turn is about a person, from its first- and second-person wording
  (:func:`~synapse_pt.retrieval.text.person_references`): with :math:`r_P` the references to
  person :math:`P` and :math:`r_O` those to the other speaker,

  .. math:: o_P = \frac{r_P + \alpha}{r_P + r_O + 2\alpha};

  :func:`owned_share` averages :math:`o_{n_b}` over the top-``k`` turns of a name-neutral content
  ranking (did the best-matching events happen to the person the question names?), and
  :func:`ownership_contrast` is the best content score weighted by ownership of the named person
  against that of the other,

  .. math:: \max_i s_{ib}\, o_{i,n_b} - \max_i s_{ib}\, (1 - o_{i,n_b});

* :func:`logistic_combination`: :math:`\sigma(c + \sum_f w_f x_{fb})`, a fitted combination of
  the others (the probability that a question is answerable).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor


def _topk_mean(values: Tensor, mask: Tensor, k: int) -> Tensor:
    low = torch.finfo(values.dtype).min
    k = max(1, min(k, values.shape[0]))
    top = values.masked_fill(~mask, low).topk(k, dim=0).values  # [k, B]
    ok = top > low
    return (top * ok).sum(dim=0) / ok.sum(dim=0).clamp_min(1)


def speaker_share(top_index: Tensor, valid: Tensor, node_speaker: Tensor, named: Tensor) -> Tensor:
    """``[B]`` share of the valid top-k turns (``top_index`` ``[B, k]`` rows) spoken by the named
    speaker (``named`` ``[B]``, -1: none named -> NaN)."""
    spoken = node_speaker[top_index] == named[:, None]
    hits = (spoken & valid).sum(dim=1).to(torch.float64)
    n = valid.sum(dim=1).to(torch.float64)
    share = hits / n.clamp_min(1)
    return torch.where((named >= 0) & (n > 0), share, torch.full_like(share, float("nan")))


def swap_contrast(asked: Tensor, swapped: Tensor, mask: Tensor, k: int = 1) -> Tensor:
    """``[B]``: mean of the top-``k`` of ``asked[:, b]`` minus that of ``swapped[:, b]`` over the
    rows in ``mask`` ``[N, B]`` (``k = 1``: the difference of the maxima)."""
    return _topk_mean(asked, mask, k) - _topk_mean(swapped, mask, k)


def ownership(refs_a: Tensor, refs_b: Tensor, named: Tensor, smoothing: float = 0.5) -> Tensor:
    """``[N, B]`` ownership :math:`o_{i, n_b}` of turn ``i`` by the person question ``b`` names.

    Args:
        refs_a, refs_b: ``[N]`` references of each turn to the conversation's speaker A and B.
        named: ``[B]`` the speaker each question names (0 = A, 1 = B, -1 = none: ownership 1).
        smoothing: :math:`\\alpha` (a turn with no reference to either is owned 1/2 by each).
    """
    refs_a, refs_b = refs_a.to(torch.float64), refs_b.to(torch.float64)
    own_a = (refs_a + smoothing) / (refs_a + refs_b + 2 * smoothing)
    own = torch.where(named[None, :] == 1, 1.0 - own_a[:, None], own_a[:, None])
    return torch.where(named[None, :] < 0, torch.ones_like(own), own)


def owned_share(scores: Tensor, own: Tensor, mask: Tensor, k: int = 3) -> Tensor:
    """``[B]``: mean ownership ``own`` ``[N, B]`` of the top-``k`` rows of ``scores`` in ``mask``
    (ties to the lower row)."""
    k = max(1, min(k, scores.shape[0]))
    masked = scores.to(torch.float64).masked_fill(~mask, float("-inf"))
    order = masked.sort(dim=0, descending=True, stable=True)
    index, ok = order.indices[:k], torch.isfinite(order.values[:k])
    taken = own.gather(0, index) * ok
    return taken.sum(dim=0) / ok.sum(dim=0).clamp_min(1)


def ownership_contrast(scores: Tensor, own: Tensor, mask: Tensor) -> Tensor:
    """``[B]``: :math:`\\max_i s_{ib} o_{ib} - \\max_i s_{ib} (1 - o_{ib})` over ``mask``."""
    scores = scores.to(torch.float64)
    low = torch.finfo(torch.float64).min
    mine = (scores * own).masked_fill(~mask, low).amax(dim=0)
    theirs = (scores * (1.0 - own)).masked_fill(~mask, low).amax(dim=0)
    return mine - theirs


def logistic_combination(signals: Mapping[str, Tensor], weights: Mapping[str, float],
                         intercept: float) -> Tensor:
    """``[B]``: :math:`\\sigma(c + \\sum_f w_f x_f)` over the signals named in ``weights``."""
    missing = sorted(set(weights) - set(signals))
    if missing:
        raise KeyError(f"logistic_combination: no signal {missing} (have {sorted(signals)})")
    logit = torch.full_like(next(iter(signals.values())), float(intercept), dtype=torch.float64)
    for name, w in weights.items():
        logit = logit + float(w) * signals[name].to(torch.float64)
    return torch.sigmoid(logit)

