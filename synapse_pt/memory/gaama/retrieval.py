r"""GAAMA's retrieval, all questions of a conversation at once (``[N, B]`` blocks), as the public
code (gaama ``2d992f7``, ``services/ltm_retriever.py``) computes it (SPEC §2):

1. similarity: the code's vector store returns sqlite-vec's cosine distance turned into
   :math:`\mathrm{sim} = (1 + \cos) / 2` (``adapters/sqlite_vector.py``), used wherever
   similarity enters (seed weights, the score's similarity term, the LLM build's context
   threshold);
2. seeds: the ``seeds`` (40) nodes of any kind with the highest similarity, weights normalised to
   sum 1;
3. candidates: the nearest ``knn`` nodes (the code's ``max(2 * total budget, 2 * seeds)`` = 330)
   plus the seeds' neighbourhood to depth 2, the nearest set and the seeds drawn from what the
   code's store returns (``nearest="store"``, :func:`store_returns`) or from the question's
   conversation (``"conversation"``, ours);
4. personalised PageRank from the seeds on the seeds' neighbourhood (the code's expanded edges; 0
   for nearest-set nodes outside it; :func:`~synapse_pt.graph.ppr.personalised_pagerank`,
   continuation 0.6, 100 iterations, L1 tolerance 1e-6), hub dampening as the code (``"code"``,
   which cancels) or ``"effective"``;
5. score :math:`1.0 \cdot \mathrm{sim} / \max \mathrm{sim} + 0.1 \cdot \mathrm{PPR} / \max
   \mathrm{PPR}` over the candidates; a node found only through the graph, outside the nearest
   set, has similarity 0 (``graph_only_cosine="zero"``: the code's ``compute_similarity`` does not
   exist, 194-197) or its real one (``"real"``, ours);
6. the pack (:func:`pack`): the best ``max_facts`` (60) facts, ``max_reflections`` (20)
   reflections and ``max_episodes`` (80) episodes (concepts never), episodes re-sorted by time,
   trimmed to ``max_words`` (1,000) words by the code's proportional trim (:func:`trim_code`);
   returned in score order, each item listing the LoCoMo turns it covers (a fact: its episode).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from synapse_pt.graph.ppr import neighbourhood, personalised_pagerank
from synapse_pt.retrieval.dense import cosine_scores
from synapse_pt.retrieval.items import EPISODIC, RetrievedItem

from .graph import CONCEPT, EDGE_TYPES, EPISODE, FACT, REFLECTION, Block
from .settings import Retrieval


def code_similarity(cos: float | torch.Tensor) -> float | torch.Tensor:
    """GAAMA's similarity of a cosine: (1 + cos) / 2 in [0, 1] (``adapters/sqlite_vector.py``)."""
    return (1.0 + cos) / 2.0


def trim_code(lists: Mapping[str, Sequence[tuple[int, float]]], words: Mapping[int, int],
              budgets: Mapping[str, int], max_words: int) -> dict[str, list[tuple[int, float]]]:
    """GAAMA's word trim (``evals/locomo/locomo_eval.py``, ``_trim_memory_pack``), our code.

    ``lists``: per type (``"facts"``, ``"reflections"``, ``"skills"``, ``"episodes"``, in that
    order) its items ``(node, score)`` as packed (facts and reflections by score, episodes by
    time); ``words``: words of each node's text; ``budgets``: the per-type caps. While the items
    hold more than ``max_words`` words, the non-empty type whose share of the words is largest
    relative to its share of the budgets (ties: the earlier type) loses one item: an episode the
    lowest-scored (ties: the earliest), any other type its last (lowest-scored) item.
    """
    order = ("facts", "reflections", "skills", "episodes")
    items = {k: list(lists.get(k, ())) for k in order}
    total_budget = sum(budgets.get(k, 0) for k in order) or 1

    used = {k: sum(words[r] for r, _ in items[k]) for k in order}  # words kept per type
    while sum(used.values()) > max_words:
        non_empty = [k for k in order if items[k]]
        if not non_empty:
            break
        total = sum(used.values()) or 1
        worst, worst_ratio = None, -1.0
        for k in non_empty:
            target = budgets.get(k, 0) / total_budget
            ratio = (used[k] / total) / target if target > 0 else float("inf")
            if ratio > worst_ratio:
                worst, worst_ratio = k, ratio
        if worst == "episodes":
            low = min(range(len(items[worst])), key=lambda i: items[worst][i][1])
            node, _ = items[worst].pop(low)
        else:
            node, _ = items[worst].pop()
        used[worst] -= words[node]
    return items


def store_returns(blocks: Mapping[str, Block], query_emb: torch.Tensor, sample_ids: Sequence[str],
                  knn: int) -> dict[str, torch.Tensor]:
    """``{sample_id: [N, B] bool}``: the nodes of each conversation that the code's vector store
    returns to the ``B`` questions (``nearest="store"``). The store ranks every ingested
    conversation's nodes by cosine at once and takes the nearest ``max(2 knn, 20)``; the
    question's conversation is filtered after that step (sqlite-vec joins the scope columns after
    its k nearest: ``adapters/sqlite_vector.py`` 178-214), and at most ``knn`` of the rest are
    kept (238, :func:`scores`). A node without a row of its own (``Block.stored``: the LLM build's
    node whose key a later conversation wrote again) is never returned. Ties: the
    earlier-ingested node first."""
    names = list(blocks)
    x = torch.cat([blocks[name].x for name in names])  # [N_all, d]
    cos = cosine_scores(x, query_emb)  # [N_all, B]
    stored = torch.cat([torch.ones(len(blocks[name].kind), dtype=torch.bool, device=cos.device)
                        if blocks[name].stored is None else blocks[name].stored.to(cos.device)
                        for name in names])
    k = min(max(2 * knn, 20), int(stored.sum()))
    top = cos.masked_fill(~stored[:, None], float("-inf")).sort(
        dim=0, descending=True, stable=True).indices[:k]
    returned = torch.zeros_like(cos, dtype=torch.bool).scatter_(0, top, True)
    bounds = torch.tensor([0] + [len(blocks[name].kind) for name in names]).cumsum(0)
    where = {name: (int(bounds[i]), int(bounds[i + 1])) for i, name in enumerate(names)}
    return {name: returned[where[name][0]:where[name][1]] for name in set(sample_ids)}


def scores(r: Retrieval, block: Block, query_emb: torch.Tensor,
           similarity: torch.Tensor | None = None, returned: torch.Tensor | None = None
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(score [N, B], candidates [N, B])`` of one conversation's nodes for ``B`` questions
    (steps 1-5); ``similarity`` ``[N, B]`` replaces the similarity everywhere it enters
    (``fused_seeds``: the fused score, used as it is, not rescaled); ``returned`` ``[N, B]``
    (:func:`store_returns`): the only nodes the seeds and the nearest set are drawn from."""
    n = len(block.kind)
    if similarity is None:
        sim = code_similarity(cosine_scores(block.x, query_emb).to(torch.float64))  # [N, B]
    else:
        sim = similarity.to(torch.float64)
    allowed = torch.ones_like(sim, dtype=torch.bool) if returned is None else returned
    ranked = sim.masked_fill(~allowed, float("-inf"))
    order = ranked.sort(dim=0, descending=True, stable=True).indices  # ties: lower node
    k = min(r.seeds, n)
    seed_mask = torch.zeros_like(allowed).scatter_(0, order[:k], True) & allowed
    seed_weight = torch.where(seed_mask, sim.clamp_min(0.0), torch.zeros_like(sim))
    seed_weight = torch.where(seed_weight.sum(0, keepdim=True) > 0, seed_weight,
                              seed_mask.to(sim.dtype))  # all seeds non-positive: uniform
    hood = neighbourhood(block.edge_index, n, seed_mask, r.depth)
    # the code's candidates: its nearest knn nodes plus the seeds' neighbourhood
    near = torch.zeros_like(seed_mask).scatter_(0, order[:min(r.k_nearest, n)], True) & allowed
    cand = hood | near
    per_type = torch.tensor([r.reflection_edge_weight if t == "DERIVED_FROM_FACT"
                             else r.edge_weight for t in EDGE_TYPES], dtype=torch.float64,
                            device=sim.device)
    # PageRank walks the seeds' neighbourhood (the code's expanded edges); 0 elsewhere
    ppr = personalised_pagerank(block.edge_index, per_type[block.edge_type], n, seed_weight, hood,
                                alpha=r.alpha, max_iter=r.max_iter, tol=r.tol,
                                hub_dampening=r.hub_dampening, hub_degree=r.hub_degree)
    if r.graph_only_cosine == "zero":  # the code: no similarity outside its nearest set
        sim = torch.where(near, sim, torch.zeros_like(sim))
    low = torch.finfo(sim.dtype).min
    max_sim = sim.masked_fill(~cand, low).amax(dim=0, keepdim=True)
    max_ppr = ppr.masked_fill(~cand, low).amax(dim=0, keepdim=True)
    score = (r.cosine_weight * sim / max_sim.where(max_sim > 0, torch.ones_like(max_sim))
             + r.ppr_weight * ppr / max_ppr.where(max_ppr > 0, torch.ones_like(max_ppr)))
    return score.masked_fill(~cand, float("-inf")), cand


def pack(r: Retrieval, block: Block, ranked: list[tuple[int, float]]) -> list[RetrievedItem]:
    """Step 6: the per-type budgets, episodes by time, trimmed to ``max_words`` by the code's
    proportional trim; returned in score order."""
    budget = {FACT: r.max_facts, REFLECTION: r.max_reflections, EPISODE: r.max_episodes,
              CONCEPT: 0}
    taken: dict[str, list[tuple[int, float]]] = {FACT: [], REFLECTION: [], EPISODE: []}
    for node, s in ranked:
        k = block.kind[node]
        if budget[k] > len(taken.get(k, [])) and k in taken:
            taken[k].append((node, s))
    by_time = sorted(taken[EPISODE], key=lambda rs: block.timestamp[rs[0]])
    lists = {"facts": taken[FACT], "reflections": taken[REFLECTION], "episodes": by_time}
    words = {node: len(block.text[node].split()) for kind in lists.values() for node, _ in kind}
    budgets = {"facts": r.max_facts, "reflections": r.max_reflections, "skills": r.max_skills,
               "episodes": r.max_episodes}
    kept = [rs for part in trim_code(lists, words, budgets, r.max_words).values() for rs in part]
    kept.sort(key=lambda rs: (-rs[1], rs[0]))
    out = []
    for node, s in kept:
        covers = block.covers[node]
        if block.kind[node] == EPISODE:
            out.append(RetrievedItem(covers[0], block.text[node], EPISODIC, s,
                                     block.timestamp[node], block.speaker[node], dated=True))
        else:
            prefix = "R" if block.kind[node] == REFLECTION else "F"
            out.append(RetrievedItem(f"{prefix}:{node}", block.text[node], block.kind[node], s,
                                     block.timestamp[node], turn_ids=covers))
    return out
