"""One question's spreading activation, made inspectable: which question shows it, and the
subgraph it lit up (the input of :func:`synapse_pt.eval.reports.plots.activation_subgraph_plot`).

The question is chosen from the data, not by hand: among the questions of one category (default
1, multi-hop), an evidence turn that SYNAPSE ranks within its top ``k`` while similarity alone
ranks it at ``k`` or below, with non-zero activation (the activation reached it); the pair with
the largest rank gain (cosine rank minus SYNAPSE rank) wins, ties to the earlier question.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from synapse_pt.data.schema import Question
from synapse_pt.graph.types import EDGE_TYPE_NAMES, NODE_TYPE_NAMES

__all__ = ["ActivationExample", "descending_rank", "pick_activation_example"]


def descending_rank(score: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[N, B]`` 0-based rank of every node in its column by ``score``, highest first, ties to
    the smaller node id (a stable sort), among ``mask``; nodes outside the mask get ``N``."""
    masked = score.masked_fill(~mask, float("-inf"))
    order = torch.sort(masked, dim=0, descending=True, stable=True).indices
    ranks = torch.empty_like(order)
    ranks.scatter_(0, order, torch.arange(score.size(0), device=score.device)[:, None]
                   .expand_as(order).contiguous())
    return ranks.masked_fill(~mask, score.size(0))


@dataclass
class ActivationExample:
    """The chosen question and the subgraph its activation touched.

    ``nodes``: one dict per drawn node (``key``, ``text``, ``type``, ``a0``, ``activation``,
    ``cos``, ``score``, ``synapse_rank``, ``cos_rank``, ``anchor``, ``evidence``, ``retrieved``,
    ``turn_order``); ``edges``: ``(i, j, type, weight)`` between drawn nodes, positions into
    ``nodes``; ``target``: position of the evidence turn the criterion picked."""

    question: Question
    target: int
    nodes: list[dict]
    edges: list[tuple[int, int, str, float]]
    k: int

    @property
    def gain(self) -> int:
        node = self.nodes[self.target]
        return int(node["cos_rank"] - node["synapse_rank"])


def pick_activation_example(memory, questions: Sequence[Question], *, category: int = 1,
                            k: int | None = None, max_retrieved: int = 10
                            ) -> ActivationExample | None:
    """Choose by the module's criterion among ``questions`` of ``category`` and extract its
    subgraph: the anchors, every node with non-zero activation, the top ``max_retrieved``
    retrieved nodes and the evidence turns, with the edges among them. ``memory`` is an
    ingested :class:`~synapse_pt.memory.synapse.SynapseMemory`; ``k`` defaults to its
    ``params.k``. ``None`` when no question meets the criterion."""
    pool = [q for q in questions if q.category == category and q.evidence]
    if not pool:
        return None
    k = int(memory.params.k if k is None else k)
    g = memory.batch
    evidence = memory.evidence_index(pool)  # [B, E] global ids, -1 padded
    best: tuple[int, int, int, int, int] | None = None  # (gain, -col, graph, col, node)
    blocks = {}
    for graph, cols, sig in memory.signals(pool):
        block = g.block(graph)
        n0 = block.offset
        episodic = (block.node_type == 0)[:, None]
        syn_rank = descending_rank(sig.score, sig.rank_mask)
        cos_rank = descending_rank(sig.cos, sig.mask & episodic)
        blocks[graph] = (cols, sig, syn_rank, cos_rank)
        for j, col in enumerate(cols.tolist()):
            ev = evidence[col]
            ev = ev[ev >= 0] - n0
            if ev.numel() == 0:
                continue
            ok = (syn_rank[ev, j] < k) & (cos_rank[ev, j] >= k) & (sig.activation[ev, j] > 0)
            for node in ev[ok].tolist():
                gain = int(cos_rank[node, j] - syn_rank[node, j])
                cand = (gain, -col, graph, col, node)
                if best is None or cand[:2] > best[:2]:
                    best = cand
    if best is None:
        return None
    _, _, graph, col, target = best
    cols, sig, syn_rank, cos_rank = blocks[graph]
    j = int((cols == col).nonzero()[0])
    block = g.block(graph)
    n0, n1 = block.nodes.start, block.nodes.stop
    ev = evidence[col]
    ev_local = set((ev[ev >= 0] - n0).tolist())
    retrieved = set(torch.nonzero(syn_rank[:, j] < max_retrieved).flatten().tolist())
    anchors = set(torch.nonzero(sig.anchors[:, j]).flatten().tolist())
    lit = set(torch.nonzero(sig.activation[:, j] > 0).flatten().tolist())
    chosen = sorted(anchors | lit | retrieved | ev_local | {target})
    pos = {node: p for p, node in enumerate(chosen)}
    keys, texts = g.node_keys[n0:n1], g.texts[n0:n1]
    node_type = block.node_type.tolist()
    nodes = [{"key": keys[i], "text": texts[i], "type": NODE_TYPE_NAMES[node_type[i]],
              "a0": float(sig.a0[i, j]), "activation": float(sig.activation[i, j]),
              "cos": float(sig.cos[i, j]), "score": float(sig.score[i, j]),
              "synapse_rank": int(syn_rank[i, j]), "cos_rank": int(cos_rank[i, j]),
              "anchor": i in anchors, "evidence": i in ev_local, "retrieved": i in retrieved,
              "turn_order": i} for i in chosen]
    src, dst = block.edge_index.tolist()
    etype, weight = block.edge_type.tolist(), block.edge_weight.tolist()
    edges = [(pos[s], pos[d], EDGE_TYPE_NAMES[t], w)
             for s, d, t, w in zip(src, dst, etype, weight, strict=True)
             if s in pos and d in pos]
    return ActivationExample(pool[col], pos[target], nodes, edges, k)
