"""Retrieval-level metrics: no answer model needed, the fast loop for sweeps (SPEC §3).

* :func:`evidence_recall_at_k`: per question, the share of its evidence turns among the top-k
  retrieved node ids.
* :func:`unit_recall`: the same for retrieved *units* that may cover several turns (a Membox
  box, a GAAMA fact, an episode): recall at ``k`` units and recall within the first ``T`` context
  tokens (:func:`unit_positions`), so a system cannot win by returning longer units.
* :func:`rejection_metrics`: how often the gate fires on category 5 (true rejection) and on
  categories 1-4 (false rejection).
* :func:`roc_auc` / :func:`rejection_auc`: how well the retrieval confidence ``c_ret`` separates
  category 5 from the rest.

All functions are batched over questions; the only Python loops turn strings into integer ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

__all__ = ["evidence_recall_at_k", "rejection_auc", "rejection_metrics", "roc_auc",
           "unit_positions", "unit_recall"]

_NOT_FOUND = torch.iinfo(torch.long).max


def _ids_tensor(rows: Sequence[Sequence[str]], vocab: dict[str, int], pad: int) -> Tensor:
    """Pad a ragged list of string ids to a ``[B, L]`` long tensor (``L >= 1``)."""
    width = max((len(r) for r in rows), default=0) or 1
    out = torch.full((len(rows), width), pad, dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            out[i, : len(row)] = torch.tensor([vocab.setdefault(x, len(vocab)) for x in row])
    return out


def evidence_recall_at_k(
    retrieved_ids: Sequence[Sequence[str]],
    evidence: Sequence[Sequence[str]],
    ks: Iterable[int] = (5, 10, 30),
) -> dict[int, Tensor]:
    """Evidence recall at each k.

    .. math::
        \\text{recall@}k(q) = \\frac{|E_q \\cap \\text{top}_k(R_q)|}{|E_q|}

    Args:
        retrieved_ids: per question, the retrieved node ids, best first (any length; non-turn ids
            such as semantic nodes simply never match).
        evidence: per question, its evidence turn ids (canonical ``"D<s>:<t>"``; duplicates count
            once).
        ks: cut-offs.

    Returns:
        ``{k: Tensor[B] float}``; NaN for a question without evidence.
    """
    if len(retrieved_ids) != len(evidence):
        raise ValueError(
            f"evidence_recall_at_k: {len(retrieved_ids)} retrieval lists vs {len(evidence)} "
            "evidence lists"
        )
    ks = [int(k) for k in ks]
    if any(k < 1 for k in ks):
        raise ValueError(f"evidence_recall_at_k: every k must be >= 1, got {ks}")
    vocab: dict[str, int] = {}
    ev = _ids_tensor([list(dict.fromkeys(e)) for e in evidence], vocab, pad=-1)  # [B, Le]
    ret = _ids_tensor(retrieved_ids, vocab, pad=-2)  # [B, Lr]
    width = ret.shape[1]
    positions = torch.arange(width).expand_as(ret)
    # Rank of each evidence turn in its retrieval list (first occurrence), or "not found".
    match = ev.unsqueeze(2) == ret.unsqueeze(1)  # [B, Le, Lr]
    rank = torch.where(match, positions.unsqueeze(1), _NOT_FOUND).amin(dim=2)  # [B, Le]
    valid = ev >= 0
    n_evidence = valid.sum(dim=1).to(torch.float64)
    out: dict[int, Tensor] = {}
    for k in ks:
        hits = ((rank < k) & valid).sum(dim=1).to(torch.float64)
        out[k] = torch.where(n_evidence > 0, hits / n_evidence.clamp_min(1), torch.nan)
    return out


def unit_positions(units: Sequence[Sequence[Sequence[str]]],
                   unit_tokens: Sequence[Sequence[int]] | None = None
                   ) -> tuple[list[list[str]], list[list[float]]]:
    """Per question, each covered turn id once with the position at which the context first
    covers it: the 0-based rank of its first covering unit (``unit_tokens`` None), or the context
    tokens up to and including that unit (the cumulative sum of ``unit_tokens``)."""
    turns_out, pos_out = [], []
    for b, row in enumerate(units):
        seen: dict[str, float] = {}
        if unit_tokens is not None and len(unit_tokens[b]) != len(row):
            raise ValueError(f"unit_positions: question {b} has {len(row)} units but "
                             f"{len(unit_tokens[b])} token counts")
        end = 0.0
        for r, unit in enumerate(row):
            end += float(unit_tokens[b][r]) if unit_tokens is not None else 0.0
            for turn in unit:
                seen.setdefault(turn, end if unit_tokens is not None else float(r))
        turns_out.append(list(seen))
        pos_out.append(list(seen.values()))
    return turns_out, pos_out


def unit_recall(units: Sequence[Sequence[Sequence[str]]], evidence: Sequence[Sequence[str]],
                cutoffs: Iterable[float], unit_tokens: Sequence[Sequence[int]] | None = None
                ) -> dict[float, Tensor]:
    r"""Evidence recall of ranked multi-turn units, at ``k`` units or within ``T`` tokens.

    .. math::
        \text{recall@}k(q) = \frac{|E_q \cap \bigcup_{r < k} U_{q,r}|}{|E_q|}, \qquad
        \text{recall@}T\text{tok}(q) = \frac{|E_q \cap \bigcup_{r:\, t_{q,0} + \dots +
        t_{q,r} \le T} U_{q,r}|}{|E_q|}

    where :math:`U_{q,r}` is the set of turns the ``r``-th unit covers and :math:`t_{q,r}` its
    context tokens (a unit counts only when it fits whole within the budget).

    Args:
        units: per question, its units in rank order, each the LoCoMo turn ids it covers.
        evidence: per question, its evidence turn ids.
        cutoffs: ``k`` values (without ``unit_tokens``) or token budgets ``T`` (with them).
        unit_tokens: per question, the context tokens of each unit; ``None``: cut by rank.

    Returns:
        ``{cutoff: Tensor[B] float64}``; NaN for a question without evidence.
    """
    if len(units) != len(evidence):
        raise ValueError(f"unit_recall: {len(units)} unit lists vs {len(evidence)} evidence lists")
    cutoffs = [float(c) for c in cutoffs]
    if any(c < (1 if unit_tokens is None else 0) for c in cutoffs):
        raise ValueError(f"unit_recall: bad cut-offs {cutoffs}")
    turns, positions = unit_positions(units, unit_tokens)
    vocab: dict[str, int] = {}
    ev = _ids_tensor([list(dict.fromkeys(e)) for e in evidence], vocab, pad=-1)  # [B, Le]
    ret = _ids_tensor(turns, vocab, pad=-2)  # [B, Lr]
    pos = torch.full(ret.shape, float("inf"), dtype=torch.float64)
    for b, row in enumerate(positions):
        if row:
            pos[b, : len(row)] = torch.tensor(row, dtype=torch.float64)
    match = ev.unsqueeze(2) == ret.unsqueeze(1)  # [B, Le, Lr]
    first = torch.where(match, pos.unsqueeze(1), float("inf")).amin(dim=2)  # [B, Le]
    valid = ev >= 0
    n_evidence = valid.sum(dim=1).to(torch.float64)
    out: dict[float, Tensor] = {}
    for c in cutoffs:
        hit = (first < c) if unit_tokens is None else (first <= c)
        hits = (hit & valid).sum(dim=1).to(torch.float64)
        out[c] = torch.where(n_evidence > 0, hits / n_evidence.clamp_min(1), torch.nan)
    return out


def rejection_metrics(
    gated: Tensor,
    category: Tensor,
    *,
    adversarial: int = 5,
    answerable: Sequence[int] = (1, 2, 3, 4),
) -> dict[str, float]:
    """Gate behaviour split by category.

    Args:
        gated: ``[B]`` bool, True where the system refused (C_ret < tau_gate).
        category: ``[B]`` int, raw LoCoMo category numbers.
        adversarial: the unanswerable category.
        answerable: the categories whose refusal is a false rejection.

    Returns:
        ``true_rejection_rate`` (share of adversarial questions gated), ``false_rejection_rate``
        (share of answerable questions gated; the paper reports under 2.5%), ``gated_rate`` (all
        questions), ``n_adversarial``, ``n_answerable``, and ``false_rejection_rate_cat<c>`` per
        answerable category. A rate over no questions is NaN.
    """
    gated = torch.as_tensor(gated).to(torch.bool).flatten()
    category = torch.as_tensor(category).to(torch.long).flatten()
    if gated.shape != category.shape:
        raise ValueError(f"rejection_metrics: gated {tuple(gated.shape)} vs category "
                         f"{tuple(category.shape)}")
    g = gated.to(torch.float64)

    def rate(mask: Tensor) -> float:
        n = int(mask.sum())
        return float(g[mask].sum() / n) if n else float("nan")

    is_adv = category == adversarial
    is_ans = torch.isin(category, torch.tensor(list(answerable), dtype=torch.long))
    out: dict[str, float] = {
        "true_rejection_rate": rate(is_adv),
        "false_rejection_rate": rate(is_ans),
        "gated_rate": rate(torch.ones_like(gated)),
        "n_adversarial": float(is_adv.sum()),
        "n_answerable": float(is_ans.sum()),
    }
    for c in answerable:
        out[f"false_rejection_rate_cat{c}"] = rate(category == c)
    return out


def roc_auc(scores: Tensor, labels: Tensor) -> float:
    """ROC AUC of ``scores`` for binary ``labels`` (Mann-Whitney U with average ranks for ties).

    .. math::
        \\text{AUC} = \\frac{\\sum_{i \\in P} r_i - |P|(|P| + 1)/2}{|P|\\,|N|}

    with :math:`r_i` the 1-based rank of score i among all scores (ties share their mean rank).
    Higher scores should mean "positive". NaN if either class is empty. Equals scikit-learn's
    ``roc_auc_score(labels, scores)``.
    """
    scores = torch.as_tensor(scores).to(torch.float64).flatten()
    labels = torch.as_tensor(labels).to(torch.bool).flatten()
    if scores.shape != labels.shape:
        raise ValueError(f"roc_auc: scores {tuple(scores.shape)} vs labels {tuple(labels.shape)}")
    if not torch.isfinite(scores).all():
        raise ValueError("roc_auc: scores contain NaN or inf")
    n_pos = int(labels.sum())
    n_neg = labels.numel() - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inverse, counts = torch.unique(scores, sorted=True, return_inverse=True, return_counts=True)
    counts = counts.to(torch.float64)
    start = torch.cumsum(counts, 0) - counts  # number of strictly smaller scores
    avg_rank = start + (counts + 1) / 2  # 1-based mean rank of each distinct value
    rank_sum = avg_rank[inverse][labels].sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def rejection_auc(c_ret: Tensor, category: Tensor, *, adversarial: int = 5) -> float:
    """AUC of the retrieval confidence for telling category 5 apart from the rest.

    Orientation: a *low* ``c_ret`` should mean "unanswerable", so this is
    ``roc_auc(-c_ret, category == adversarial)``: 1.0 when every adversarial question has a lower
    C_ret than every other question, 0.5 for chance, NaN if either group is empty.
    """
    c_ret = torch.as_tensor(c_ret).to(torch.float64).flatten()
    category = torch.as_tensor(category).to(torch.long).flatten()
    return roc_auc(-c_ret, category == adversarial)


def evidence_recall_from_index(top_index: Tensor, valid: Tensor, evidence_index: Tensor,
                               ks: Sequence[int] = (5, 10, 30)) -> dict[int, Tensor]:
    """Evidence recall@k on node-index tensors (the sweep path: no per-question Python).

    Args:
        top_index: ``[Q, K]`` retrieved node ids in rank order.
        valid: ``[Q, K]`` bool, False for padding slots.
        evidence_index: ``[Q, E]`` node ids of each question's evidence turns, padded with -1.
        ks: cut-offs (each at most ``K``).

    Returns:
        ``{k: [Q] float64}``: share of a question's evidence among its top-k; NaN without evidence.
    """
    n_evidence = (evidence_index >= 0).sum(dim=1).to(torch.float64)
    out: dict[int, Tensor] = {}
    for k in ks:
        top = top_index[:, :k].masked_fill(~valid[:, :k], -2)  # -2 matches no evidence slot
        hit = (evidence_index[:, :, None] == top[:, None, :]).any(dim=2) & (evidence_index >= 0)
        recall = hit.sum(dim=1).to(torch.float64) / n_evidence
        out[k] = torch.where(n_evidence > 0, recall, torch.full_like(recall, float("nan")))
    return out
