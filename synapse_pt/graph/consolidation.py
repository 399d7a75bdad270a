"""Ingestion and consolidation: turns -> SYNAPSE memory graph (SPEC §1.1).

:class:`GraphBuilder` embeds every turn, cuts the conversation into windows of ``N`` turns, asks a
:class:`~synapse_pt.graph.extraction.ConceptExtractor` for each window's concepts, and consolidates
window by window: episodic nodes, temporal edges, semantic nodes (merged at ``tau_dup``),
abstraction and association edges, then maintenance (:mod:`synapse_pt.graph.maintenance`) and a
fresh cached PageRank.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import torch
from torch import Tensor

from synapse_pt.common import groups
from synapse_pt.common.declared import check_fields, setting
from synapse_pt.common.progress import Progress
from synapse_pt.data.schema import Dialogue, Turn

from ..data.render import TurnRenderer
from ..models.base import TextEncoder
from .extraction import ConceptExtractor, clean_concepts
from .maintenance import cap_in_edges, collect_dormant, mark_activity, refresh_pagerank
from .memory_graph import MemoryGraph
from .types import ABSTRACTION, ASSOCIATION, EPISODIC, SEMANTIC, TEMPORAL

log = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1)
HOURS_PER_UNIT: dict[str, float] = {"seconds": 1 / 3600, "minutes": 1 / 60, "hours": 1.0,
                                    "days": 24.0, "weeks": 168.0}
ASSOCIATION_WEIGHTINGS = ("cooccurrence", "similarity")


def hours_since_epoch(dt: datetime) -> float:
    """Hours since 1970-01-01 00:00 UTC; a naive datetime (LoCoMo's) is read as UTC."""
    if dt.tzinfo is None:
        return (dt - _EPOCH).total_seconds() / 3600.0
    return dt.astimezone(timezone.utc).timestamp() / 3600.0


def temporal_weight(dt_hours: Tensor, rho: float, time_unit: str = "hours") -> Tensor:
    r"""Temporal edge weight :math:`w = \exp(-\rho\,|\Delta\tau|)` with :math:`\Delta\tau` in
    ``time_unit`` (the paper gives no unit; default hours, so :math:`\rho = 0.01` halves the weight
    after about 69 hours)."""
    if time_unit not in HOURS_PER_UNIT:
        raise ValueError(f"temporal_weight: unknown time_unit {time_unit!r} "
                         f"(choose from {sorted(HOURS_PER_UNIT)})")
    return torch.exp(-rho * dt_hours.abs() / HOURS_PER_UNIT[time_unit])


def cooccurrence_weight(count: Tensor) -> Tensor:
    r"""Association weight from a co-occurrence count :math:`c \ge 1`:
    :math:`w = 1 - 2^{-c}` (0.5, 0.75, 0.875, ...), in :math:`(0, 1]`, increasing in :math:`c`."""
    return 1.0 - torch.pow(0.5, count.to(torch.float32))


def windows_of(turns: Sequence[Turn], size: int) -> list[list[Turn]]:
    """Consecutive windows of ``size`` turns (the last one may be shorter). Windows run across
    session boundaries: the paper consolidates every N turns of the stream."""
    return [list(turns[i:i + size]) for i in range(0, len(turns), size)]


_G = "graph"  # the config node: memory.graph.<name>


@dataclass(frozen=True)
class Consolidation:
    r"""Steps 1-5 of :class:`GraphBuilder`: the window and how its nodes and edges are made.

    Each field a declared setting of ``memory.graph`` (:mod:`synapse_pt.common.declared`; the
    table: docs/settings.md).
    """

    window: int = setting(
        _G, 5, "N: consolidate (extract concepts, add abstraction/association edges) every N "
               "turns, from the window of those N turns (paper: N = 5)",
        low=1)
    tau_dup: float = setting(
        _G, 0.92, "tau_dup: merge a new concept into a semantic node with cosine >= tau_dup "
                  "(paper)",
        low=-1.0, high=1.0)
    rho: float = setting(
        _G, 0.01, "rho: temporal edge weight w = exp(-rho * |tau_{t+1} - tau_t|), per time_unit "
                  "(paper)",
        low=0.0)
    time_unit: str = setting(
        _G, "hours", "unit of |tau_{t+1} - tau_t| in the temporal weight: the paper gives none; "
                     "hours (ours)",
        choices=tuple(HOURS_PER_UNIT))
    association_weighting: str = setting(
        _G, "similarity", "association edge weight: similarity (the paper's cosine formula for "
                          "semantic edges) | cooccurrence (ours, 1 - 2^-count; "
                          "experiments/extractors.md)",
        choices=ASSOCIATION_WEIGHTINGS)

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class Maintenance:
    r"""Step 6 of :class:`GraphBuilder`: in-edge cap, dormancy, collection and PageRank.

    Each field a declared setting of ``memory.graph`` (:mod:`synapse_pt.common.declared`; the
    table: docs/settings.md). More on each: a node is *activated* in a window when it is created
    in it or an edge touching it is added or reinforced in it with weight
    :math:`\ge \epsilon` (``dormancy_eps``; the paper's "activation" has no query at ingestion
    time, so edge growth stands in for it). Collection happens only when ``max_nodes`` is
    exceeded: dormant nodes go, lowest cached PageRank first, until ``collect_to`` of the cap
    holds or no dormant node is left (a soft cap). ``collect_to = 1.0`` collects only the excess
    (the literal reading: at the cap every window collects and recomputes PageRank); the default
    ``0.95`` makes room for the next ~500 nodes (about 60 windows of the LLM-free builder), so
    ingestion costs the same per turn at the cap as below it. The paper says dormant nodes *may*
    be collected and gives no schedule; LoCoMo-10's graphs (at most 1,260 nodes) never reach the
    cap, so no LoCoMo figure depends on it.
    """

    max_in_edges: int | None = setting(
        _G, 15, "keep at most this many incoming edges per node, highest weight first, ties to "
                "the older edge (paper: 15); null: no cap",
        low=1)
    dormancy_eps: float = setting(
        _G, 0.01, "eps: a node is activated in a window when it is created in it or an edge "
                  "touching it is added or reinforced with weight >= eps (paper)",
        low=0.0)
    dormancy_windows: int = setting(
        _G, 10, "W: windows without activation before a node is dormant, i.e. collectable "
                "(paper)",
        low=1)
    max_nodes: int | None = setting(
        _G, 10_000, "active graph cap: above it dormant nodes are collected, lowest PageRank "
                    "first (paper); null: no cap",
        low=1)
    collect_to: float = setting(
        _G, 0.95, "a collection brings the active graph down to this share of max_nodes; 1.0 "
                  "collects only the excess (literal). The paper gives no schedule; ours",
        above=0.0, high=1.0)
    pagerank_damping: float = setting(
        _G, 0.85, "PageRank damping: the paper is silent; the usual value (ours)",
        above=0.0, below=1.0)

    def __post_init__(self) -> None:
        check_fields(self)


class GraphBuilder:
    r"""Builds one :class:`MemoryGraph` per conversation (SPEC §1.1).

    Every ``window`` turns the window is consolidated:

    1. one episodic node per turn (text: the turn as ``renderer`` renders it, key
       ``turn.dia_id``, embedding :math:`\mathbf{h}_t`, timestamp :math:`\tau_t` in hours since
       the epoch);
    2. temporal edges :math:`t \to t+1` along the whole conversation (across sessions), weight
       :math:`\exp(-\rho\,|\tau_{t+1} - \tau_t|)`, :math:`|\Delta\tau|` in ``time_unit``;
    3. each extracted concept :math:`c` is merged into the existing active semantic node
       :math:`s^* = \arg\max_s \cos(\mathbf{h}_c, \mathbf{h}_s)` when
       :math:`\cos(\mathbf{h}_c, \mathbf{h}_{s^*}) \ge \tau_{dup}` (or when its case-folded text
       equals the text of a semantic node); the merge only links, the node is not updated.
       Otherwise a semantic node is created (key ``"S:<k>"``, timestamp of the window's last turn);
       new concepts of one window closer than :math:`\tau_{dup}` to each other become one node;
    4. abstraction edges in both directions between every episode :math:`e` of the window and every
       concept node :math:`s` of it, weight :math:`\max(0, \cos(\mathbf{h}_e, \mathbf{h}_s))`
       (a weight-0 edge is kept: the structure is the paper's, the weight floors it);
    5. association edges in both directions between every two concept nodes of the window, weight

       * ``"cooccurrence"``: :math:`1 - 2^{-c_{ab}}` with :math:`c_{ab}` the number of
         windows in which both occurred (counted even while the edge is pruned); a repeat
         co-occurrence raises the weight of the existing edge instead of adding one;
       * ``"similarity"`` (default): :math:`\max(0, \cos(\mathbf{h}_a, \mathbf{h}_b))`, the
         paper's semantic edge weight (unchanged on a repeat);

    6. maintenance (:mod:`~synapse_pt.graph.maintenance`): activity bookkeeping, at most
       ``max_in_edges`` incoming edges per node, dormant-node collection above ``max_nodes``
       down to ``collect_to`` of it (lowest PageRank first, recomputed for it from the cached
       scores), and after the
       conversation's last window the weighted PageRank recomputed and cached.

    A trailing window shorter than ``window`` turns is consolidated at the end.

    Args:
        encoder: text encoder for turns and concepts (unit-norm rows).
        extractor: concept extractor (LLM or LLM-free).
        consolidation, maintenance: the settings (:class:`Consolidation`, :class:`Maintenance`;
            the defaults above when not given).
        renderer: the turn template of episodic nodes (default ``"{speaker}: {text}{caption}"``,
            :mod:`synapse_pt.data.render`); the extractor still reads the bare turns.
        device: device of the graph tensors.
        **settings: the config's flat keys (``memory.graph.window``, ``memory.graph.max_nodes``),
            each a field of one of the two groups, over ``consolidation`` / ``maintenance``.
    """

    def __init__(self, encoder: TextEncoder, extractor: ConceptExtractor, *,
                 consolidation: Consolidation | None = None,
                 maintenance: Maintenance | None = None,
                 renderer: TurnRenderer | None = None,
                 device: str | torch.device = "cpu", **settings: Any) -> None:
        self.consolidation, self.maintenance = groups.split_settings(
            "GraphBuilder", ((Consolidation, consolidation), (Maintenance, maintenance)), settings)
        self.encoder = encoder
        self.extractor = extractor
        self.renderer = renderer or TurnRenderer()
        self.device = torch.device(device)
        self.last_timings: dict[str, float] = {}

    # ----------------------------------------------------------------------------- batched entry
    def build(self, conversation: Dialogue) -> MemoryGraph:
        """The graph of one conversation."""
        return self.build_many([conversation])[0]

    def build_many(self, conversations: Sequence[Dialogue]) -> list[MemoryGraph]:
        """Graphs of many conversations: all turns embedded in one encoder call, every distinct
        window's concepts extracted in one extractor call and embedded in one more encoder call;
        then each conversation is consolidated window by window.

        Conversations that begin with the same windows (the same turns, and so the same
        concepts) share the work on them: the windows are consolidated once and each
        conversation continues from a :meth:`~synapse_pt.graph.memory_graph.MemoryGraph.fork`
        of the graph where it parts from the others (LoCoMo-Plus's faithful variant: a LoCoMo
        conversation's windows before a cue, shared by the items stitched into it).
        Consolidation is a function of the graph and the window, so each graph is the one
        built on its own; conversations that share no first window (LoCoMo-10) are built exactly
        as one by one. Phase times land in ``last_timings``, with the windows consolidated and
        reused."""
        t0 = time.perf_counter()
        turn_lists = [list(c.turns()) for c in conversations]
        turn_emb = self._encode([self.renderer(t) for turns in turn_lists for t in turns],
                                "turn texts")
        t1 = time.perf_counter()

        windows = [windows_of(turns, self.consolidation.window) for turns in turn_lists]
        flat = [w for ws in windows for w in ws]
        keys = [window_key(w) for w in flat]
        concepts, num_extracted = self._extract(flat, keys)
        t2 = time.perf_counter()

        vocab = list(dict.fromkeys(c for cs in concepts for c in cs))
        batch = _Windows.of(windows, concepts, turn_emb, vocab, self._encode(vocab, "concepts"))
        t3 = time.perf_counter()

        graphs, consolidated = self._consolidate_tree(
            _prefix_tree(windows, keys, concepts), batch, conversations,
            [len(turns) for turns in turn_lists])
        t4 = time.perf_counter()
        self.last_timings = {"embed_turns_s": t1 - t0, "extract_s": t2 - t1,
                             "embed_concepts_s": t3 - t2, "consolidate_s": t4 - t3,
                             "total_s": t4 - t0, "windows": float(len(flat)),
                             "windows_extracted": float(num_extracted),
                             "windows_consolidated": float(consolidated)}
        return graphs

    def _extract(self, flat: Sequence[list[Turn]], keys: Sequence[tuple]
                 ) -> tuple[list[list[str]], int]:
        """The cleaned concepts of every window (``keys``: their :func:`window_key`), each
        distinct window extracted once and all of them in one extractor call; and the number
        of windows extracted."""
        first: dict[tuple, int] = {}  # a distinct window -> its place among those extracted
        distinct = []
        for win, key in zip(flat, keys, strict=True):
            if key not in first:
                first[key] = len(distinct)
                distinct.append(win)
        raw = self.extractor.extract(distinct)
        if len(raw) != len(distinct):
            raise RuntimeError(f"GraphBuilder: extractor {self.extractor.name!r} returned "
                               f"{len(raw)} concept lists for {len(distinct)} windows")
        return [clean_concepts(raw[first[key]]) for key in keys], len(distinct)

    def _consolidate_tree(self, root: _Prefix, batch: _Windows,
                          conversations: Sequence[Dialogue], num_turns: Sequence[int]
                          ) -> tuple[list[MemoryGraph], int]:
        """Every window of the prefix tree consolidated once, depth first, into the graph of
        the windows before it: a node with several continuations (children, or conversations
        ending there) hands each a fork of its graph, the last one the graph itself. A
        conversation's graph gets its PageRank refreshed where it ends; the graphs in
        conversation order, and the number of windows consolidated."""
        graphs: list[MemoryGraph | None] = [None] * len(conversations)
        for ci in root.ends:  # no turns: an empty graph, as before any window
            graphs[ci] = self.new_graph(conversations[ci].sample_id)
        stack = []
        for child in root.children.values():
            ci = batch.starts[child.window][1]
            stack.append((child, self.new_graph(conversations[ci].sample_id,
                                                num_turns=num_turns[ci])))
        consolidated = 0
        with Progress(_count(root), "consolidate windows", "windows", logger=log) as bar:
            while stack:
                node, graph = stack.pop()
                last = not node.children and len(node.ends) == 1
                self.consolidate(graph, *batch.inputs(node.window), finalize=last)
                consolidated += 1
                bar.update(1)
                uses = len(node.ends) + len(node.children)
                for ci in node.ends:
                    uses -= 1
                    done = graph if uses == 0 else graph.fork()
                    if not last:  # the conversation's last window, reached by others too
                        refresh_pagerank(done, self.maintenance.pagerank_damping)
                    done.sample_id = conversations[ci].sample_id
                    graphs[ci] = done
                for child in node.children.values():  # a fork taken before any child mutates
                    uses -= 1
                    stack.append((child, graph if uses == 0 else graph.fork()))
        return graphs, consolidated  # type: ignore[return-value]

    def new_graph(self, sample_id: str, *, num_turns: int = 0) -> MemoryGraph:
        """An empty graph on the builder's device, its buffers sized for ``num_turns`` turns."""
        dim = int(self.encoder.dim)
        nodes = max(64, 2 * num_turns)
        return MemoryGraph(sample_id, dim, device=self.device, node_capacity=nodes,
                           edge_capacity=8 * nodes)

    def _encode(self, texts: list[str], what: str) -> Tensor:
        dim = int(self.encoder.dim)
        if not texts:
            return torch.zeros(0, dim, device=self.device)
        emb = self.encoder.encode(texts)
        if emb.shape != (len(texts), dim):
            raise RuntimeError(f"GraphBuilder: encoder {self.encoder.name!r} returned shape "
                               f"{tuple(emb.shape)} for {len(texts)} {what}, expected "
                               f"[{len(texts)}, {dim}]")
        return emb.to(self.device, torch.float32)

    # ----------------------------------------------------------------------------- one window
    def consolidate(self, graph: MemoryGraph, turns: Sequence[Turn], turn_embeddings: Tensor,
                    concepts: Sequence[str], concept_embeddings: Tensor, *,
                    finalize: bool = True) -> None:
        """Consolidate one window into ``graph`` (steps 1-6 of the class docstring).

        PageRank is what dormant-node collection ranks by and what retrieval reads: it is
        recomputed (warm-started from the cached scores) in a window that collects, and from
        uniform when ``finalize`` (the conversation's last window, or a lone call), not in
        every window, so a window costs the same however large the graph has grown.

        Args:
            graph: the conversation's graph (mutated).
            turns: the window's turns, in order.
            turn_embeddings: ``[len(turns), d]`` unit-norm embeddings of the rendered turns.
            concepts: the window's cleaned concept strings.
            concept_embeddings: ``[len(concepts), d]`` their unit-norm embeddings.
        """
        if turn_embeddings.size(0) != len(turns) or concept_embeddings.size(0) != len(concepts):
            raise ValueError(f"GraphBuilder.consolidate({graph.sample_id!r}): {len(turns)} turns / "
                             f"{len(concepts)} concepts but embeddings of shape "
                             f"{tuple(turn_embeddings.shape)} / {tuple(concept_embeddings.shape)}")
        w = graph.num_windows
        first_new = graph.num_nodes
        edges = _NewEdges()
        episodes, last_ts = self._add_episodes(graph, turns, turn_embeddings, edges)  # 1, 2
        sem = self._resolve_concepts(graph, concepts, concept_embeddings, last_ts, w)  # 3
        _abstraction_edges(graph, episodes, sem, edges)  # 4
        touched = self._association_edges(graph, sem, edges)  # 5
        if edges.srcs:
            new_index, new_type, new_weight = edges.stacked()
            graph.add_edges(new_index, new_type, new_weight)
            touched.append((new_index[0], new_index[1], new_weight))
        self._maintain(graph, w, first_new, touched, finalize=finalize)  # 6
        graph.num_windows = w + 1

    def _add_episodes(self, graph: MemoryGraph, turns: Sequence[Turn], turn_embeddings: Tensor,
                      edges: _NewEdges) -> tuple[Tensor, float]:
        """Steps 1 and 2: one episodic node per turn, and the temporal chain t -> t+1 continuing
        from the previous window's last episode (emitted into ``edges``). The new episode ids,
        and the window's last timestamp (0.0 for no turns)."""
        dev = graph.device
        ts = torch.tensor([hours_since_epoch(t.timestamp) for t in turns], dtype=torch.float64,
                          device=dev)
        episodes = graph.add_nodes(turn_embeddings, EPISODIC, ts, self.renderer.render(turns),
                                   [t.dia_id for t in turns], [t.speaker for t in turns],
                                   window=graph.num_windows)
        chain = episodes
        if graph.last_episode is not None:
            chain = torch.cat([torch.tensor([graph.last_episode], device=dev), episodes])
        if chain.numel() > 1:
            src, dst = chain[:-1], chain[1:]
            dt = graph.timestamp[dst] - graph.timestamp[src]
            c = self.consolidation
            edges.emit(src, dst, TEMPORAL, temporal_weight(dt, c.rho, c.time_unit).float())
        if episodes.numel():
            graph.last_episode = int(episodes[-1])
        return episodes, float(ts[-1]) if ts.numel() else 0.0

    def _association_edges(self, graph: MemoryGraph, sem: Tensor, edges: _NewEdges
                           ) -> list[tuple[Tensor, Tensor, Tensor]]:
        """Step 5: association edges between every two concept nodes of the window, both
        directions; an edge that exists already is not added again (re-weighted under
        ``"cooccurrence"``). The new ones are emitted into ``edges``; the existing ones touched
        are returned as ``(src, dst, weight)`` for the activity bookkeeping."""
        touched: list[tuple[Tensor, Tensor, Tensor]] = []
        if sem.numel() <= 1:
            return touched
        dev, x = graph.device, graph.x
        iu = torch.triu_indices(sem.numel(), sem.numel(), offset=1, device=dev)
        a, b = sem[iu[0]], sem[iu[1]]
        cooccurrence = self.consolidation.association_weighting == "cooccurrence"
        if cooccurrence:
            counts = []
            for ai, bi in zip(a.tolist(), b.tolist(), strict=True):
                pair = (min(ai, bi), max(ai, bi))
                graph.cooccurrence[pair] = graph.cooccurrence.get(pair, 0) + 1
                counts.append(graph.cooccurrence[pair])
            pw = cooccurrence_weight(torch.tensor(counts, device=dev))
        else:
            pw = (x[a] * x[b]).sum(-1).clamp(min=0.0)
        src, dst, wt = torch.cat([a, b]), torch.cat([b, a]), torch.cat([pw, pw])
        slots = find_edges(graph, src, dst, ASSOCIATION)
        found = slots >= 0
        if bool(found.any()):
            if cooccurrence:
                graph.set_edge_weight(slots[found], wt[found])
            touched.append((src[found], dst[found], wt[found]))
        missing = ~found
        edges.emit(src[missing], dst[missing], ASSOCIATION, wt[missing])
        return touched

    def _maintain(self, graph: MemoryGraph, window: int, first_new: int,
                  touched: list[tuple[Tensor, Tensor, Tensor]], *, finalize: bool) -> None:
        """Step 6: activity bookkeeping of the nodes from ``first_new`` and the ``touched``
        edges, the in-edge cap, dormant-node collection above the cap (ranked by a warm-started
        PageRank) and, when ``finalize``, PageRank recomputed from uniform."""
        m = self.maintenance
        mark_activity(graph, window, first_new, touched, m.dormancy_eps)
        if m.max_in_edges is not None:
            cap_in_edges(graph, m.max_in_edges)
        if m.max_nodes is not None and graph.num_active > m.max_nodes:
            refresh_pagerank(graph, m.pagerank_damping, warm=True)  # collection ranks by it
            collect_dormant(graph, window, m.max_nodes, m.dormancy_windows,
                            collect_to=int(m.collect_to * m.max_nodes))
        if finalize:
            refresh_pagerank(graph, m.pagerank_damping)

    def _resolve_concepts(self, graph: MemoryGraph, concepts: Sequence[str], emb: Tensor,
                          timestamp: float, window: int) -> Tensor:
        """Semantic node ids ``[k]`` (unique, in first-mention order) for a window's concepts."""
        dev, tau_dup = graph.device, self.consolidation.tau_dup
        if not concepts:
            return torch.zeros(0, dtype=torch.long, device=dev)
        emb = emb.to(dev, torch.float32)
        ids = [graph.concept_index.get(c.casefold(), -1) for c in concepts]
        unknown = [k for k, i in enumerate(ids) if i < 0]  # a known text needs no similarity
        if unknown:
            best, nearest = graph.nearest_semantic(emb[unknown])  # the active concepts only
            for k, ok, node in zip(unknown, (best >= tau_dup).tolist(), nearest.tolist(),
                                   strict=True):
                if ok:
                    ids[k] = node
        # New concepts: greedy leader clustering among themselves at tau_dup.
        fresh = [k for k, i in enumerate(ids) if i < 0]
        if fresh:
            intra = (emb[fresh] @ emb[fresh].T).tolist()
            leader_of: list[int] = []  # position in `fresh` of each fresh concept's leader
            leaders: list[int] = []
            for p in range(len(fresh)):
                lead = next((q for q in leaders if intra[p][q] >= tau_dup), p)
                if lead == p:
                    leaders.append(p)
                leader_of.append(lead)
            start = graph.num_semantic_created
            keys = [f"S:{start + j}" for j in range(len(leaders))]
            texts = [concepts[fresh[p]] for p in leaders]
            new_ids = graph.add_nodes(emb[[fresh[p] for p in leaders]], SEMANTIC,
                                      timestamp, texts, keys, None, window=window).tolist()
            graph.num_semantic_created += len(leaders)
            node_of_leader = dict(zip(leaders, new_ids, strict=True))
            for text, node in zip(texts, new_ids, strict=True):
                graph.index_concept(text, node)
            for p, k in enumerate(fresh):
                ids[k] = node_of_leader[leader_of[p]]
        return torch.tensor(list(dict.fromkeys(ids)), dtype=torch.long, device=dev)


def _abstraction_edges(graph: MemoryGraph, episodes: Tensor, sem: Tensor,
                       edges: _NewEdges) -> None:
    r"""Step 4: abstraction edges in both directions between every episode and every concept
    node of the window, weight :math:`\max(0, \cos(\mathbf{h}_e, \mathbf{h}_s))`."""
    if not (sem.numel() and episodes.numel()):
        return
    x = graph.x
    cos = (x[episodes] @ x[sem].T).clamp(min=0.0)  # [n_ep, n_sem]
    ep_rep = episodes.repeat_interleave(sem.numel())
    sem_rep = sem.repeat(episodes.numel())
    flat = cos.reshape(-1)
    edges.emit(ep_rep, sem_rep, ABSTRACTION, flat)
    edges.emit(sem_rep, ep_rep, ABSTRACTION, flat)


class _NewEdges:
    """The edges a window adds, in the order emitted, added to the graph in one call."""

    def __init__(self) -> None:
        self.srcs: list[Tensor] = []
        self.dsts: list[Tensor] = []
        self.types: list[Tensor] = []
        self.weights: list[Tensor] = []

    def emit(self, src: Tensor, dst: Tensor, etype: int, weight: Tensor) -> None:
        self.srcs.append(src)
        self.dsts.append(dst)
        self.types.append(torch.full_like(src, etype))
        self.weights.append(weight)

    def stacked(self) -> tuple[Tensor, Tensor, Tensor]:
        """``edge_index [2, E]``, ``edge_type [E]``, ``edge_weight [E]`` of every edge emitted."""
        return (torch.stack([torch.cat(self.srcs), torch.cat(self.dsts)]), torch.cat(self.types),
                torch.cat(self.weights))


@dataclass
class _Windows:
    """A batch's windows in flat order and what consolidating each reads: its turns and their
    embeddings (rows ``start:start + len`` of ``turn_emb``), its concepts and theirs (rows of
    ``vocab_emb``, ``row_of`` a concept's row), and (``starts``) its first turn and its
    conversation."""

    turns: list[list[Turn]]
    concepts: list[list[str]]
    turn_emb: Tensor
    vocab_emb: Tensor
    row_of: dict[str, int]
    starts: list[tuple[int, int]]

    @classmethod
    def of(cls, windows: Sequence[Sequence[list[Turn]]], concepts: list[list[str]],
           turn_emb: Tensor, vocab: Sequence[str], vocab_emb: Tensor) -> _Windows:
        """From the windows of each conversation, every window's concepts (flat order), the
        embeddings of all turns and of the ``vocab`` of concepts."""
        starts: list[tuple[int, int]] = []
        turn_pos = 0
        for ci, conv_windows in enumerate(windows):
            for win in conv_windows:
                starts.append((turn_pos, ci))
                turn_pos += len(win)
        return cls([w for ws in windows for w in ws], concepts, turn_emb, vocab_emb,
                   {c: i for i, c in enumerate(vocab)}, starts)

    def inputs(self, k: int) -> tuple[list[Turn], Tensor, list[str], Tensor]:
        """The arguments of :meth:`GraphBuilder.consolidate` for window ``k``."""
        turns, cs = self.turns[k], self.concepts[k]
        rows = torch.tensor([self.row_of[c] for c in cs], dtype=torch.long)
        start = self.starts[k][0]
        return (turns, self.turn_emb[start:start + len(turns)], cs,
                self.vocab_emb[rows.to(self.vocab_emb.device)])


def window_key(window: Sequence[Turn]) -> tuple:
    """What a window's extraction and consolidation read of its turns (ids, speakers, texts,
    captions, sessions, times): windows with equal keys are the same window wherever they
    stand."""
    return tuple((t.dia_id, t.speaker, t.text, t.blip_caption, t.session_index, t.timestamp)
                 for t in window)


class _Prefix:
    """A node of :meth:`GraphBuilder.build_many`'s prefix tree: the flat index of the window it
    consolidates, the windows that may follow it, and the conversations that end with it."""

    __slots__ = ("children", "ends", "window")

    def __init__(self, window: int) -> None:
        self.window = window
        self.children: dict[tuple, _Prefix] = {}
        self.ends: list[int] = []


def _prefix_tree(windows: Sequence[Sequence[list[Turn]]], keys: Sequence[tuple],
                 concepts: Sequence[list[str]]) -> _Prefix:
    """One prefix tree of windows over the conversations (``windows`` per conversation;
    ``keys`` and ``concepts`` per window in flat order): a node is a window (its turns and
    concepts) reached through the same windows before it."""
    root = _Prefix(-1)
    pos = 0
    for ci, conv_windows in enumerate(windows):
        node = root
        for _ in conv_windows:
            key = (keys[pos], tuple(concepts[pos]))
            node = node.children.setdefault(key, _Prefix(pos))
            pos += 1
        node.ends.append(ci)
    return root


def _count(root: _Prefix) -> int:
    """The windows of the tree below ``root`` (each consolidated once)."""
    total, stack = 0, list(root.children.values())
    while stack:
        node = stack.pop()
        total += 1
        stack.extend(node.children.values())
    return total


def find_edges(graph: MemoryGraph, src: Tensor, dst: Tensor, edge_type: int) -> Tensor:
    """Slots of the edges ``src[k] -> dst[k]`` of type ``edge_type``; ``-1`` where absent.

    One pass over the edges (type and source filter), then a sorted-key lookup among the
    :math:`E_s` edges leaving the queried sources: :math:`O(E + (E_s + m) \\log E_s)` tensor
    ops, no Python loop over edges.
    """
    out = torch.full_like(src, -1)
    if src.numel() == 0 or graph.num_edges == 0:
        return out
    # only the edges of that type leaving one of the queried sources: a window's few concepts,
    # not every edge of the type (one pass over the edges instead of a sort of them all)
    ei = graph.edge_index
    is_src = torch.zeros(graph.num_nodes, dtype=torch.bool, device=src.device)
    is_src[src] = True
    cand = ((graph.edge_type == edge_type) & is_src[ei[0]]).nonzero().view(-1)
    if cand.numel() == 0:
        return out
    n = max(graph.num_nodes, 1)
    ei = ei[:, cand]
    keys, perm = (ei[0] * n + ei[1]).sort()
    query = src * n + dst
    pos = torch.searchsorted(keys, query).clamp(max=keys.numel() - 1)
    hit = keys[pos] == query
    out[hit] = cand[perm[pos[hit]]]
    return out


__all__ = ["GraphBuilder", "Consolidation", "Maintenance",
           "hours_since_epoch", "temporal_weight", "cooccurrence_weight", "windows_of",
           "window_key", "find_edges", "HOURS_PER_UNIT", "ASSOCIATION_WEIGHTINGS"]
