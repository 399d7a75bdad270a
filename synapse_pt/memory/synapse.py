"""The SYNAPSE memory system (SPEC §1): episodic-semantic graph + spreading-activation retrieval."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from synapse_pt.data.records import Dialogue, Question
from synapse_pt.data.render import DEFAULT_TURN_TEMPLATE, TurnRenderer
from synapse_pt.graph.batch import GraphBatch
from synapse_pt.graph.consolidation import GraphBuilder
from synapse_pt.graph.extraction import ConceptExtractor, NoConceptExtractor
from synapse_pt.graph.pagerank import rescale_pagerank
from synapse_pt.graph.types import SEMANTIC as SEMANTIC_NODE
from synapse_pt.models.base import TextEncoder
from synapse_pt.nn.activation import ActivationDynamics
from synapse_pt.nn.functional import activation_adjacency
from synapse_pt.retrieval.bm25 import BM25Index
from synapse_pt.retrieval.dense import cosine_scores
from synapse_pt.retrieval.synapse import (
    RankedBatch,
    SynapseParams,
    SynapseSignals,
    Triggers,
    activation_layer,
    query_triggers,
    synapse_retrieve,
    synapse_signals,
)
from synapse_pt.retrieval.text import Analyzer, neutralise_speakers

from .base import SEMANTIC, MemorySystem, RetrievalResult, RetrievedItem, padded_rows
from .episodic import TurnRegistry
from .fused import inner_fused
from .gate import build_gate

log = logging.getLogger(__name__)

TRIGGER_OPTIONS = ("neutralise_speakers", "stopwords", "stem")


def _question_key(questions: Sequence[Question]) -> tuple:
    """What identifies a batch of questions for the sweep caches (the same questions asked
    chunk after chunk)."""
    return tuple((q.sample_id, q.qa_index, q.question) for q in questions)


def _scalar(value: object) -> object:
    """A hyperparameter as a plain number where it is one (a sweep may hold a tensor)."""
    if isinstance(value, torch.Tensor):
        return float(value) if value.numel() == 1 else value.tolist()
    return value


class SynapseMemory(MemorySystem):
    """SYNAPSE: ingest conversations into graphs; retrieve by spreading activation (SPEC §1.2).

    Args:
        encoder: the text encoder for turns, concepts and queries.
        extractor: the concept extractor used at consolidation.
        graph: keyword arguments of :class:`~synapse_pt.graph.consolidation.GraphBuilder`
            (window ``N``, ``tau_dup``, ``rho``, association weighting, maintenance settings).
        params: retrieval hyperparameters (:class:`~synapse_pt.retrieval.synapse.SynapseParams`).
        use_graph: False for the ``no_graph`` ablation: episodic nodes only, no edges.
        bm25: ``k1``, ``b``, ``epsilon`` of the lexical trigger.
        group_by_graph: run the retrieval maths per conversation block (see :meth:`retrieve`).
        turn_template: how an episodic node renders its turn for embedding, BM25 and the prompt
            (the template every memory system shares, :mod:`synapse_pt.data.render`).
        device: where the graph tensors and the retrieval maths run.
        triggers: the query and text processing of the two triggers (issue 16; all off = the
            paper's): ``neutralise_speakers`` removes the speakers' names from the dense query
            (:func:`~synapse_pt.retrieval.text.neutralise_speakers`), ``stopwords`` and ``stem``
            set the BM25 analyser (:class:`~synapse_pt.retrieval.text.Analyzer`).
        fused_trigger: ``None`` (the paper's dense trigger) or the arguments of a
            :class:`~synapse_pt.memory.fused.FusedMemory` built over the same turns; its fused
            score, divided by each question's best, replaces the cosine of episodic nodes
            everywhere the cosine enters retrieval (anchors, energy, triple score); concept nodes
            keep their cosine. With ``lambda2 = 0`` and turns ranked, SYNAPSE then ranks as the
            fused retriever: what activation adds on top of it is measurable.
        gate: the rejection gate (:func:`~synapse_pt.memory.gate.build_gate`; ``None``: the
            paper's, ``C_ret < tau_gate``).
        compile: run each activation step's inhibition and firing as one compiled kernel
            (:class:`~synapse_pt.nn.ActivationDynamics` ``compile``; same result, the first
            retrieval compiles it: worth it for sweeps and large batches).
    """

    name = "synapse"
    retrieval_fields = ("params", "group_by_graph", "compile")

    def __init__(self, encoder: TextEncoder, extractor: ConceptExtractor, *,
                 graph: Mapping[str, Any] | None = None,
                 params: SynapseParams | Mapping[str, Any] | None = None,
                 use_graph: bool = True, bm25: Mapping[str, float] | None = None,
                 group_by_graph: bool = True, turn_template: str = DEFAULT_TURN_TEMPLATE,
                 device: str = "cpu", triggers: Mapping[str, bool] | None = None,
                 fused_trigger: Mapping[str, Any] | None = None,
                 gate: Mapping[str, Any] | None = None, compile: bool = False) -> None:
        triggers = dict(triggers or {})
        unknown = sorted(set(triggers) - set(TRIGGER_OPTIONS))
        if unknown:
            raise ValueError(f"memory.triggers: unknown options {unknown}; known: "
                             f"{list(TRIGGER_OPTIONS)}")
        self.triggers = {k: bool(triggers.get(k, False)) for k in TRIGGER_OPTIONS}
        self.analyzer = Analyzer(stopwords=self.triggers["stopwords"],
                                 stem=self.triggers["stem"])
        self.encoder = encoder
        self.renderer = TurnRenderer(turn_template)
        self.fused = inner_fused(encoder, fused_trigger, key="fused_trigger", owner="SYNAPSE",
                                 turn_template=turn_template, device=device)
        self._fused_rows: torch.Tensor | None = None
        self._fused_cache: tuple[tuple, torch.Tensor] | None = None
        # a sweep's query inputs, reused chunk after chunk (reset by ingest and reconfiguration)
        self._sweep_inputs: tuple[tuple, tuple[torch.Tensor, ...]] | None = None
        # and the triggers of each conversation's block of them, per (graph, k_anchor,
        # bm25_trigger, energy) (reset with the inputs)
        self._sweep_triggers: dict[tuple, Triggers] = {}
        self.use_graph = use_graph
        self.group_by_graph = group_by_graph
        self.compile = bool(compile)
        self.extractor = extractor if use_graph else NoConceptExtractor()
        self.params = (params if isinstance(params, SynapseParams)
                       else SynapseParams(**(params or {})))
        self.device = torch.device(device)
        self.builder = GraphBuilder(encoder, self.extractor, device=str(self.device),
                                    renderer=self.renderer, **dict(graph or {}))
        self.bm25_args = dict(bm25 or {})
        self.registry = TurnRegistry(self.renderer)
        self.gate = build_gate(gate, encoder, self.renderer, self.device)
        self.graphs: list = []
        self.batch: GraphBatch | None = None
        self.bm25: BM25Index | None = None
        self._pagerank: dict[str, torch.Tensor] = {}
        self._adjacency: dict[tuple[int | None, bool], torch.Tensor] = {}
        self.ingest_seconds = 0.0

    def configure_retrieval(self, **settings: object) -> None:
        params = settings.pop("params", None)
        super().configure_retrieval(**settings)
        self._sweep_inputs = None
        self._sweep_triggers = {}
        if params is not None:
            self.params = (params if isinstance(params, SynapseParams)
                           else SynapseParams(**dict(params)))

    def describe(self) -> dict[str, object]:
        return {"memory": self.name, "encoder": self.encoder.name, "extractor": self.extractor.name,
                "llm_free_extractor": bool(getattr(self.extractor, "llm_free", False)),
                # windows whose concepts an LLM extractor could not give even after the repair
                # round (each named in the log); 0 for an LLM-free extractor
                "extraction_failures": int(getattr(self.extractor, "num_failed_windows", 0)),
                "use_graph": self.use_graph, "turn_template": self.renderer.template,
                "triggers": dict(self.triggers),
                "fused_trigger": None if self.fused is None else self.fused.describe(),
                "tau_gate": _scalar(self.params.tau_gate), **self.gate.describe()}

    def ingest_dialogues(self, conversations: Sequence[Dialogue]) -> None:
        start = time.perf_counter()
        self.registry.add(conversations)
        graphs = self.builder.build_many(list(conversations))
        if not self.use_graph:
            for g in graphs:  # episodic nodes only: drop every edge (temporal ones included)
                g.keep_edges(torch.zeros(g.num_edges, dtype=torch.bool, device=g.device))
                g.set_pagerank(torch.full((g.num_nodes,), 1.0 / max(1, g.num_nodes),
                                          device=g.device))
        self.graphs.extend(graphs)
        self.batch = GraphBatch(self.graphs, device=self.device)
        self.bm25 = BM25Index([self.analyzer(t) for t in self.batch.texts],
                              doc_group=self.batch.batch,
                              **self.bm25_args)
        self._pagerank = {}
        self._adjacency = {}
        self._sweep_inputs = None
        self._sweep_triggers = {}
        if self.fused is not None:
            self._fused_cache = None
            self.fused.ingest_dialogues(conversations)
            row = self.fused.row_of()
            graph_ids = self.batch.batch.tolist()
            node_type = self.batch.node_type.tolist()
            self._fused_rows = torch.tensor(
                [row[(self.registry.order[graph_ids[i]], key)] if node_type[i] != SEMANTIC_NODE
                 else -1 for i, key in enumerate(self.batch.node_keys)],
                dtype=torch.long, device=self.device)
        if self.gate.uses_turns:
            self.gate.ingest(conversations)
        self.ingest_seconds += time.perf_counter() - start

    def fused_similarity(self, questions: Sequence[Question], query_emb: torch.Tensor
                         ) -> torch.Tensor | None:
        """``[N, B]``: the fused trigger's score of each episodic node (divided by the question's
        best turn) and the cosine of each concept node; ``None`` without a fused trigger."""
        if self.fused is None:
            return None
        key = _question_key(questions)
        if self._fused_cache is not None and self._fused_cache[0] == key:
            return self._fused_cache[1]  # sweeps ask for the same questions chunk after chunk
        score = self.fused.normalised_scores(questions)
        cos = cosine_scores(self.batch.x, query_emb)
        rows = self._fused_rows
        episodic = rows >= 0
        taken = score[rows.clamp_min(0)].to(cos.dtype)
        similarity = torch.where(episodic[:, None], taken, cos)
        self._fused_cache = (key, similarity)
        return similarity

    def retrieve(self, questions: Sequence[Question]) -> RetrievalResult:
        """Retrieve for all questions in one call (see :meth:`rank`)."""
        query_graph, query_emb, bm25 = self.query_inputs(questions)
        ranked = self.rank(query_graph, query_emb, bm25, self.params,
                           similarity=self.fused_similarity(questions, query_emb))
        return self.gated_result(questions,
                                 self._items(questions, ranked.index, ranked.score, ranked.valid),
                                 ranked.c_ret, ranked.gated)

    def query_inputs(self, questions: Sequence[Question]
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(query_graph [B], query_emb [B, d], bm25 [N, B])`` for a batch of questions."""
        if self.batch is None or self.bm25 is None:
            raise RuntimeError("SynapseMemory.retrieve called before ingest")
        g = self.batch
        query_graph = self.registry.graph_ids(questions, self.device)
        texts = [q.question for q in questions]
        if self.triggers["neutralise_speakers"]:
            texts = [neutralise_speakers(q.question, self.registry.speakers(q.sample_id))
                     for q in questions]
        query_emb = self.encoder.encode(texts).to(self.device)
        bm25 = self.bm25.scores([self.analyzer(q.question) for q in questions],
                                query_group=query_graph).T.to(self.device, g.x.dtype)
        return query_graph, query_emb, bm25

    def rank(self, query_graph: torch.Tensor, query_emb: torch.Tensor, bm25: torch.Tensor,
             params: SynapseParams, similarity: torch.Tensor | None = None,
             copies: int = 1, triggers: dict[tuple, Triggers] | None = None) -> RankedBatch:
        """Top-k global node ids, scores, ``C_ret`` and the gate for ``B`` query columns.

        The maths runs as ``[N_g, B_g]`` blocks, one per conversation that has queries (a loop
        over conversations, never over queries): a query only ever touches its own graph, so
        one ``[N, B]`` block over the whole batch would spend most of its work on masked zeros.
        ``group_by_graph=False`` runs the single ``[N, B]`` block instead (same result).
        ``params`` may hold ``[B]`` tensors (one value per column). ``copies = C``: the
        columns are ``C`` copies of the ``B`` queries, configuration-major (column ``c * B + b``
        is query ``b``; ``params`` holds ``[C * B]`` tensors), each block's inputs repeated
        only within the block (a sweep). ``triggers``: a store for each block's
        :class:`~synapse_pt.retrieval.synapse.Triggers`, kept by the caller for as long as the
        queries are the same (a sweep's chunks); computed where missing.
        """
        g = self.batch
        pagerank = self.pagerank(params.pagerank_scale).to(g.x.dtype)
        if not self.group_by_graph:
            return synapse_retrieve(
                x=g.x, node_graph=g.batch, edge_index=g.edge_index, edge_weight=g.edge_weight,
                pagerank_unit=pagerank, query_emb=query_emb,
                query_graph=query_graph, bm25=bm25, params=params, node_active=g.active,
                episodic=g.node_type != SEMANTIC_NODE, similarity=similarity,
                adj_t=self.adjacency(None, params.fan), dynamics=self.dynamics(params))
        Q, k = query_graph.shape[0], params.k + params.k_concepts
        B = Q * copies
        index = torch.zeros(B, k, dtype=torch.long, device=self.device)
        score = torch.full((B, k), float("-inf"), device=self.device)
        valid = torch.zeros(B, k, dtype=torch.bool, device=self.device)
        c_ret = torch.zeros(B, device=self.device)
        gated = torch.ones(B, dtype=torch.bool, device=self.device)
        for graph in torch.unique(query_graph).tolist():
            queries = (query_graph == graph).nonzero().flatten()
            cols = (queries[None, :] + Q * torch.arange(copies, device=queries.device)[:, None]
                    ).reshape(-1)  # configuration-major
            n0 = int(g.ptr[graph])
            ranked = synapse_retrieve(**self._block(graph, queries, query_emb, bm25, params,
                                                    similarity, pagerank, copies=copies,
                                                    cols=cols, triggers=triggers))
            kk = ranked.index.shape[1]
            index[cols, :kk] = ranked.index + n0
            score[cols, :kk] = ranked.score
            valid[cols, :kk] = ranked.valid
            c_ret[cols] = ranked.c_ret
            gated[cols] = ranked.gated
        return RankedBatch(index, score, valid, c_ret, gated)

    def _block(self, graph: int, queries: torch.Tensor, query_emb: torch.Tensor,
               bm25: torch.Tensor, params: SynapseParams, similarity: torch.Tensor | None,
               pagerank: torch.Tensor, copies: int = 1,
               cols: torch.Tensor | None = None,
               triggers: dict[tuple, Triggers] | None = None) -> dict[str, object]:
        """The arguments of :func:`synapse_retrieve` / :func:`synapse_signals` for the queries
        ``queries`` of conversation ``graph`` (node ids local to it), ``copies`` configurations
        of them with the parameters of columns ``cols`` (default ``queries``): the
        configuration-independent signals are computed once per query. With a ``triggers``
        store (see :meth:`rank`) the block's triggers come from it, or are computed into it;
        its BM25 and similarity columns are then not gathered."""
        g = self.batch
        cols = queries if cols is None else cols
        n0, n1 = int(g.ptr[graph]), int(g.ptr[graph + 1])
        e0, e1 = int(g.edge_ptr[graph]), int(g.edge_ptr[graph + 1])
        key = (graph, params.k_anchor, params.bm25_trigger, params.energy)
        kept = None if triggers is None else triggers.get(key)
        block = dict(
            x=g.x[n0:n1], node_graph=torch.zeros(n1 - n0, dtype=torch.long, device=self.device),
            edge_index=g.edge_index[:, e0:e1] - n0, edge_weight=g.edge_weight[e0:e1],
            pagerank_unit=pagerank[n0:n1], query_emb=query_emb[queries],
            query_graph=torch.zeros(len(queries), dtype=torch.long, device=self.device),
            bm25=None if kept is not None else bm25[n0:n1][:, queries],
            params=params.select(cols),
            node_active=g.active[n0:n1], episodic=g.node_type[n0:n1] != SEMANTIC_NODE,
            similarity=(None if similarity is None or kept is not None
                        else similarity[n0:n1][:, queries]),
            adj_t=self.adjacency(graph, params.fan), dynamics=self.dynamics(params),
            repeat=copies)
        if triggers is not None:
            if kept is None:
                kept = triggers[key] = query_triggers(**{
                    k: block[k] for k in ("x", "node_graph", "query_emb", "query_graph", "bm25",
                                          "params", "node_active", "similarity")})
            block["triggers"] = kept
        return block

    def signals(self, questions: Sequence[Question]) -> list[tuple[int, torch.Tensor,
                                                                  SynapseSignals]]:
        """Every retrieval signal of ``questions`` before ranking, per conversation:
        ``(graph, columns, signals)`` with ``signals`` over that graph's nodes (local ids; add
        ``batch.ptr[graph]`` for global ones) and the questions' positions ``columns``. The same
        pass as :meth:`retrieve` (with the fused trigger's similarity when configured)."""
        if self.batch is None:
            raise RuntimeError("SynapseMemory.signals called before ingest")
        query_graph, query_emb, bm25 = self.query_inputs(questions)
        similarity = self.fused_similarity(questions, query_emb)
        pagerank = self.pagerank(self.params.pagerank_scale).to(self.batch.x.dtype)
        out = []
        for graph in torch.unique(query_graph).tolist():
            cols = (query_graph == graph).nonzero().flatten()
            out.append((graph, cols, synapse_signals(**self._block(
                graph, cols, query_emb, bm25, self.params, similarity, pagerank))))
        return out

    def evidence_index(self, questions: Sequence[Question]) -> torch.Tensor:
        """``[B, E]`` global node ids of each question's evidence turns, padded with -1: the input
        of :func:`~synapse_pt.eval.scorers.retrieval.evidence_recall_from_index`."""
        if self.batch is None:
            raise RuntimeError("SynapseMemory.evidence_index called before ingest")
        return padded_rows([[self.batch.index_of(q.sample_id, e) for e in q.evidence]
                            for q in questions], self.device)

    def dynamics(self, params: SynapseParams) -> ActivationDynamics:
        """The activation layer of ``params`` (with the memory's ``compile`` setting)."""
        return activation_layer(params, compile=self.compile)

    def adjacency(self, graph: int | None, fan: bool) -> torch.Tensor:
        """The fan-normalised sparse adjacency of one conversation's graph (``graph``: its
        index in the batch, local node ids) or of the whole batch (``None``), built once after
        ingest and reused by every retrieve and every sweep chunk."""
        key = (graph, bool(fan))
        if key not in self._adjacency:
            g = self.batch
            if graph is None:
                edge_index, edge_weight, n = g.edge_index, g.edge_weight, g.x.shape[0]
            else:
                n0, n1 = int(g.ptr[graph]), int(g.ptr[graph + 1])
                e0, e1 = int(g.edge_ptr[graph]), int(g.edge_ptr[graph + 1])
                edge_index, edge_weight, n = g.edge_index[:, e0:e1] - n0, g.edge_weight[e0:e1], \
                    n1 - n0
            self._adjacency[key] = activation_adjacency(edge_index, edge_weight, n, fan=fan,
                                                        dtype=g.x.dtype)
        return self._adjacency[key]

    def pagerank(self, scale: str) -> torch.Tensor:
        """``[N]`` cached PageRank rescaled per conversation by ``scale`` (SPEC §1.5)."""
        if scale not in self._pagerank:
            self._pagerank[scale] = rescale_pagerank(self.batch.pagerank, self.batch.batch, scale,
                                                     num_graphs=self.batch.num_graphs)
        return self._pagerank[scale]

    def sweep(self, questions: Sequence[Question], configs: SynapseParams) -> RankedBatch:
        """Evaluate ``C`` hyperparameter configurations for all questions in one batched pass.

        ``configs`` holds ``[C]`` tensors for the continuous hyperparameters (S, delta, beta,
        gamma, theta, lambda1-3, tau_gate) and shared ints/bools for the rest. The query columns
        are the ``C x B`` (configuration, question) pairs, configuration-major: row ``c * B + b``
        of the result is question ``b`` under configuration ``c``.
        """
        key = _question_key(questions)
        if self._sweep_inputs is None or self._sweep_inputs[0] != key:
            # the same questions chunk after chunk: tokenise, embed and score BM25 once
            self._sweep_inputs = (key, self.query_inputs(questions))
            self._sweep_triggers = {}
        query_graph, query_emb, bm25 = self._sweep_inputs[1]
        sizes = {v.numel() for v in vars(configs).values()
                 if isinstance(v, torch.Tensor) and v.dim() == 1}
        if len(sizes) != 1:
            raise ValueError(f"SynapseMemory.sweep: configs need [C] tensors of one length C, "
                             f"got lengths {sorted(sizes)}")
        C, B = sizes.pop(), len(questions)
        columns = configs.repeat_columns(B)
        similarity = self.fused_similarity(questions, query_emb)
        if not self.group_by_graph:  # one [N, C * B] block
            return self.rank(query_graph.repeat(C), query_emb.repeat(C, 1), bm25.repeat(1, C),
                             columns, similarity=None if similarity is None
                             else similarity.repeat(1, C))
        # per conversation, only its own [N_g, B_g] inputs are repeated C times
        return self.rank(query_graph, query_emb, bm25, columns, similarity=similarity, copies=C,
                         triggers=self._sweep_triggers)

    def _items(self, questions: Sequence[Question], index: torch.Tensor, score: torch.Tensor,
               valid: torch.Tensor) -> list[list[RetrievedItem]]:
        g = self.batch
        node_type = g.node_type.tolist()
        rows = []
        for q, idx, sc, ok in zip(questions, index.tolist(), score.tolist(), valid.tolist(),
                                  strict=True):
            row = []
            for i, s, v in zip(idx, sc, ok, strict=True):
                if not v:
                    continue
                if node_type[i] == SEMANTIC_NODE:
                    row.append(RetrievedItem(g.node_keys[i], g.texts[i], SEMANTIC, s))
                else:
                    row.append(self.registry.episodic_item(q.sample_id, g.node_keys[i], s))
            rows.append(row)
        return rows
