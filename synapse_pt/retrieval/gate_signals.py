r"""Candidate rejection signals aimed at LoCoMo's adversarial questions (issue 14, first study).

Category-5 questions take a real event and name the wrong person. Two signals look at whose life
the retrieved evidence describes rather than how strongly it matches, both batched over questions
and reading only the question text and the memory:

* :func:`speaker_share`: the share of a question's top-``k`` turns spoken by the speaker it names,

  .. math:: \mathrm{share}_b = \frac{1}{k} \sum_{r=1}^{k} [\mathrm{speaker}(t_{b,r}) = n_b]

  (NaN where the question names no single speaker);
* :func:`swap_contrast`: the best similarity of the question as asked minus that of the question
  with the two speakers' names exchanged (:func:`~synapse_pt.retrieval.text.swap_speakers`), over
  pronoun-resolved turns: an event the *other* speaker lived matches the swapped question better.

Higher values mean "more answerable"; a gate rejects low values.
"""

from __future__ import annotations

import torch
from torch import Tensor


def speaker_share(top_index: Tensor, valid: Tensor, node_speaker: Tensor, named: Tensor) -> Tensor:
    """``[B]`` share of the valid top-k turns (``top_index`` ``[B, k]`` rows) spoken by the named
    speaker (``named`` ``[B]``, -1: none named -> NaN)."""
    spoken = node_speaker[top_index] == named[:, None]
    hits = (spoken & valid).sum(dim=1).to(torch.float64)
    n = valid.sum(dim=1).to(torch.float64)
    share = hits / n.clamp_min(1)
    return torch.where((named >= 0) & (n > 0), share, torch.full_like(share, float("nan")))


def swap_contrast(asked: Tensor, swapped: Tensor, mask: Tensor) -> Tensor:
    """``[B]``: ``max_i asked[i, b] - max_i swapped[i, b]`` over the rows in ``mask`` ``[N, B]``."""
    low = torch.finfo(asked.dtype).min
    best_asked = asked.masked_fill(~mask, low).amax(dim=0)
    best_swapped = swapped.masked_fill(~mask, low).amax(dim=0)
    return best_asked - best_swapped
