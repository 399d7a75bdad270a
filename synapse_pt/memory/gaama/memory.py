"""GAAMA (public code swarna-kpaul/gaama) in the same harness: ``memory=gaama`` (SPEC §2).

Per conversation a graph of episodes (the turns as the code writes them, chained by ``NEXT``),
facts (``DERIVED_FROM`` their episodes), concepts (``HAS_CONCEPT``, ``ABOUT_CONCEPT``) and, with
an LLM, reflections (``DERIVED_FROM_FACT``, weight 0.5), every edge stored in both directions
(weight ``edge_weight``, 0.8). Built LLM-free (:mod:`.graph`) or by the model (:mod:`.build`);
retrieved by seeded personalised PageRank as the code does (:mod:`.retrieval`); settings in two
groups (:mod:`.settings`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from typing import Any

import torch

from synapse_pt.common import groups
from synapse_pt.data.render import DEFAULT_TURN_TEMPLATE, TurnRenderer
from synapse_pt.data.schema import Dialogue, Question
from synapse_pt.graph.extraction import ConceptExtractor, extractor_llm
from synapse_pt.graph.ppr import HUB_DAMPENING
from synapse_pt.models.base import TextEncoder
from synapse_pt.retrieval.dense import cosine_scores
from synapse_pt.retrieval.items import RetrievedItem

from ..base import MemorySystem, RetrievalResult
from ..declare import CostModel, ModelDependentBuild, SearchSpace, WordBudget
from ..episodic import TurnRegistry
from ..fused import inner_fused
from ..gate import build_gate
from . import retrieval as steps
from .build import LLMBuild
from .graph import (  # noqa: F401  (FACT, REFLECTION: the node kinds, read by callers)
    EDGE_TYPES,
    EPISODE,
    FACT,
    REFLECTION,
    Block,
    GraphBuilder,
    episode_texts,
    llm_free_graph,
)
from .llm_build import GAAMAFailure
from .settings import CHOICES, INT_MINIMUMS, Build, Retrieval

_RETRIEVAL = tuple(f.name for f in fields(Retrieval))


class GAAMAMemory(MemorySystem):
    """GAAMA's episode-fact-concept graph and its seeded personalised-PageRank retrieval.

    Args:
        encoder: the embedder of every node and of the questions.
        extractor: the concept extractor (LLM-free), or ``extractor=llm`` for the LLM build.
        retrieval, build: the settings (:class:`~.settings.Retrieval`, :class:`~.settings.Build`;
            the code's values by default).
        fused_seeds: ``None`` (the code's cosine) or :class:`~synapse_pt.memory.fused.FusedMemory`
            arguments: the fused LLM-free retriever's score of the best turn a node covers
            replaces the similarity of episodes, facts and reflections in the seeds and the score
            (issue 16); concepts keep their cosine.
        tau_gate, gate, turn_template, device: as every memory.
        **settings: the config's flat keys (``memory.seeds``, ``memory.chunk_tokens``), each a
            field of one of the two groups.

    The settings are read from the groups (``memory.retrieval.seeds``; the nearest set's size,
    ``memory.knn`` resolved by the code's rule when null, is ``memory.retrieval.k_nearest``) and
    change through :meth:`configure_retrieval`.
    """

    name = "gaama"
    retrieval_fields = (*(f for f in _RETRIEVAL if f not in (
        "max_iter", "tol", "edge_weight", "reflection_edge_weight", "hub_degree")), "tau_gate")
    int_minimums = INT_MINIMUMS
    choices = CHOICES
    # answer_from_memory.md (services/answer_from_memory.py) and the key-fact judge
    # (evals/locomo/locomo_eval.py)
    own_steps = ("gaama", "gaama")
    cost_model = CostModel(WordBudget("max_words", label="GAAMA's max_words pack"),
                           extraction=ModelDependentBuild())
    # the seeds, the walk and the graph-only reading (only cosine : PPR's ratio matters)
    search_space = SearchSpace(
        discrete={"seeds": (20, 40, 80), "depth": (1, 2, 3), "hub_dampening": HUB_DAMPENING,
                  "graph_only_cosine": ("real", "zero")},
        continuous={"alpha": (0.3, 0.9), "ppr_weight": (0.0, 1.0)},
        reference={"seeds": 40, "depth": 2, "hub_dampening": "code", "graph_only_cosine": "zero",
                   "alpha": 0.6, "ppr_weight": 0.1})  # the code's values

    def __init__(self, encoder: TextEncoder, extractor: ConceptExtractor, *,
                 retrieval: Retrieval | None = None, build: Build | None = None,
                 fused_seeds: Mapping[str, Any] | None = None, tau_gate: float | None = None,
                 gate: Mapping[str, Any] | None = None,
                 turn_template: str = DEFAULT_TURN_TEMPLATE, device: str = "cpu",
                 **settings: Any) -> None:
        self.llm = extractor_llm(extractor, "gaama")
        self.retrieval, self.build = groups.split_settings(
            "GAAMAMemory", ((Retrieval, retrieval), (Build, build)), settings)
        self.encoder, self.extractor = encoder, extractor
        self.llm_build = None if self.llm is None else LLMBuild(self.llm, encoder, self.build)
        self.tau_gate = tau_gate
        self.renderer = TurnRenderer(turn_template)
        self.device = torch.device(device)
        self.fused = inner_fused(encoder, fused_seeds, key="fused_seeds", owner="GAAMA",
                                 turn_template=turn_template, device=device)
        self._cover_rows: dict[str, torch.Tensor] = {}
        self.registry = TurnRegistry(self.renderer)
        self.gate = build_gate(gate, encoder, self.renderer, self.device)
        self.blocks: dict[str, Block] = {}
        self.ingest_seconds = 0.0
        self.store_counts: dict[str, int] = {}  # nearest="store": what the store returned

    def configure_retrieval(self, **settings: object) -> None:
        """As :meth:`MemorySystem.configure_retrieval`: every setting is checked before any is
        set; ``knn=None`` (or a sweep of the budgets or seeds while ``knn`` follows the code's
        rule) sets the nearest set by the code's rule."""
        unknown = sorted(set(settings) - set(self.retrieval_fields))
        if unknown:
            raise ValueError(f"{type(self).__name__}: {unknown} are not retrieval settings "
                             f"(those are {list(self.retrieval_fields)})")
        tau = settings.pop("tau_gate", self.tau_gate)
        self.retrieval = replace(self.retrieval, **settings)
        self.tau_gate = tau

    @property
    def failures(self) -> list[GAAMAFailure]:
        return [] if self.llm_build is None else self.llm_build.failures

    @property
    def templates(self) -> dict:
        return {} if self.llm_build is None else self.llm_build.templates

    def describe(self) -> dict[str, object]:
        llm_free, r = self.llm_build is None, self.retrieval
        return {"memory": self.name, "build": "gaama-llm-free" if llm_free else "gaama-llm",
                "llm_free": llm_free, "extraction_failures": len(self.failures),
                "extraction_attempts": 0 if llm_free else self.llm_build.extraction_attempts,
                "encoder": self.encoder.name, "extractor": self.extractor.name,
                "hub_dampening": r.hub_dampening, "graph_only_cosine": r.graph_only_cosine,
                "knn": r.k_nearest, "nearest": r.nearest,
                **({"store_nearest": dict(self.store_counts)} if r.nearest == "store" else {}),
                **({} if llm_free else self.llm_build.describe()),
                "upstream_prompts": [] if llm_free else self.llm_build.files,
                "turn_template": self.renderer.template, "tau_gate": self.tau_gate,
                **self.gate.describe()}

    # ---------------------------------------------------------------------------- ingest
    def ingest_dialogues(self, dialogues: Sequence[Dialogue]) -> None:
        start = time.perf_counter()
        self.registry.add(dialogues)
        graphs = (self.llm_build.graphs(dialogues) if self.llm_build is not None
                  else [llm_free_graph(d, self.extractor, self.build.concepts_per_episode)
                        for d in dialogues])
        for d, g in zip(dialogues, graphs, strict=True):
            self.blocks[d.sample_id] = self._block(d.sample_id, g)
        if self.llm_build is not None:  # what a vector search finds of each (the code's store)
            for sample_id, block in self.blocks.items():
                block.stored = torch.tensor(self.llm_build.store.stored(
                    sample_id, len(block.kind)), device=self.device)
        if self.fused is not None:
            self.fused.ingest_dialogues(dialogues)
            row = self.fused.row_of()
            for d in dialogues:  # per node, the fused rows of the turns it covers (-1: padding)
                covers = self.blocks[d.sample_id].covers
                width = max(1, max(len(c) for c in covers))
                self._cover_rows[d.sample_id] = torch.tensor(
                    [[row[(d.sample_id, t)] for t in c] + [-1] * (width - len(c))
                     for c in covers], dtype=torch.long, device=self.device)
        if self.gate.uses_turns:
            self.gate.ingest(dialogues)
        self.ingest_seconds += time.perf_counter() - start

    def _block(self, sample_id: str, g: GraphBuilder) -> Block:
        edge = torch.tensor(g.edges, dtype=torch.long).view(-1, 3)
        return Block(sample_id, g.kind, g.text, g.covers, g.stamp, g.who,
                     edge[:, :2].T.contiguous().to(self.device), edge[:, 2].to(self.device),
                     self.encoder.encode(g.text).to(self.device))

    @staticmethod
    def episode_texts(d: Dialogue) -> dict[str, str]:
        """``{dia_id: episode text}`` as the code writes them (:func:`.graph.episode_texts`)."""
        return episode_texts(d)

    _similarity = staticmethod(steps.code_similarity)

    def edge_counts(self, sample_id: str) -> dict[str, int]:
        """Edges of each type in one conversation's graph (both directions counted)."""
        types = self.blocks[sample_id].edge_type.tolist()
        return {name: types.count(i) for i, name in enumerate(EDGE_TYPES)}

    # ---------------------------------------------------------------------------- retrieve
    def store_returns(self, query_emb: torch.Tensor, sample_ids: Sequence[str]
                      ) -> dict[str, torch.Tensor]:
        """:func:`.retrieval.store_returns` over the ingested conversations."""
        return steps.store_returns(self.blocks, query_emb, sample_ids, self.retrieval.k_nearest)

    def scores(self, block: Block, query_emb: torch.Tensor,
               similarity: torch.Tensor | None = None, returned: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`.retrieval.scores` under the current settings."""
        return steps.scores(self.retrieval, block, query_emb, similarity, returned)

    def _pack(self, block: Block, ranked: list[tuple[int, float]]) -> list[RetrievedItem]:
        return steps.pack(self.retrieval, block, ranked)

    def _count_store(self, returned: Mapping[str, torch.Tensor],
                     by_conv: Mapping[str, list[int]]) -> None:
        """Tallies, over the questions retrieved so far, how many of their conversation's nodes
        the store returned: fewer than ``knn``, fewer than ``seeds``, none (in describe())."""
        got = torch.cat([returned[sid][:, cols].sum(0) for sid, cols in by_conv.items()])
        knn = self.retrieval.k_nearest
        for key, n in (("questions", len(got)), ("below_knn", int((got < knn).sum())),
                       ("below_seeds", int((got < self.retrieval.seeds).sum())),
                       ("none", int((got == 0).sum())),
                       ("nearest_sum", int(got.clamp(max=knn).sum()))):
            self.store_counts[key] = self.store_counts.get(key, 0) + n

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
        fused = self.fused.normalised_scores(questions) if self.fused is not None else None
        returned = (self.store_returns(query_emb, list(by_conv))
                    if self.retrieval.nearest == "store" else None)
        if returned is not None:
            self._count_store(returned, by_conv)
        for sample_id, cols in by_conv.items():
            block = self.blocks[sample_id]
            similarity = None
            if fused is not None:
                similarity = self.fused_similarity(block, query_emb[cols], fused[:, cols])
            score, _ = self.scores(block, query_emb[cols], similarity,
                                   None if returned is None else returned[sample_id][:, cols])
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

    def fused_similarity(self, block: Block, query_emb: torch.Tensor, fused: torch.Tensor
                         ) -> torch.Tensor:
        """``[N, B]``: the fused retriever's normalised score (``fused`` ``[N_turns, B]``) of the
        best turn a node covers (episodes, facts, reflections); concepts keep their cosine."""
        rows = self._cover_rows[block.sample_id]  # [N, C]
        taken = fused[rows.clamp_min(0)]  # [N, C, B]
        taken = taken.masked_fill((rows < 0)[:, :, None], float("-inf")).amax(dim=1)
        cos = cosine_scores(block.x, query_emb).to(taken.dtype)
        return torch.where((rows >= 0).any(dim=1)[:, None], taken, cos)
