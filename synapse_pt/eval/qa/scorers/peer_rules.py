r"""The retrieval metrics peers publish on LoCoMo, each computed by its own rule (SPEC §3).

Peers' LoCoMo retrieval figures count other things than our evidence recall@k (the share of a
question's evidence turns among the first k retrieved): a hit at the level of *sessions*, any of
the evidence rather than its share, questions without evidence counted as 1.0 or as 0. Each rule
below is named for what it computes and computed from the same ranked list of turns a run
retrieves (``retrieved_turns``: the LoCoMo turns the retrieved units cover, in rank order), so our
systems can be set beside each published figure on its own terms (experiments/published_retrieval.md
names the projects, files and lines). Notation per question: :math:`R` the ranked turns,
:math:`U` the sessions of :math:`R` de-duplicated in order (a session ranks by its best turn),
:math:`G` the gold set as the rule's own parser reads the evidence strings.

============================  ==================================================================
``session_hit@k``             :math:`[G_s \cap U_{:k} \ne \emptyset]`: any gold session among the
                              first k distinct sessions (Engram "R@k", deja-vu "hit@k"). Gold:
                              the session of the first id of each string (``P_prefix``).
                              Questions with a gold session (1,982 on LoCoMo-10).
``session_hit_turns@k``       :math:`[G_s \cap \mathrm{sess}(R_{:k}) \ne \emptyset]`: any gold
                              session among the sessions of the first k *turns*, no
                              de-duplication (memory-core-eval). Gold: strings that are exactly
                              ``D<s>:<t>`` (``P_strict``; 1,978 questions).
``session_recall@k``          :math:`|G_s \cap U_{:k}| / |G_s|`, 1.0 for an empty gold set, over
                              every question (MemPalace's session rows). ``P_prefix``.
``turn_recall_raw@k``         :math:`|G_{raw} \cap R_{:k}| / |G_{raw}|` over the raw evidence
                              strings, 1.0 for an empty list, every question (MemPalace's dialog
                              rows): a malformed string (``D30:05``) is never found.
``raw_any@k``, ``raw_strict@k``  any / every raw evidence string among :math:`R_{:k}`; 0 for an
                              empty list, every question (infolang-bench's ``raw_any`` /
                              ``raw_strict``).
``any@k``, ``strict@k``       any / every *resolved* evidence turn (the loader's canonical ids)
                              among :math:`R_{:k}`; questions with evidence (ours, beside the
                              share that ``recall@k`` counts).
============================  ==================================================================

A peer's figure also stands at the peer's own retrieval *depth*: Engram's R@5 and R@10 come from
the 10 items it retrieves, Hebb Mind's from 10 memories and each one's two neighbouring turns on
either side. :func:`cut_at_depth` keeps the first ``depth`` turns of our ranking (our figure as if
we retrieved as many items as the peer) and :func:`with_neighbours` adds each kept turn's
neighbours in the conversation; :func:`peer_metrics` then applies the rule to what is left.

Everything is batched: the ranked turns and the gold sets become ``[B, L]`` code tensors (a turn
``D<s>:<t>`` is the code :math:`s \cdot 10^6 + t`), sessions a ``[B, S]`` table of first
positions; the only Python loops turn strings into codes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

__all__ = ["PEER_RULES", "cut_at_depth", "parse_prefix_sessions", "parse_strict_sessions",
           "peer_metrics", "turn_code", "with_neighbours"]

#: rule name -> the published figures it reproduces
PEER_RULES = {
    "session_hit": "Engram, deja-vu (any gold session among the first k distinct sessions)",
    "session_hit_turns": "memory-core-eval (any gold session among the first k turns' sessions)",
    "session_recall": "MemPalace session rows (share of gold sessions, empty = 1)",
    "turn_recall_raw": "MemPalace dialog rows (share of raw evidence strings, empty = 1)",
    "raw_any": "infolang-bench raw_any (empty = 0)",
    "raw_strict": "infolang-bench raw_strict (empty = 0)",
    "any": "any resolved evidence turn in the top k",
    "strict": "every resolved evidence turn in the top k",
}

_TURN = re.compile(r"D(\d+):(\d+)")
_PREFIX = re.compile(r"D(\d+):")
_STRICT = re.compile(r"D(\d+):(\d+)")
_SCALE = 1_000_000
_PAD, _NEVER = -1, -2  # padding; a gold string that can match no turn


def turn_code(dia_id: str) -> int:
    """``"D3:14"`` -> ``3_000_014``; ``-2`` for anything that is not exactly ``D<int>:<int>``
    with no leading zeros (so ``"D30:05"`` never equals the turn ``"D30:5"``, as a raw string
    comparison would have it)."""
    m = _TURN.fullmatch(dia_id)
    if m is None or str(int(m.group(1))) != m.group(1) or str(int(m.group(2))) != m.group(2):
        return _NEVER
    return int(m.group(1)) * _SCALE + int(m.group(2))


def parse_prefix_sessions(raw: Iterable[str]) -> set[int]:
    """MemPalace's and Engram's reading: the session of the first id in each string
    (``re.match(r"D(\\d+):")``); strings that do not start so give nothing."""
    return {int(m.group(1)) for s in raw if (m := _PREFIX.match(str(s)))}


def parse_strict_sessions(raw: Iterable[str]) -> set[int]:
    """memory-core-eval's reading: strings that are exactly ``D<s>:<t>`` once stripped."""
    return {int(m.group(1)) for s in raw if (m := _STRICT.fullmatch(str(s).strip()))}


def _pad(rows: Sequence[Sequence[int]], pad: int) -> Tensor:
    width = max((len(r) for r in rows), default=0) or 1
    out = torch.full((len(rows), width), pad, dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            out[i, : len(row)] = torch.tensor(list(row), dtype=torch.long)
    return out


def _session_table(sessions: Sequence[set[int]], num_sessions: int) -> Tensor:
    table = torch.zeros(len(sessions), num_sessions, dtype=torch.bool)
    for i, s in enumerate(sessions):
        if s:
            table[i, torch.tensor(sorted(s))] = True
    return table


def _membership(gold: Tensor, ranked: Tensor, k: int) -> Tensor:
    """``[B, E]``: gold code ``e`` is among the first ``k`` ranked codes (pads never match)."""
    top = ranked[:, :k]
    return ((gold.unsqueeze(2) == top.unsqueeze(1)) & (gold >= 0).unsqueeze(2)).any(dim=2)


def peer_metrics(retrieved_turns: Sequence[Sequence[str]],
                 evidence_raw: Sequence[Sequence[str]],
                 evidence: Sequence[Sequence[str]],
                 ks: Iterable[int] = (1, 5, 10)) -> dict[str, Tensor]:
    """Every rule of the module docstring at every ``k``.

    Args:
        retrieved_turns: per question, the LoCoMo turns its retrieval covers, best first
            (canonical dia_ids, as ``RetrievalResult.covered_turns`` gives them).
        evidence_raw: per question, the evidence strings as the release gives them.
        evidence: per question, the resolved canonical evidence ids (``Question.evidence``).
        ks: cut-offs (each >= 1).

    Returns:
        ``{"<rule>@<k>": Tensor[B] float64}``; NaN where the rule leaves a question out.
    """
    if not len(retrieved_turns) == len(evidence_raw) == len(evidence):
        raise ValueError(f"peer_metrics: {len(retrieved_turns)} rankings, {len(evidence_raw)} raw "
                         f"and {len(evidence)} resolved evidence lists")
    ks = [int(k) for k in ks]
    if any(k < 1 for k in ks):
        raise ValueError(f"peer_metrics: every k must be >= 1, got {ks}")
    ranked = _pad([[turn_code(t) for t in row] for row in retrieved_turns], _PAD)  # [B, L]
    raw = _pad([list(dict.fromkeys(turn_code(str(s)) for s in row)) for row in evidence_raw],
               _PAD)
    n_raw = torch.tensor([len(set(map(str, row))) for row in evidence_raw], dtype=torch.float64)
    resolved = _pad([list(dict.fromkeys(turn_code(e) for e in row)) for row in evidence], _PAD)
    n_resolved = (resolved >= 0).sum(dim=1)
    prefix = [parse_prefix_sessions(row) for row in evidence_raw]
    strict = [parse_strict_sessions(row) for row in evidence_raw]
    turn_session = torch.where(ranked >= 0, ranked // _SCALE, -1)  # [B, L]
    num_sessions = int(max([int(turn_session.max()) + 1, 1,
                            *(max(s) + 1 for s in prefix + strict if s)]))
    gold_prefix = _session_table(prefix, num_sessions)  # [B, S]
    gold_strict = _session_table(strict, num_sessions)
    # each session's first position in the ranking (L where absent), then its rank among the
    # distinct sessions: how many sessions appear before it
    B, L = ranked.shape
    first = torch.full((B, num_sessions + 1), L, dtype=torch.long)
    positions = torch.arange(L).expand(B, L)
    first.scatter_reduce_(1, torch.where(turn_session >= 0, turn_session, num_sessions),
                          positions, reduce="amin")
    first = first[:, :num_sessions]  # [B, S]
    present = first < L
    session_rank = ((first.unsqueeze(1) < first.unsqueeze(2)) & present.unsqueeze(1)).sum(dim=2)
    n_prefix = gold_prefix.sum(dim=1).to(torch.float64)
    out: dict[str, Tensor] = {}
    nan = torch.tensor(torch.nan, dtype=torch.float64)
    for k in ks:
        in_top_sessions = present & (session_rank < k)  # U[:k]
        in_top_turns = present & (first < k)  # the sessions of R[:k]
        hit_prefix = (gold_prefix & in_top_sessions).sum(dim=1).to(torch.float64)
        out[f"session_hit@{k}"] = torch.where(n_prefix > 0, (hit_prefix > 0).double(), nan)
        out[f"session_hit_turns@{k}"] = torch.where(
            gold_strict.any(dim=1), (gold_strict & in_top_turns).any(dim=1).double(), nan)
        out[f"session_recall@{k}"] = torch.where(n_prefix > 0, hit_prefix / n_prefix.clamp_min(1),
                                                 torch.ones_like(n_prefix))
        raw_found = _membership(raw, ranked, k).sum(dim=1).to(torch.float64)
        out[f"turn_recall_raw@{k}"] = torch.where(n_raw > 0, raw_found / n_raw.clamp_min(1),
                                                  torch.ones_like(n_raw))
        out[f"raw_any@{k}"] = (raw_found > 0).double()
        out[f"raw_strict@{k}"] = ((raw_found == n_raw) & (n_raw > 0)).double()
        found = _membership(resolved, ranked, k).sum(dim=1)
        out[f"any@{k}"] = torch.where(n_resolved > 0, (found > 0).double(), nan)
        out[f"strict@{k}"] = torch.where(n_resolved > 0, (found == n_resolved).double(), nan)
    return out


def cut_at_depth(retrieved_turns: Sequence[Sequence[str]], depth: int) -> list[list[str]]:
    """Each question's first ``depth`` ranked turns: a run's ranking as if it had retrieved only
    as many items as a peer does (Engram: 10), before a peer's rule is applied to it."""
    if depth < 1:
        raise ValueError(f"cut_at_depth: depth must be >= 1, got {depth}")
    return [list(row[:depth]) for row in retrieved_turns]


def with_neighbours(retrieved_turns: Sequence[Sequence[str]],
                    conversation_turns: Sequence[Sequence[str]], radius: int) -> list[list[str]]:
    """Each question's ranked turns followed by the turns within ``radius`` places of each of them
    in its conversation (``conversation_turns``: per question, every dia_id of its conversation in
    order; sessions end-to-end, so a neighbour may lie in the next or previous session), each turn
    once, ranked turns first. Hebb Mind's search returns each memory's two neighbouring turns on
    either side (``prev_turns = next_turns = 2``) and counts their sessions as retrieved.

    A ranked turn that is not in its conversation's list is an error naming it."""
    if radius < 0:
        raise ValueError(f"with_neighbours: radius must be >= 0, got {radius}")
    if len(retrieved_turns) != len(conversation_turns):
        raise ValueError(f"with_neighbours: {len(retrieved_turns)} rankings, "
                         f"{len(conversation_turns)} conversations")
    out = []
    for b, (row, order) in enumerate(zip(retrieved_turns, conversation_turns, strict=True)):
        place = {t: i for i, t in enumerate(order)}
        missing = [t for t in row if t not in place]
        if missing:
            raise ValueError(f"with_neighbours: question {b}: turn {missing[0]!r} is not in its "
                             "conversation's turns")
        near = [order[j] for t in row for j in range(max(place[t] - radius, 0),
                                                     min(place[t] + radius + 1, len(order)))]
        out.append(list(dict.fromkeys([*row, *near])))
    return out
