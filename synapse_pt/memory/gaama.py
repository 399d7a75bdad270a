r"""GAAMA (public code swarna-kpaul/gaama) in the same harness: ``memory=gaama`` (SPEC §2).

Graph, per conversation, every edge stored in both directions (weight ``edge_weight``, 0.8):

* **episodes**: the turns, verbatim (the shared turn template), chained by ``NEXT``;
* **facts**: atomic statements, each ``DERIVED_FROM`` its episode. The LLM-free build (the only one
  so far, named ``gaama-llm-free`` in every result row) takes the sentences of each turn with
  first and second person replaced by the speakers' names
  (:func:`~synapse_pt.retrieval.text.resolve_pronouns`), so each reads standalone;
* **concepts**: topic labels (snake_case, never a person's name) from the configured LLM-free
  extractor, at most ``concepts_per_episode`` per episode (``HAS_CONCEPT``), and ``ABOUT_CONCEPT``
  from each fact to the concepts of its episode that it mentions;
* **reflections** (an LLM's generalisations over facts, ``DERIVED_FROM_FACT``): none LLM-free.

Retrieval, all questions at once, one ``[N_g, B_g]`` block per conversation:

1. seeds: the ``seeds`` (40) nodes of any kind with the highest cosine to the question, weights
   :math:`\cos^+` normalised to sum 1;
2. candidates: the seeds' neighbourhood to depth 2;
3. personalised PageRank from the seeds on the candidate subgraph
   (:func:`~synapse_pt.graph.ppr.personalised_pagerank`, continuation 0.6, 100 iterations, L1
   tolerance 1e-6), hub dampening as the code (``"code"``, which cancels) or ``"effective"``;
4. score :math:`1.0 \cdot \cos / \max \cos + 0.1 \cdot \mathrm{PPR} / \max \mathrm{PPR}` over the
   candidates; the code gives graph-only candidates cosine 0 (``graph_only_cosine="zero"``), the
   default computes their real cosine (``"real"``);
5. the pack: the best ``max_facts`` (60) facts, ``max_reflections`` (20) reflections and
   ``max_episodes`` (80) episodes (concepts never), facts first and episodes re-sorted by time,
   trimmed to ``max_words`` (1,000) words. Items are returned in score order, each listing the
   LoCoMo turns it covers (a fact: its episode).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from synapse_pt.data.records import Dialogue, Question, Turn
from synapse_pt.data.render import DEFAULT_TURN_TEMPLATE, TurnRenderer
from synapse_pt.graph.extraction import ConceptExtractor, drop_speakers
from synapse_pt.graph.ppr import HUB_DAMPENING, neighbourhood, personalised_pagerank
from synapse_pt.models.base import TextEncoder
from synapse_pt.retrieval.dense import cosine_scores
from synapse_pt.retrieval.text import resolve_pronouns, split_sentences

from .base import EPISODIC, MemorySystem, RetrievalResult, RetrievedItem
from .episodic import TurnRegistry
from .gate import build_gate

EPISODE, FACT, CONCEPT, REFLECTION = "episode", "fact", "concept", "reflection"
EDGE_TYPES = ("NEXT", "DERIVED_FROM", "DERIVED_FROM_FACT", "HAS_CONCEPT", "ABOUT_CONCEPT")


def concept_label(text: str) -> str:
    """A topic label in GAAMA's snake_case form (``"pottery class"`` -> ``"pottery_class"``)."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


@dataclass
class _Block:
    """One conversation's graph: node ``kind``/``text``/``turn`` (covering dia_id) lists, local
    ``edge_index`` ``[2, E]``, edge types ``[E]`` and the node embeddings ``x``."""

    sample_id: str
    kind: list[str]
    text: list[str]
    turn: list[str | None]
    timestamp: list[Any]
    speaker: list[str | None]
    edge_index: torch.Tensor
    edge_type: torch.Tensor
    x: torch.Tensor


class GAAMAMemory(MemorySystem):
    """GAAMA's episode-fact-concept graph and its seeded personalised-PageRank retrieval.

    Args:
        encoder: the embedder of every node and of the questions.
        extractor: the LLM-free concept extractor (``extractor=...``).
        seeds: seed nodes per question (code: 40).
        depth: candidate neighbourhood depth (code: 2).
        alpha: PageRank continuation (code: 0.6, i.e. restart 0.4).
        max_iter, tol: power iteration (code: 100, 1e-6).
        edge_weight: weight of every edge (code: 0.8).
        hub_dampening, hub_degree: ``"code"`` (cancels, as the code), ``"effective"`` or ``"off"``;
            hubs have degree above ``hub_degree`` (code: 50).
        cosine_weight, ppr_weight: the additive score (code: 1.0, 0.1).
        graph_only_cosine: ``"real"`` (ours) or ``"zero"`` (the code's behaviour).
        max_facts, max_reflections, max_episodes, max_words: the pack (code: 60, 20, 80, 1000).
        concepts_per_episode: concepts kept per episode (GAAMA's prompt: 1-3).
        tau_gate, gate, turn_template, device: as every memory.
    """

    name = "gaama"
    retrieval_fields = ("seeds", "depth", "alpha", "hub_dampening", "cosine_weight",
                        "ppr_weight", "graph_only_cosine", "max_facts", "max_reflections",
                        "max_episodes", "max_words", "tau_gate")

    def __init__(self, encoder: TextEncoder, extractor: ConceptExtractor, *, seeds: int = 40,
                 depth: int = 2, alpha: float = 0.6, max_iter: int = 100, tol: float = 1e-6,
                 edge_weight: float = 0.8, hub_dampening: str = "code", hub_degree: int = 50,
                 cosine_weight: float = 1.0, ppr_weight: float = 0.1,
                 graph_only_cosine: str = "real", max_facts: int = 60, max_reflections: int = 20,
                 max_episodes: int = 80, max_words: int = 1000, concepts_per_episode: int = 3,
                 tau_gate: float | None = None, gate: Mapping[str, Any] | None = None,
                 turn_template: str = DEFAULT_TURN_TEMPLATE, device: str = "cpu") -> None:
        if not getattr(extractor, "llm_free", False):
            raise ValueError("memory=gaama: only the LLM-free build exists so far (facts = "
                             "sentences, no reflections); use an LLM-free extractor")
        if hub_dampening not in HUB_DAMPENING:
            raise ValueError(f"memory.hub_dampening must be one of {HUB_DAMPENING}, got "
                             f"{hub_dampening!r}")
        if graph_only_cosine not in ("real", "zero"):
            raise ValueError(f"memory.graph_only_cosine must be 'real' or 'zero', got "
                             f"{graph_only_cosine!r}")
        for key, value in (("seeds", seeds), ("max_words", max_words),
                           ("concepts_per_episode", concepts_per_episode)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"memory.{key} must be an integer >= 1, got {value!r}")
        self.encoder, self.extractor = encoder, extractor
        self.seeds, self.depth, self.alpha = seeds, int(depth), float(alpha)
        self.max_iter, self.tol = int(max_iter), float(tol)
        self.edge_weight = float(edge_weight)
        self.hub_dampening, self.hub_degree = hub_dampening, int(hub_degree)
        self.cosine_weight, self.ppr_weight = float(cosine_weight), float(ppr_weight)
        self.graph_only_cosine = graph_only_cosine
        self.max_facts, self.max_reflections = int(max_facts), int(max_reflections)
        self.max_episodes, self.max_words = int(max_episodes), int(max_words)
        self.concepts_per_episode = concepts_per_episode
        self.tau_gate = tau_gate
        self.renderer = TurnRenderer(turn_template)
        self.device = torch.device(device)
        self.registry = TurnRegistry(self.renderer)
        self.gate = build_gate(gate, encoder, self.renderer, self.device)
        self.blocks: dict[str, _Block] = {}
        self.ingest_seconds = 0.0

    def describe(self) -> dict[str, object]:
        return {"memory": self.name, "build": "gaama-llm-free", "llm_free": True,
                "encoder": self.encoder.name, "extractor": self.extractor.name,
                "hub_dampening": self.hub_dampening, "graph_only_cosine": self.graph_only_cosine,
                "turn_template": self.renderer.template, "tau_gate": self.tau_gate,
                **self.gate.describe()}

    # ---------------------------------------------------------------------------- ingest
    def ingest_dialogues(self, dialogues: Sequence[Dialogue]) -> None:
        start = time.perf_counter()
        self.registry.add(dialogues)
        for d in dialogues:
            self.blocks[d.sample_id] = self._build(d)
        if self.gate.uses_turns:
            self.gate.ingest(dialogues)
        self.ingest_seconds += time.perf_counter() - start

    def _build(self, d: Dialogue) -> _Block:
        turns: list[Turn] = list(d.turns())
        kind: list[str] = []
        text: list[str] = []
        cover: list[str | None] = []
        stamp: list[Any] = []
        who: list[str | None] = []
        edges: list[tuple[int, int, int]] = []  # (source, target, type)

        def node(k: str, t: str, turn: Turn | None) -> int:
            kind.append(k)
            text.append(t)
            cover.append(turn.dia_id if turn is not None else None)
            stamp.append(turn.timestamp if turn is not None else None)
            who.append(turn.speaker if turn is not None and k == EPISODE else None)
            return len(kind) - 1

        def link(a: int, b: int, edge: str) -> None:
            t = EDGE_TYPES.index(edge)
            edges.extend([(a, b, t), (b, a, t)])

        episodes = [node(EPISODE, self.renderer(t), t) for t in turns]
        for a, b in zip(episodes, episodes[1:], strict=False):
            link(a, b, "NEXT")
        # one window per episode; the listener's name is not in a one-turn window's speakers, so
        # both speakers are dropped here (GAAMA's concepts are never person names)
        speakers = {d.speaker_a.casefold(), d.speaker_b.casefold()}
        concepts_of = [drop_speakers(c, speakers)
                       for c in self.extractor.extract([[t] for t in turns])]
        concept_node: dict[str, int] = {}
        for e, t, found in zip(episodes, turns, concepts_of, strict=True):
            listener = d.speaker_b if t.speaker == d.speaker_a else d.speaker_a
            mine = []
            for c in found[: self.concepts_per_episode]:
                label = concept_label(c)
                if not label:
                    continue
                if label not in concept_node:
                    concept_node[label] = node(CONCEPT, label.replace("_", " "), None)
                mine.append(label)
                link(e, concept_node[label], "HAS_CONCEPT")
            for sentence in split_sentences(t.content):
                f = node(FACT, resolve_pronouns(sentence, t.speaker, listener), t)
                link(f, e, "DERIVED_FROM")
                low = sentence.lower()
                for label in mine:
                    if any(w in low for w in label.split("_") if len(w) > 2):
                        link(f, concept_node[label], "ABOUT_CONCEPT")
        edge = torch.tensor(edges, dtype=torch.long).view(-1, 3)
        return _Block(d.sample_id, kind, text, cover, stamp, who,
                      edge[:, :2].T.contiguous().to(self.device), edge[:, 2].to(self.device),
                      self.encoder.encode(text).to(self.device))

    def edge_counts(self, sample_id: str) -> dict[str, int]:
        """Edges of each type in one conversation's graph (both directions counted)."""
        types = self.blocks[sample_id].edge_type.tolist()
        return {name: types.count(i) for i, name in enumerate(EDGE_TYPES)}

    # ---------------------------------------------------------------------------- retrieve
    def scores(self, block: _Block, query_emb: torch.Tensor) -> tuple[torch.Tensor,
                                                                       torch.Tensor]:
        """``(score [N, B], candidates [N, B])`` of one conversation's nodes for ``B`` questions
        (steps 1-4 of the module docstring)."""
        n = len(block.kind)
        cos = cosine_scores(block.x, query_emb).to(torch.float64)  # [N, B]
        k = min(self.seeds, n)
        top = cos.sort(dim=0, descending=True, stable=True).indices[:k]  # ties: lower node
        seed_mask = torch.zeros_like(cos, dtype=torch.bool).scatter_(0, top, True)
        seed_weight = torch.where(seed_mask, cos.clamp_min(0.0), torch.zeros_like(cos))
        seed_weight = torch.where(seed_weight.sum(0, keepdim=True) > 0, seed_weight,
                                  seed_mask.to(cos.dtype))  # all seeds non-positive: uniform
        cand = neighbourhood(block.edge_index, n, seed_mask, self.depth)
        weight = torch.full((block.edge_index.shape[1],), self.edge_weight, dtype=torch.float64,
                            device=cos.device)
        ppr = personalised_pagerank(block.edge_index, weight, n, seed_weight, cand,
                                    alpha=self.alpha, max_iter=self.max_iter, tol=self.tol,
                                    hub_dampening=self.hub_dampening,
                                    hub_degree=self.hub_degree)
        if self.graph_only_cosine == "zero":
            cos = torch.where(seed_mask, cos, torch.zeros_like(cos))
        low = torch.finfo(cos.dtype).min
        max_cos = cos.masked_fill(~cand, low).amax(dim=0, keepdim=True)
        max_ppr = ppr.masked_fill(~cand, low).amax(dim=0, keepdim=True)
        score = (self.cosine_weight * cos / max_cos.where(max_cos > 0, torch.ones_like(max_cos))
                 + self.ppr_weight * ppr / max_ppr.where(max_ppr > 0, torch.ones_like(max_ppr)))
        return score.masked_fill(~cand, float("-inf")), cand

    def retrieve(self, questions: Sequence[Question]) -> RetrievalResult:
        if not self.blocks:
            raise RuntimeError("GAAMAMemory.retrieve called before ingest")
        self.registry.graph_ids(questions, "cpu")  # names conversations never ingested
        query_emb = self.encoder.encode([q.question for q in questions]).to(self.device)
        items: list[list[RetrievedItem]] = [[] for _ in questions]
        c_ret = torch.zeros(len(questions))
        by_conv: dict[str, list[int]] = {}
        for i, q in enumerate(questions):
            by_conv.setdefault(q.sample_id, []).append(i)
        for sample_id, cols in by_conv.items():
            block = self.blocks[sample_id]
            score, _ = self.scores(block, query_emb[cols])
            order = score.sort(dim=0, descending=True, stable=True)
            for j, col in enumerate(cols):
                ranked = [(int(r), float(s)) for r, s in zip(order.indices[:, j].tolist(),
                                                             order.values[:, j].tolist(),
                                                             strict=True) if s != float("-inf")]
                items[col] = self._pack(block, ranked)
                c_ret[col] = ranked[0][1] if ranked else 0.0
        gated = (c_ret < self.tau_gate) if self.tau_gate is not None else torch.zeros(
            len(questions), dtype=torch.bool)
        return self.gated_result(questions, items, c_ret.float(), gated)

    def _pack(self, block: _Block, ranked: list[tuple[int, float]]) -> list[RetrievedItem]:
        """Step 5: the per-type budgets, facts then episodes by time, trimmed to ``max_words``;
        returned in score order."""
        budget = {FACT: self.max_facts, REFLECTION: self.max_reflections,
                  EPISODE: self.max_episodes, CONCEPT: 0}
        taken: dict[str, list[tuple[int, float]]] = {FACT: [], REFLECTION: [], EPISODE: []}
        for r, s in ranked:
            k = block.kind[r]
            if budget[k] > len(taken.get(k, [])) and k in taken:
                taken[k].append((r, s))
        pack = taken[FACT] + taken[REFLECTION] + sorted(taken[EPISODE],
                                                        key=lambda rs: block.timestamp[rs[0]])
        kept, words = [], 0
        for r, s in pack:
            n = len(block.text[r].split())
            if words + n > self.max_words:
                break
            words += n
            kept.append((r, s))
        kept.sort(key=lambda rs: (-rs[1], rs[0]))
        out = []
        for r, s in kept:
            turn = block.turn[r]
            if block.kind[r] == EPISODE:
                out.append(RetrievedItem(turn, block.text[r], EPISODIC, s, block.timestamp[r],
                                         block.speaker[r], dated=self.renderer.dated))
            else:
                out.append(RetrievedItem(f"F:{r}", block.text[r], block.kind[r], s,
                                         block.timestamp[r], turn_ids=(turn,) if turn else ()))
        return out
