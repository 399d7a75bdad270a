"""Baseline memories over the conversation's turns (SPEC §2): dense RAG, BM25, hybrid, full context.

All of them score every turn of a question's own conversation for all questions at once
(``[N, B]`` tensors) and return the top-k turns. ``c_ret`` is the top item's retrieval score; the
baselines answer everything unless ``tau_gate`` is set (then a query is gated when ``c_ret`` is
below it, the same rule SYNAPSE uses) or ``gate`` names another rejection signal
(:mod:`synapse_pt.memory.gate`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from synapse_pt.common.errors import ConfigError
from synapse_pt.data.render import DEFAULT_TURN_TEMPLATE, TurnRenderer
from synapse_pt.data.schema import Dialogue, Question
from synapse_pt.models.base import TextEncoder
from synapse_pt.retrieval.bm25 import BM25Index
from synapse_pt.retrieval.dense import cosine_scores, masked_topk, own_graph_mask
from synapse_pt.retrieval.tokenize import tokenize

from .base import MemorySystem, RetrievalResult, padded_rows, require_int
from .declare import CostModel, SearchSpace, TurnContext, WholeConversation
from .episodic import TurnRegistry
from .gate import build_gate


def descending_rank(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[N, B]`` 1-based rank of each row within its column (rows outside ``mask`` rank last)."""
    order = scores.masked_fill(~mask, float("-inf")).argsort(dim=0, descending=True, stable=True)
    ranks = torch.empty_like(order)
    positions = torch.arange(1, scores.shape[0] + 1, device=scores.device)
    ranks.scatter_(0, order, positions[:, None].expand_as(order))
    return ranks


class TurnMemory(MemorySystem):
    """Base of the turn-level baselines: holds the turns, their embeddings and a BM25 index.

    Subclasses implement :meth:`score` (``[N, B]``, higher is better). Every turn is indexed
    (embedded, BM25-tokenised) and shown to the answer model as ``turn_template`` renders it (the
    template all memory systems share, :mod:`synapse_pt.data.render`).
    """

    name = "turns"
    retrieval_fields = ("k", "tau_gate")
    int_minimums = {"k": 1}
    needs_embeddings = True
    needs_bm25 = True

    def __init__(self, encoder: TextEncoder | None = None, *, k: int = 30,
                 tau_gate: float | None = None, turn_template: str = DEFAULT_TURN_TEMPLATE,
                 device: str = "cpu", gate: Mapping[str, Any] | None = None) -> None:
        if self.needs_embeddings and encoder is None:
            raise ValueError(f"{type(self).__name__} needs an encoder")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"memory.k must be an integer >= 1, got {k!r}")
        if tau_gate is not None and not float(tau_gate) >= 0.0:
            raise ConfigError(f"memory.tau_gate must be >= 0 or null, got {tau_gate!r}")
        self.encoder = encoder
        self.renderer = TurnRenderer(turn_template)
        self.k = k
        self.tau_gate = tau_gate
        self.device = torch.device(device)
        self.registry = TurnRegistry(self.renderer)
        self.gate = build_gate(gate, encoder, self.renderer, self.device)
        self.keys: list[tuple[str, str]] = []
        self.node_graph = torch.empty(0, dtype=torch.long, device=self.device)
        self.x: torch.Tensor | None = None
        self.bm25: BM25Index | None = None
        self.ingest_seconds = 0.0

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"memory": self.name, "k": self.k, "tau_gate": self.tau_gate,
                                  "turn_template": self.renderer.template, **self.gate.describe()}
        if self.encoder is not None:
            out["encoder"] = self.encoder.name
        return out

    def ingest_dialogues(self, conversations: Sequence[Dialogue]) -> None:
        start = time.perf_counter()
        first = len(self.registry.order)
        self.registry.add(conversations)
        turns = [t for c in conversations for t in c.turns()]
        self.keys.extend((t.sample_id, t.dia_id) for t in turns)
        graph = torch.tensor([first + i for i, c in enumerate(conversations)
                              for _ in range(c.num_turns)], dtype=torch.long, device=self.device)
        self.node_graph = torch.cat([self.node_graph, graph])
        texts = self.renderer.render(turns)
        if self.needs_embeddings:
            emb = self.encoder.encode(texts).to(self.device)
            self.x = emb if self.x is None else torch.cat([self.x, emb])
        if self.needs_bm25:
            self.bm25 = BM25Index([tokenize(self.renderer(self.registry.turns[k]))
                                   for k in self.keys], doc_group=self.node_graph)
        if self.gate.uses_turns:
            self.gate.ingest(conversations)
        self.ingest_seconds += time.perf_counter() - start

    def score(self, questions: Sequence[Question], mask: torch.Tensor,
              query_graph: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def evidence_index(self, questions: Sequence[Question]) -> torch.Tensor:
        """``[B, E]`` turn rows of each question's evidence, padded with -1: the input of
        :func:`~synapse_pt.eval.qa.scorers.retrieval.evidence_recall_from_index`."""
        row = {key: i for i, key in enumerate(self.keys)}
        missing = [(q.key, e) for q in questions for e in q.evidence if (q.sample_id, e) not in row]
        if missing:
            raise KeyError(f"evidence turns that were not ingested: {missing[:5]}")
        return padded_rows([[row[(q.sample_id, e)] for e in q.evidence] for q in questions],
                           self.device)

    def _dense(self, questions: Sequence[Question]) -> torch.Tensor:
        q = self.encoder.encode([q.question for q in questions]).to(self.device)
        return cosine_scores(self.x, q)

    def _lexical(self, questions: Sequence[Question], query_graph: torch.Tensor) -> torch.Tensor:
        return self.bm25.scores([tokenize(q.question) for q in questions],
                                query_group=query_graph).T.to(self.device)

    def retrieve(self, questions: Sequence[Question]) -> RetrievalResult:
        if not self.keys:
            raise RuntimeError(f"{type(self).__name__}.retrieve called before ingest")
        query_graph = self.registry.graph_ids(questions, self.device)
        mask = own_graph_mask(self.node_graph, query_graph)
        scores = self.score(questions, mask, query_graph)
        top, idx = masked_topk(scores, mask, self.k)
        valid = torch.isfinite(top)
        c_ret = torch.where(valid[0], top[0], torch.zeros_like(top[0])).float()
        gated = (c_ret < self.tau_gate) if self.tau_gate is not None else torch.zeros_like(
            c_ret, dtype=torch.bool)
        items = []
        for row_idx, row_score, row_ok in zip(idx.T.tolist(), top.T.tolist(), valid.T.tolist(),
                                              strict=True):
            items.append([self.registry.episodic_item(*self.keys[i], s)
                          for i, s, ok in zip(row_idx, row_score, row_ok, strict=True) if ok])
        return self.gated_result(questions, items, c_ret, gated)


class VectorRAG(TurnMemory):
    """Dense top-k over turns: cosine of MiniLM embeddings (the ``vectors_only`` ablation)."""

    name = "vector_rag"
    needs_bm25 = False
    cost_model = CostModel(TurnContext("k"))
    # nothing but the depth is retrieval-only: k below 10 is the only change recall@10 sees
    search_space = SearchSpace(discrete={"k": (5, 10, 30)}, reference={"k": 30})

    def score(self, questions, mask, query_graph):
        return self._dense(questions)


class BM25Memory(TurnMemory):
    """Lexical top-k over turns with BM25Okapi scores."""

    name = "bm25"
    needs_embeddings = False
    cost_model = CostModel(TurnContext("k"))
    # nothing but the depth is retrieval-only: k below 10 is the only change recall@10 sees
    search_space = SearchSpace(discrete={"k": (5, 10, 30)}, reference={"k": 30})

    def __init__(self, encoder: TextEncoder | None = None, **kwargs) -> None:
        super().__init__(encoder, **kwargs)

    def score(self, questions, mask, query_graph):
        return self._lexical(questions, query_graph)


class HybridRRF(TurnMemory):
    """Reciprocal rank fusion of the dense and BM25 rankings.

    .. math::
        s_i = \\frac{1}{k_{rrf} + r^{dense}_i} + \\frac{1}{k_{rrf} + r^{bm25}_i}
    """

    name = "hybrid"
    retrieval_fields = ("k", "tau_gate", "k_rrf")
    int_minimums = {"k": 1, "k_rrf": 0}  # RRF's 1 / (k_rrf + rank), ranks from 1
    cost_model = CostModel(TurnContext("k"))
    # RRF's constant: small values favour the top of either ranking, large ones agreement
    search_space = SearchSpace(discrete={"k_rrf": (0, 5, 10, 20, 30, 60, 100, 200)},
                               reference={"k_rrf": 60})  # the usual RRF constant

    def __init__(self, encoder: TextEncoder | None = None, *, k_rrf: int = 60, **kwargs) -> None:
        super().__init__(encoder, **kwargs)
        self.k_rrf = require_int("k_rrf", k_rrf, self.int_minimums["k_rrf"])

    def score(self, questions, mask, query_graph):
        dense_rank = descending_rank(self._dense(questions), mask)
        lexical_rank = descending_rank(self._lexical(questions, query_graph), mask)
        return 1.0 / (self.k_rrf + dense_rank) + 1.0 / (self.k_rrf + lexical_rank)


class FullContext(TurnMemory):
    """Every turn of the conversation, in time order (the paper's full-context baseline)."""

    name = "full_context"
    retrieval_fields = ()
    cost_model = CostModel(WholeConversation())
    search_space = SearchSpace()  # nothing to tune: the run's configuration is the one candidate
    needs_embeddings = False
    needs_bm25 = False

    def __init__(self, encoder: TextEncoder | None = None, *,
                 turn_template: str = DEFAULT_TURN_TEMPLATE, device: str = "cpu") -> None:
        super().__init__(encoder, k=10**9, tau_gate=None, turn_template=turn_template,
                         device=device)

    def score(self, questions, mask, query_graph):
        # earlier turns score higher; the prompt orders items by time anyway
        n = self.node_graph.shape[0]
        order = torch.arange(n, 0, -1, device=self.device, dtype=torch.float32)
        return order[:, None].expand(n, len(questions))

    def retrieve(self, questions: Sequence[Question]) -> RetrievalResult:
        result = super().retrieve(questions)
        ones = torch.ones(len(questions))
        return RetrievalResult(result.items, ones, result.gated, gate_score=ones)
