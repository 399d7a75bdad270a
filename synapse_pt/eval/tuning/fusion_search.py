"""Held-out search over the fused retriever's weights (issue 16), on the fold protocol of
:mod:`synapse_pt.eval.tuning.heldout`.

Every signal of :class:`~synapse_pt.memory.fused.FusedMemory` is computed once for all questions
and min-max normalised (``[S, N, B]``); a candidate is a weight vector over the signals, a
neighbour-propagation ``rho`` and a BM25 variant (``k1``, ``b``); candidates are scored in chunks
with :func:`~synapse_pt.retrieval.combine.fuse_many` (``[C, N, B]``), ranked with ``topk`` and
turned into recall matrices on tensors. :func:`~synapse_pt.eval.tuning.heldout.heldout` then
chooses per
fold on the other conversations.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import torch

from synapse_pt.common.progress import progress
from synapse_pt.eval.qa.scorers.retrieval import evidence_recall_from_index
from synapse_pt.eval.tuning.heldout import KS, SweepMatrix
from synapse_pt.retrieval.combine import fuse_many


def fusion_candidates(signals: Sequence[str], variants: Sequence[str], n: int, seed: int,
                      p_zero: float = 0.5, rho_max: float = 0.5,
                      sigma_max: float | None = None) -> list[dict]:
    """``n`` random candidates: each weight 0 with probability ``p_zero`` else U(0, 1) (at least
    one positive), ``rho`` 0 with probability 1/2 else U(0, ``rho_max``), a BM25 variant; with
    ``sigma_max``, also a session propagation ``sigma``, 0 with probability 1/2 else
    U(0, ``sigma_max``) (``None``: no ``sigma`` drawn, the candidates of the earlier searches)."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        weights = {s: (0.0 if rng.random() < p_zero else rng.random()) for s in signals}
        if not any(weights.values()):
            continue
        cand = {"weights": weights, "rho": 0.0 if rng.random() < 0.5 else
                rng.uniform(0.0, rho_max), "bm25": rng.choice(list(variants))}
        if sigma_max is not None:
            cand["sigma"] = 0.0 if rng.random() < 0.5 else rng.uniform(0.0, sigma_max)
        out.append(cand)
    return out


def fusion_sweep(stacks: Mapping[str, torch.Tensor], names: Sequence[str], mask: torch.Tensor,
                 evidence: torch.Tensor, cands: Sequence[dict], *, prev: torch.Tensor,
                 nxt: torch.Tensor, session: torch.Tensor | None = None, k: int = 30,
                 chunk: int = 4) -> SweepMatrix:
    """Recall matrices ``[C, Q]`` of every candidate.

    ``stacks``: BM25 variant -> ``[S, N, B]`` normalised signals in the order of ``names``;
    ``evidence``: ``[B, E]`` evidence rows (-1 padded); ``mask``: ``[N, B]`` own conversation.
    ``c_ret`` is each candidate's top fused score."""
    B = mask.shape[1]
    order = sorted(range(len(cands)), key=lambda i: cands[i]["bm25"])  # one stack at a time
    recall = {kk: torch.empty(len(cands), B, dtype=torch.float64) for kk in KS}
    c_ret = torch.empty(len(cands), B)
    for start in progress(range(0, len(order), chunk), desc="fusion sweep",
                          unit="chunks"):
        idx = order[start:start + chunk]
        groups: dict[str, list[int]] = {}
        for i in idx:
            groups.setdefault(cands[i]["bm25"], []).append(i)
        for variant, members in groups.items():
            w = torch.tensor([[cands[i]["weights"].get(n, 0.0) for n in names] for i in members],
                             device=mask.device)
            rho = torch.tensor([cands[i]["rho"] for i in members], device=mask.device)
            sigma = torch.tensor([cands[i].get("sigma", 0.0) for i in members],
                                 device=mask.device)
            fused = fuse_many(stacks[variant], w, mask, prev=prev, nxt=nxt, rho=rho,
                              session=session, sigma=sigma if bool((sigma > 0).any()) else None)
            top = fused.topk(min(k, fused.shape[1]), dim=1)  # [C, k, B]
            C = len(members)
            index = top.indices.permute(0, 2, 1).reshape(C * B, -1)
            valid = torch.isfinite(top.values).permute(0, 2, 1).reshape(C * B, -1)
            rec = evidence_recall_from_index(index, valid, evidence.repeat(C, 1), ks=KS)
            rows = torch.tensor(members)
            for kk in KS:
                recall[kk][rows] = rec[kk].view(C, B).cpu()
            c_ret[rows] = top.values[:, 0, :].float().cpu()
    return SweepMatrix([dict(c) for c in cands], recall, c_ret)
