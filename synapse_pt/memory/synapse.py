"""The SYNAPSE memory system (SPEC §1): episodic-semantic graph + spreading-activation retrieval."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from synapse_pt.common.errors import ConfigError
from synapse_pt.data.render import DEFAULT_TURN_TEMPLATE, TurnRenderer
from synapse_pt.data.schema import Dialogue, Question
from synapse_pt.graph.batch import GraphBatch
from synapse_pt.graph.consolidation import GraphBuilder
from synapse_pt.graph.extraction import ConceptExtractor, NoConceptExtractor
from synapse_pt.graph.pagerank import rescale_pagerank
from synapse_pt.graph.types import SEMANTIC as SEMANTIC_NODE
from synapse_pt.models.base import TextEncoder
from synapse_pt.nn import FRONTIER_MODES, activation_adjacency
from synapse_pt.retrieval.bm25 import BM25Index
from synapse_pt.retrieval.dense import cosine_scores
from synapse_pt.retrieval.items import SEMANTIC, RetrievedItem
from synapse_pt.retrieval.search_space import SPACE, choices, ranges
from synapse_pt.retrieval.settings import PAPER_FIELDS, READING_FIELDS, STORAGE, SynapseParams
from synapse_pt.retrieval.spreading import (
    RankedBatch,
    SynapseInputs,
    SynapseSignals,
    Triggers,
    query_triggers,
    synapse_retrieve,
    synapse_signals,
)
from synapse_pt.retrieval.text import Analyzer, neutralise_speakers

from .base import MemorySystem, RetrievalResult, padded_rows
from .declare import CostModel, SearchSpace, TurnContext, WindowExtraction
from .episodic import TurnRegistry
from .fused import inner_fused
from .gate import build_gate

log = logging.getLogger(__name__)

TRIGGER_OPTIONS = ("neutralise_speakers", "stopwords", "stem")


def _question_key(questions: Sequence[Question]) -> tuple:
    """What identifies a batch of questions for the sweep caches (the same questions asked
    chunk after chunk)."""
    return tuple((q.sample_id, q.qa_index, q.question) for q in questions)


@dataclass(frozen=True)
class Indexing:
    """What the memory holds and how text is matched against it: the graph (``use_graph``:
    ``False`` for the ``no_graph`` ablation, episodic nodes only and no edges; ``graph``: the
    keyword arguments of :class:`~synapse_pt.graph.consolidation.GraphBuilder`), the lexical
    trigger's ``bm25`` (``k1``, ``b``, ``epsilon``) and ``triggers``, the query and text
    processing of the two triggers (issue 16; all off = the paper's): ``neutralise_speakers``
    removes the speakers' names from the dense query
    (:func:`~synapse_pt.retrieval.text.neutralise_speakers`), ``stopwords`` and ``stem`` set the
    BM25 analyser (:class:`~synapse_pt.retrieval.text.Analyzer`). The config keeps them as its
    nodes ``memory.use_graph``, ``memory.graph``, ``memory.bm25`` and ``memory.triggers``."""

    use_graph: bool = True
    graph: Mapping[str, Any] = field(default_factory=dict)
    bm25: Mapping[str, float] = field(default_factory=dict)
    triggers: Mapping[str, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        triggers = dict(self.triggers or {})
        unknown = sorted(set(triggers) - set(TRIGGER_OPTIONS))
        if unknown:
            raise ConfigError(f"memory.triggers: unknown options {unknown}; known: "
                              f"{list(TRIGGER_OPTIONS)}")
        object.__setattr__(self, "triggers",
                           {k: bool(triggers.get(k, False)) for k in TRIGGER_OPTIONS})
        object.__setattr__(self, "graph", dict(self.graph or {}))
        object.__setattr__(self, "bm25", dict(self.bm25 or {}))

    @classmethod
    def over(cls, given: Indexing | None, nodes: Mapping[str, Any]) -> Indexing:
        """The group from the config's nodes ``nodes`` (``memory.graph``, ...), over ``given``
        when given; a key of none of them is refused by name."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(nodes) - names)
        if unknown:
            raise TypeError(f"SynapseMemory: unknown settings {unknown}")
        base = {} if given is None else {f: getattr(given, f) for f in names}
        return cls(**{**base, **nodes})


#: ``memory.engine``: how SYNAPSE's maths runs, never what it computes
ENGINE_DEFAULTS: dict[str, Any] = {"device": "cpu", "group_by_graph": True, **STORAGE}


def _engine(engine: Mapping[str, Any] | None) -> dict[str, Any]:
    """``memory.engine`` with its defaults; an unknown key is an error naming it."""
    engine = dict(engine or {})
    unknown = sorted(set(engine) - set(ENGINE_DEFAULTS))
    if unknown:
        raise ConfigError(f"memory.engine: unknown settings {unknown}; known: "
                          f"{list(ENGINE_DEFAULTS)}")
    out = {**ENGINE_DEFAULTS, **engine}
    out["group_by_graph"] = bool(out["group_by_graph"])
    out["device"] = str(out["device"])
    out["frontier_density"] = float(out["frontier_density"])
    if out["frontier"] not in FRONTIER_MODES:
        raise ConfigError(f"memory.engine.frontier must be one of {list(FRONTIER_MODES)}, got "
                          f"{out['frontier']!r}")
    if not 0.0 <= out["frontier_density"] <= 1.0:
        raise ConfigError(f"memory.engine.frontier_density must lie in [0, 1], got "
                          f"{out['frontier_density']}")
    return out


def _params(params: SynapseParams | Mapping[str, Any] | None,
            readings: Mapping[str, Any] | None) -> SynapseParams:
    """A :class:`SynapseParams` as it is, or one from the ``params`` and ``readings`` nodes."""
    if isinstance(params, SynapseParams):
        if readings:
            raise ConfigError("memory.readings: give the readings inside the SynapseParams "
                              "object, or params and readings as mappings")
        return params
    return SynapseParams.from_config(params, readings)


def _scalar(value: object) -> object:
    """A hyperparameter as a plain number where it is one (a sweep may hold a tensor)."""
    if isinstance(value, torch.Tensor):
        return float(value) if value.numel() == 1 else value.tolist()
    return value


#: the paper's values of the settings a held-out search varies (its candidate 0)
PAPER_REFERENCE = {key: getattr(SynapseParams(), key.split(".", 1)[1])
                   for key in SPACE if key != "params.tau_gate"}


class SynapseMemory(MemorySystem):
    """SYNAPSE: ingest conversations into graphs; retrieve by spreading activation (SPEC §1.2).

    Args:
        encoder: the text encoder for turns, concepts and queries.
        extractor: the concept extractor used at consolidation.
        params: the paper's retrieval hyperparameters (SPEC §1.2;
            :data:`~synapse_pt.retrieval.settings.PAPER_FIELDS`), or a whole
            :class:`~synapse_pt.retrieval.settings.SynapseParams` (then ``readings`` is empty).
        readings: the readings SPEC §1.5 leaves open and our defaults where the paper is silent
            (:data:`~synapse_pt.retrieval.settings.READING_FIELDS`).
        engine: how the maths runs, never what it computes (:data:`ENGINE_DEFAULTS`):
            ``device`` (where the graph tensors and the retrieval maths run), ``group_by_graph``
            (the maths per conversation block, see :meth:`rank`; ``False``: one ``[N, B]``
            block), ``frontier`` and ``frontier_density`` (how the activation layer stores its
            activations: :mod:`synapse_pt.nn.frontier`).
        indexing: the graph, the lexical trigger's BM25 and the triggers' text processing
            (:class:`Indexing`; the config's ``use_graph``, ``graph`` (the flat settings of
            :class:`~synapse_pt.graph.consolidation.GraphBuilder`, each a field of its
            :class:`~synapse_pt.graph.consolidation.Consolidation` (window ``N``, ``tau_dup``,
            ``rho``, association weighting) or :class:`~synapse_pt.graph.consolidation.
            Maintenance` group), ``bm25`` and ``triggers`` nodes).
        turn_template: how an episodic node renders its turn for embedding, BM25 and the prompt
            (the template every memory system shares, :mod:`synapse_pt.data.render`).
        fused_trigger: ``None`` (the paper's dense trigger) or the arguments of a
            :class:`~synapse_pt.memory.fused.FusedMemory` built over the same turns; its fused
            score, divided by each question's best, replaces the cosine of episodic nodes
            everywhere the cosine enters retrieval (anchors, energy, triple score); concept nodes
            keep their cosine. With ``lambda2 = 0`` and turns ranked, SYNAPSE then ranks as the
            fused retriever: what activation adds on top of it is measurable.
        gate: the rejection gate (:func:`~synapse_pt.memory.gate.build_gate`; ``None``: the
            paper's, ``C_ret < tau_gate``).
        **nodes: the config's ``use_graph``, ``graph``, ``bm25`` and ``triggers`` nodes, each a
            field of :class:`Indexing` (over ``indexing``).
    """

    name = "synapse"
    retrieval_fields = ("params", "readings", "engine")
    # the answer context: at most params.k nodes, each a turn's line or a concept's label
    cost_model = CostModel(TurnContext("params.k", note="a concept node's line assumed no longer "
                                                        "than the longest turn's"),
                           extraction=WindowExtraction("graph.window"))
    # held-out search (SPEC §1.5): combinations of the discrete readings and settings, each with
    # draws of the continuous hyperparameters, evaluated as activation columns (``sweep``); the
    # one declared space (retrieval/search_space.py), all but tau_gate, which the search
    # calibrates per fold for a target false rejection instead of drawing it
    search_space = SearchSpace(
        discrete=choices(SPACE),
        continuous={k: v for k, v in ranges(SPACE).items() if k != "params.tau_gate"},
        reference=dict(PAPER_REFERENCE), batched=True)

    def __init__(self, encoder: TextEncoder, extractor: ConceptExtractor, *,
                 params: SynapseParams | Mapping[str, Any] | None = None,
                 readings: Mapping[str, Any] | None = None,
                 engine: Mapping[str, Any] | None = None, indexing: Indexing | None = None,
                 turn_template: str = DEFAULT_TURN_TEMPLATE,
                 fused_trigger: Mapping[str, Any] | None = None,
                 gate: Mapping[str, Any] | None = None, **nodes: Any) -> None:
        self.indexing = indexing = Indexing.over(indexing, nodes)
        self.triggers = dict(indexing.triggers)
        self.engine = _engine(engine)
        device = self.engine["device"]
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
        self.use_graph = indexing.use_graph
        self.extractor = extractor if self.use_graph else NoConceptExtractor()
        self.params = _params(params, readings)
        self.device = torch.device(device)
        self.builder = GraphBuilder(encoder, self.extractor, device=str(self.device),
                                    renderer=self.renderer, **dict(indexing.graph))
        self.bm25_args = dict(indexing.bm25)
        self.registry = TurnRegistry(self.renderer)
        self.gate = build_gate(gate, encoder, self.renderer, self.device)
        self.graphs: list = []
        self.batch: GraphBatch | None = None
        self.bm25: BM25Index | None = None
        self._pagerank: dict[str, torch.Tensor] = {}
        self._adjacency: dict[tuple[int | None, bool], torch.Tensor] = {}
        self.ingest_seconds = 0.0

    @property
    def group_by_graph(self) -> bool:
        return self.engine["group_by_graph"]

    def configure_retrieval(self, **settings: object) -> None:
        unknown = sorted(set(settings) - set(self.retrieval_fields))
        if unknown:
            raise ValueError(f"SynapseMemory: {unknown} are not retrieval settings (those are "
                             f"{list(self.retrieval_fields)})")
        self._sweep_inputs = None
        self._sweep_triggers = {}
        if "params" in settings or "readings" in settings:  # a node not given is kept
            params, readings = settings.get("params"), settings.get("readings")
            if not isinstance(params, SynapseParams):
                current = dataclasses.asdict(self.params)
                params = params if params is not None else {
                    k: current[k] for k in PAPER_FIELDS}
                readings = readings if readings is not None else {
                    k: current[k] for k in READING_FIELDS}
            self.params = _params(params, readings)
        if "engine" in settings:
            engine = _engine(settings["engine"])  # type: ignore[arg-type]
            if torch.device(engine["device"]) != self.device:
                raise ConfigError(f"memory.engine.device={engine['device']}: this memory's graphs "
                                  f"live on {self.device}; rebuild it on the other device")
            self.engine = engine

    def describe(self) -> dict[str, object]:
        return {"memory": self.name, "encoder": self.encoder.name, "extractor": self.extractor.name,
                "llm_free_extractor": bool(getattr(self.extractor, "llm_free", False)),
                # windows whose concepts an LLM extractor could not give even after the repair
                # round (each named in the log); 0 for an LLM-free extractor
                "extraction_failures": int(getattr(self.extractor, "num_failed_windows", 0)),
                "extraction_attempts": int(getattr(self.extractor, "num_windows", 0)),
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
        :class:`~synapse_pt.retrieval.spreading.Triggers`, kept by the caller for as long as the
        queries are the same (a sweep's chunks); computed where missing.
        """
        g = self.batch
        pagerank = self.pagerank(params.pagerank_scale).to(g.x.dtype)
        if not self.group_by_graph:
            inputs = SynapseInputs(
                x=g.x, node_graph=g.batch, edge_index=g.edge_index, edge_weight=g.edge_weight,
                pagerank_unit=pagerank, query_emb=query_emb, query_graph=query_graph, bm25=bm25,
                node_active=g.active, episodic=g.node_type != SEMANTIC_NODE,
                similarity=similarity)
            return synapse_retrieve(inputs, params, adj_t=self.adjacency(None, params.fan),
                                    **self.storage)
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
            inputs, kept = self._block(graph, queries, query_emb, bm25, params, similarity,
                                       pagerank, triggers)
            ranked = synapse_retrieve(inputs, params.select(cols),
                                      adj_t=self.adjacency(graph, params.fan),
                                      repeat=copies, triggers=kept, **self.storage)
            n0 = int(g.ptr[graph])
            kk = ranked.index.shape[1]
            index[cols, :kk] = ranked.index + n0
            score[cols, :kk] = ranked.score
            valid[cols, :kk] = ranked.valid
            c_ret[cols] = ranked.c_ret
            gated[cols] = ranked.gated
        return RankedBatch(index, score, valid, c_ret, gated)

    def _block(self, graph: int, queries: torch.Tensor, query_emb: torch.Tensor,
               bm25: torch.Tensor, params: SynapseParams, similarity: torch.Tensor | None,
               pagerank: torch.Tensor, triggers: dict[tuple, Triggers] | None = None
               ) -> tuple[SynapseInputs, Triggers | None]:
        """The :class:`~synapse_pt.retrieval.spreading.SynapseInputs` of the queries ``queries``
        of conversation ``graph`` (its :meth:`~synapse_pt.graph.batch.GraphBatch.block`, node
        ids local to it), and the block's triggers: with a ``triggers`` store (see
        :meth:`rank`) they come from it, or are computed into it (its BM25 and similarity
        columns are then not gathered); ``None`` without a store."""
        block = self.batch.block(graph)
        rows = block.nodes
        key = (graph, params.k_anchor, params.bm25_trigger, params.energy)
        kept = None if triggers is None else triggers.get(key)
        zeros = torch.zeros
        inputs = SynapseInputs(
            x=block.x, node_graph=zeros(block.num_nodes, dtype=torch.long, device=self.device),
            edge_index=block.edge_index, edge_weight=block.edge_weight,
            pagerank_unit=pagerank[rows], query_emb=query_emb[queries],
            query_graph=zeros(len(queries), dtype=torch.long, device=self.device),
            bm25=None if kept is not None else bm25[rows][:, queries],
            node_active=block.active, episodic=block.node_type != SEMANTIC_NODE,
            similarity=(None if similarity is None or kept is not None
                        else similarity[rows][:, queries]))
        if triggers is not None and kept is None:
            kept = triggers[key] = query_triggers(inputs, params)  # reads no swept value
        return inputs, kept

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
            inputs, _ = self._block(graph, cols, query_emb, bm25, self.params, similarity,
                                    pagerank)
            out.append((graph, cols, synapse_signals(
                inputs, self.params.select(cols), adj_t=self.adjacency(graph, self.params.fan),
                **self.storage)))
        return out

    def evidence_index(self, questions: Sequence[Question]) -> torch.Tensor:
        """``[B, E]`` global node ids of each question's evidence turns, padded with -1: the input
        of :func:`~synapse_pt.eval.qa.scorers.retrieval.evidence_recall_from_index`."""
        if self.batch is None:
            raise RuntimeError("SynapseMemory.evidence_index called before ingest")
        return padded_rows([[self.batch.index_of(q.sample_id, e) for e in q.evidence]
                            for q in questions], self.device)

    @property
    def storage(self) -> dict[str, Any]:
        """How the activation layer stores its activations: the engine's ``frontier`` and
        ``frontier_density``."""
        return {"frontier": self.engine["frontier"],
                "frontier_density": self.engine["frontier_density"]}

    def adjacency(self, graph: int | None, fan: bool) -> torch.Tensor:
        """The fan-normalised sparse adjacency of one conversation's graph (``graph``: its
        index in the batch, local node ids) or of the whole batch (``None``), built once after
        ingest and reused by every retrieve and every sweep chunk."""
        key = (graph, bool(fan))
        if key not in self._adjacency:
            g = self.batch if graph is None else self.batch.block(graph)
            self._adjacency[key] = activation_adjacency(g.edge_index, g.edge_weight,
                                                        g.x.shape[0], fan=fan, dtype=g.x.dtype)
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
        columns = configs.to(self.device).repeat_columns(B)  # the grid may come from the host
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
