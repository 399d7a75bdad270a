"""One conversation's SYNAPSE memory graph, held as growable tensors (SPEC §1.1).

The graph only stores; :mod:`synapse_pt.graph.consolidation` decides what goes in. Node and edge
tensors live in buffers whose capacity doubles when full, so appending the nodes and edges of a turn
costs amortised :math:`O(1)` per element and never copies the whole graph; the public attributes are
views ``[:num_nodes]`` / ``[:num_edges]`` of those buffers.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data

from .types import EDGE_TYPE_NAMES, NODE_TYPE_NAMES, SEMANTIC

_NODE_BUFFERS = ("x", "node_type", "timestamp", "active", "last_active_window", "pagerank")
# The semantic store is compacted when it holds more dead rows than this and than a quarter of
# its live ones (so a match scans at most 1.25x the active concepts; amortised O(1) per row).
_SEMANTIC_MIN_DEAD = 64
_EDGE_BUFFERS = ("edge_index", "edge_type", "edge_weight")


class MemoryGraph:
    r"""A directed, weighted, typed graph :math:`G = (V, E)` for one conversation.

    Node tensors (``N = num_nodes``):

    * ``x`` ``[N, d]`` float32: unit-norm embeddings :math:`\mathbf{h}_i`;
    * ``node_type`` ``[N]`` long: :data:`~synapse_pt.graph.types.EPISODIC` or
      :data:`~synapse_pt.graph.types.SEMANTIC`;
    * ``timestamp`` ``[N]`` float64: :math:`\tau_i` in hours since the Unix epoch (naive datetimes
      read as UTC); a semantic node carries the time of the last turn of the window that created it;
    * ``active`` ``[N]`` bool: the node belongs to the active graph (False once collected by the
      dormancy maintenance; its id stays valid, it has no edges);
    * ``last_active_window`` ``[N]`` long: the last consolidation window in which the node was
      activated (see :class:`~synapse_pt.graph.consolidation.GraphBuilder`);
    * ``pagerank`` ``[N]`` float32: cached raw PageRank scores (sum 1 over the active nodes).

    Edge tensors (``E = num_edges``), PyG convention ``edge_index[0] = source j``,
    ``edge_index[1] = target i``:

    * ``edge_index`` ``[2, E]`` long, ``edge_type`` ``[E]`` long
      (:data:`~synapse_pt.graph.types.TEMPORAL`, ``ABSTRACTION``, ``ASSOCIATION``),
      ``edge_weight`` ``[E]`` float32 :math:`w_{ji}`.

    Edge slots keep creation order (dropping edges compacts the buffer stably), so a smaller slot
    means an older edge.

    Python lists beside the tensors: ``texts``, ``node_keys`` (episodic: the LoCoMo ``dia_id`` such
    as ``"D3:14"``; semantic: ``"S:<k>"``, which no ``dia_id`` can take), ``speakers`` (``None`` for
    semantic nodes); ``key_to_index`` maps a key to its node id. Consolidation state kept with the
    graph: ``num_windows``, ``last_episode``, ``concept_index`` (case-folded concept text ->
    semantic node id; write it with :meth:`index_concept`), ``cooccurrence`` (unordered
    concept-node pair -> number of windows in which both occurred), ``num_collected``.

    The active semantic nodes are also kept in a store of their own (ids and embeddings in
    creation order, see :meth:`nearest_semantic`), so matching a window's concepts costs the
    number of active concepts, however many nodes were collected before; collected rows are
    dropped from it lazily (amortised :math:`O(1)` per collected node).

    The tensor attributes are views: valid until the next mutation of the graph. Use
    :meth:`to_data` for a snapshot.

    Args:
        sample_id: the conversation's id.
        dim: embedding size :math:`d`.
        device: where every tensor lives.
        node_capacity: initial node buffer size (doubles when full).
        edge_capacity: initial edge buffer size (doubles when full).
    """

    def __init__(self, sample_id: str, dim: int, *, device: str | torch.device = "cpu",
                 node_capacity: int = 64, edge_capacity: int = 256) -> None:
        if dim < 1:
            raise ValueError(f"MemoryGraph({sample_id!r}): dim must be >= 1, got {dim}")
        self.sample_id = sample_id
        self.dim = dim
        self.device = torch.device(device)
        self.texts: list[str] = []
        self.node_keys: list[str] = []
        self.speakers: list[str | None] = []
        self.key_to_index: dict[str, int] = {}
        self._num_nodes = 0
        self._num_edges = 0
        self.node_reallocations = 0
        self.edge_reallocations = 0
        # Consolidation state (written by GraphBuilder).
        self.num_windows = 0
        self.num_semantic_created = 0
        self.last_episode: int | None = None
        self.concept_index: dict[str, int] = {}
        self.cooccurrence: dict[tuple[int, int], int] = {}
        self.num_collected = 0
        self._concept_texts: dict[int, list[str]] = {}  # node id -> its keys in concept_index
        self._num_active = 0
        self._buf: dict[str, Tensor] = {}
        self._alloc_nodes(max(1, node_capacity))
        self._alloc_edges(max(1, edge_capacity))
        # the semantic store: rows [0, _sem_len) of these buffers, creation order
        self._sem_ids = torch.zeros(0, dtype=torch.long, device=self.device)
        self._sem_x = torch.zeros(0, dim, dtype=torch.float32, device=self.device)
        self._sem_alive = torch.zeros(0, dtype=torch.bool, device=self.device)
        self._sem_len = self._sem_dead = 0

    # ----------------------------------------------------------------------------- buffers
    def _alloc_nodes(self, capacity: int) -> None:
        dev, n, old = self.device, self._num_nodes, self._buf
        new = {
            "x": torch.zeros(capacity, self.dim, dtype=torch.float32, device=dev),
            "node_type": torch.zeros(capacity, dtype=torch.long, device=dev),
            "timestamp": torch.zeros(capacity, dtype=torch.float64, device=dev),
            "active": torch.zeros(capacity, dtype=torch.bool, device=dev),
            "last_active_window": torch.zeros(capacity, dtype=torch.long, device=dev),
            "pagerank": torch.zeros(capacity, dtype=torch.float32, device=dev),
        }
        if old:
            for name in _NODE_BUFFERS:
                new[name][:n] = old[name][:n]
        self._buf.update(new)
        self._node_capacity = capacity

    def _alloc_edges(self, capacity: int) -> None:
        dev, m, old = self.device, self._num_edges, self._buf
        new = {
            "edge_index": torch.zeros(2, capacity, dtype=torch.long, device=dev),
            "edge_type": torch.zeros(capacity, dtype=torch.long, device=dev),
            "edge_weight": torch.zeros(capacity, dtype=torch.float32, device=dev),
        }
        if "edge_index" in old:
            new["edge_index"][:, :m] = old["edge_index"][:, :m]
            new["edge_type"][:m] = old["edge_type"][:m]
            new["edge_weight"][:m] = old["edge_weight"][:m]
        self._buf.update(new)
        self._edge_capacity = capacity

    def _reserve_nodes(self, extra: int) -> None:
        needed = self._num_nodes + extra
        if needed > self._node_capacity:
            self._alloc_nodes(max(needed, 2 * self._node_capacity))
            self.node_reallocations += 1

    def _reserve_edges(self, extra: int) -> None:
        needed = self._num_edges + extra
        if needed > self._edge_capacity:
            self._alloc_edges(max(needed, 2 * self._edge_capacity))
            self.edge_reallocations += 1

    # ----------------------------------------------------------------------------- views
    @property
    def num_nodes(self) -> int:
        return self._num_nodes

    @property
    def num_edges(self) -> int:
        return self._num_edges

    @property
    def node_capacity(self) -> int:
        return self._node_capacity

    @property
    def edge_capacity(self) -> int:
        return self._edge_capacity

    @property
    def num_active(self) -> int:
        """Number of active (not collected) nodes, kept as a counter (no pass over the nodes)."""
        return self._num_active

    @property
    def x(self) -> Tensor:
        return self._buf["x"][: self._num_nodes]

    @property
    def node_type(self) -> Tensor:
        return self._buf["node_type"][: self._num_nodes]

    @property
    def timestamp(self) -> Tensor:
        return self._buf["timestamp"][: self._num_nodes]

    @property
    def active(self) -> Tensor:
        return self._buf["active"][: self._num_nodes]

    @property
    def last_active_window(self) -> Tensor:
        return self._buf["last_active_window"][: self._num_nodes]

    @property
    def pagerank(self) -> Tensor:
        return self._buf["pagerank"][: self._num_nodes]

    @property
    def edge_index(self) -> Tensor:
        return self._buf["edge_index"][:, : self._num_edges]

    @property
    def edge_type(self) -> Tensor:
        return self._buf["edge_type"][: self._num_edges]

    @property
    def edge_weight(self) -> Tensor:
        return self._buf["edge_weight"][: self._num_edges]

    # ----------------------------------------------------------------------------- mutation
    def add_nodes(self, x: Tensor, node_type: int | Tensor, timestamp: float | Tensor,
                  texts: Sequence[str], keys: Sequence[str],
                  speakers: Sequence[str | None] | None = None, *, window: int = 0) -> Tensor:
        """Append ``k`` active nodes; returns their ids ``[k]`` (long, on the graph's device).

        Args:
            x: embeddings ``[k, d]``.
            node_type: one type code for all, or ``[k]``.
            timestamp: hours since the epoch, one value or ``[k]``.
            texts, keys, speakers: ``k`` entries each (``speakers`` defaults to ``None``s).
            window: the consolidation window that creates them (``last_active_window``).
        """
        k = len(keys)
        speakers = [None] * k if speakers is None else list(speakers)
        if x.dim() != 2 or x.size(0) != k or x.size(1) != self.dim:
            raise ValueError(f"MemoryGraph({self.sample_id!r}).add_nodes: x has shape "
                             f"{tuple(x.shape)}, expected [{k}, {self.dim}]")
        if len(texts) != k or len(speakers) != k:
            raise ValueError(f"MemoryGraph({self.sample_id!r}).add_nodes: {k} keys but "
                             f"{len(texts)} texts and {len(speakers)} speakers")
        seen: set[str] = set()
        for key in keys:
            if key in self.key_to_index or key in seen:
                raise ValueError(f"MemoryGraph({self.sample_id!r}).add_nodes: duplicate node key "
                                 f"{key!r}")
            seen.add(key)
        self._reserve_nodes(k)
        lo, hi = self._num_nodes, self._num_nodes + k
        b = self._buf
        b["x"][lo:hi] = x.to(self.device, torch.float32)
        b["node_type"][lo:hi] = torch.as_tensor(node_type, dtype=torch.long, device=self.device)
        b["timestamp"][lo:hi] = torch.as_tensor(timestamp, dtype=torch.float64, device=self.device)
        b["active"][lo:hi] = True
        b["last_active_window"][lo:hi] = window
        b["pagerank"][lo:hi] = 0.0
        self._num_nodes = hi
        self._num_active += k
        semantic = (b["node_type"][lo:hi] == SEMANTIC).nonzero().view(-1)
        if semantic.numel():
            self._append_semantic(semantic + lo, b["x"][lo:hi][semantic])
        for offset, key in enumerate(keys):
            self.key_to_index[key] = lo + offset
        self.texts.extend(texts)
        self.node_keys.extend(keys)
        self.speakers.extend(speakers)
        return torch.arange(lo, hi, device=self.device)

    def add_edges(self, edge_index: Tensor, edge_type: int | Tensor, edge_weight: Tensor) -> Tensor:
        """Append ``m`` edges ``edge_index [2, m]`` (source, target); returns their slots."""
        m = edge_index.size(1) if edge_index.dim() == 2 else -1
        if edge_index.dim() != 2 or edge_index.size(0) != 2 or edge_weight.numel() != m:
            raise ValueError(f"MemoryGraph({self.sample_id!r}).add_edges: edge_index "
                             f"{tuple(edge_index.shape)} and edge_weight "
                             f"{tuple(edge_weight.shape)} do not describe [2, m] / [m] edges")
        if m and (int(edge_index.min()) < 0 or int(edge_index.max()) >= self._num_nodes):
            raise IndexError(f"MemoryGraph({self.sample_id!r}).add_edges: endpoint out of range "
                             f"[0, {self._num_nodes})")
        self._reserve_edges(m)
        lo, hi = self._num_edges, self._num_edges + m
        b = self._buf
        b["edge_index"][:, lo:hi] = edge_index.to(self.device, torch.long)
        b["edge_type"][lo:hi] = torch.as_tensor(edge_type, dtype=torch.long, device=self.device)
        b["edge_weight"][lo:hi] = edge_weight.to(self.device, torch.float32)
        self._num_edges = hi
        return torch.arange(lo, hi, device=self.device)

    def set_edge_weight(self, slots: Tensor, weight: Tensor) -> None:
        """Overwrite the weights of existing edges (e.g. an accumulated co-occurrence weight)."""
        if slots.numel() and int(slots.max()) >= self._num_edges:
            raise IndexError(f"MemoryGraph({self.sample_id!r}).set_edge_weight: slot out of range "
                             f"[0, {self._num_edges})")
        self._buf["edge_weight"][slots] = weight.to(self.device, torch.float32)

    def keep_edges(self, mask: Tensor) -> int:
        """Drop every edge whose ``mask`` entry is False, keeping the others' order (stable
        compaction inside the buffer). Returns the number of edges dropped."""
        if mask.shape != (self._num_edges,):
            raise ValueError(f"MemoryGraph({self.sample_id!r}).keep_edges: mask has shape "
                             f"{tuple(mask.shape)}, expected [{self._num_edges}]")
        keep = mask.nonzero().view(-1)  # ascending: the compaction is stable
        kept, m = keep.numel(), self._num_edges
        dropped = m - kept
        if dropped:
            b = self._buf  # one gather per contiguous row (2-3x faster than masked 2-D indexing)
            for row in (b["edge_index"][0], b["edge_index"][1], b["edge_type"], b["edge_weight"]):
                row[:kept] = row[:m].index_select(0, keep)
            self._num_edges = kept
        return dropped

    def deactivate(self, nodes: Tensor) -> int:
        """Collect ``nodes``: mark them inactive and drop every edge touching them. Ids stay valid.
        Returns the number of edges dropped."""
        if nodes.numel() == 0:
            return 0
        nodes = torch.unique(nodes.to(self.device, torch.long))
        nodes = nodes[self.active[nodes]]  # collecting a node twice counts it once
        self._buf["active"][nodes] = False
        self._buf["pagerank"][nodes] = 0.0
        gone = torch.zeros(self._num_nodes, dtype=torch.bool, device=self.device)
        gone[nodes] = True
        ei = self.edge_index
        dropped = self.keep_edges(~(gone[ei[0]] | gone[ei[1]]))
        gone_ids = nodes.tolist()
        for i in gone_ids:  # only the collected nodes' concept keys, not the whole index
            for text in self._concept_texts.pop(i, ()):
                if self.concept_index.get(text) == i:
                    del self.concept_index[text]
        if self.last_episode is not None and gone[self.last_episode]:
            self.last_episode = None
        self._num_active -= len(gone_ids)
        self.num_collected += len(gone_ids)
        self._drop_semantic(gone)
        return dropped

    def index_concept(self, text: str, node: int) -> None:
        """Map the case-folded concept ``text`` to ``node`` in ``concept_index`` unless it is
        mapped already (the first node to carry a text keeps it)."""
        key = text.casefold()
        if key not in self.concept_index:
            self.concept_index[key] = node
            self._concept_texts.setdefault(node, []).append(key)

    # ----------------------------------------------------------------------------- semantic store
    def _append_semantic(self, ids: Tensor, x: Tensor) -> None:
        need = self._sem_len + ids.numel()
        if need > self._sem_ids.numel():
            cap = max(need, 2 * self._sem_ids.numel(), 64)
            grown = (torch.zeros(cap, dtype=torch.long, device=self.device),
                     torch.zeros(cap, self.dim, dtype=torch.float32, device=self.device),
                     torch.zeros(cap, dtype=torch.bool, device=self.device))
            n = self._sem_len
            grown[0][:n], grown[1][:n], grown[2][:n] = (self._sem_ids[:n], self._sem_x[:n],
                                                        self._sem_alive[:n])
            self._sem_ids, self._sem_x, self._sem_alive = grown
        lo = self._sem_len
        self._sem_ids[lo:need] = ids
        self._sem_x[lo:need] = x
        self._sem_alive[lo:need] = True
        self._sem_len = need

    def _drop_semantic(self, gone: Tensor) -> None:
        """Mark the store's rows of the collected nodes ``gone`` (``[N]`` bool) dead; compact
        the store once a quarter of it is dead (stable: creation order kept)."""
        n = self._sem_len
        if n == 0:
            return
        alive = self._sem_alive[:n]
        dead_now = alive & gone[self._sem_ids[:n]]
        self._sem_dead += int(dead_now.sum())
        alive &= ~dead_now
        if self._sem_dead > max(_SEMANTIC_MIN_DEAD, (n - self._sem_dead) // 4):
            keep = alive.nonzero().view(-1)
            k = keep.numel()
            self._sem_ids[:k] = self._sem_ids[:n][keep]
            self._sem_x[:k] = self._sem_x[:n][keep]
            self._sem_alive[:k] = True
            self._sem_alive[k:n] = False
            self._sem_len, self._sem_dead = k, 0

    def nearest_semantic(self, emb: Tensor) -> tuple[Tensor, Tensor]:
        r"""For each row of ``emb`` ``[k, d]`` (unit norm), the active semantic node with the
        largest cosine: ``(best [k], node [k])``; ``best = -inf`` and ``node = -1`` when the graph
        has no active semantic node. Ties go to the older node (smaller id)."""
        n = self._sem_len
        k = emb.size(0)
        if n == 0 or self._sem_dead == n:
            return (torch.full((k,), float("-inf"), device=self.device),
                    torch.full((k,), -1, dtype=torch.long, device=self.device))
        scores = emb.to(self.device, torch.float32) @ self._sem_x[:n].T
        scores.masked_fill_(~self._sem_alive[:n], float("-inf"))
        best, row = scores.max(dim=1)
        return best, self._sem_ids[:n][row]

    def set_pagerank(self, scores: Tensor) -> None:
        """Cache PageRank scores ``[N]``."""
        if scores.shape != (self._num_nodes,):
            raise ValueError(f"MemoryGraph({self.sample_id!r}).set_pagerank: scores have shape "
                             f"{tuple(scores.shape)}, expected [{self._num_nodes}]")
        self._buf["pagerank"][: self._num_nodes] = scores.to(self.device, torch.float32)

    def to(self, device: str | torch.device) -> MemoryGraph:
        """Move every buffer to ``device`` (in place); returns ``self``."""
        self.device = torch.device(device)
        self._buf = {k: v.to(self.device) for k, v in self._buf.items()}
        self._sem_ids, self._sem_x, self._sem_alive = (
            t.to(self.device) for t in (self._sem_ids, self._sem_x, self._sem_alive))
        return self

    def fork(self, sample_id: str | None = None) -> MemoryGraph:
        """An independent copy (every buffer and every piece of consolidation state), renamed
        ``sample_id`` when given: what a conversation that begins with this graph's windows
        continues from (:meth:`~synapse_pt.graph.consolidation.GraphBuilder.build_many`)."""
        twin = copy.deepcopy(self)
        if sample_id is not None:
            twin.sample_id = sample_id
        return twin

    # ----------------------------------------------------------------------------- reading
    def index_of(self, key: str) -> int:
        """Node id of ``key`` (a ``dia_id`` or ``"S:<k>"``)."""
        try:
            return self.key_to_index[key]
        except KeyError:
            raise KeyError(f"MemoryGraph({self.sample_id!r}): no node with key {key!r}") from None

    def in_degree(self) -> Tensor:
        """Number of incoming edges per node ``[N]``."""
        return torch.bincount(self.edge_index[1], minlength=self._num_nodes)

    def num_nodes_by_type(self, *, active_only: bool = False) -> dict[str, int]:
        nt = self.node_type[self.active] if active_only else self.node_type
        counts = torch.bincount(nt, minlength=len(NODE_TYPE_NAMES)).tolist()
        return dict(zip(NODE_TYPE_NAMES, counts, strict=True))

    def num_edges_by_type(self) -> dict[str, int]:
        counts = torch.bincount(self.edge_type, minlength=len(EDGE_TYPE_NAMES)).tolist()
        return dict(zip(EDGE_TYPE_NAMES, counts, strict=True))

    def to_data(self) -> Data:
        """A snapshot as :class:`torch_geometric.data.Data` (tensors cloned, lists copied)."""
        return Data(
            x=self.x.clone(), node_type=self.node_type.clone(), timestamp=self.timestamp.clone(),
            active=self.active.clone(), last_active_window=self.last_active_window.clone(),
            pagerank=self.pagerank.clone(), edge_index=self.edge_index.clone(),
            edge_type=self.edge_type.clone(), edge_weight=self.edge_weight.clone(),
            texts=list(self.texts), node_keys=list(self.node_keys),
            speakers=list(self.speakers), sample_id=self.sample_id, num_nodes=self._num_nodes,
        )

    def __repr__(self) -> str:
        nodes = ", ".join(f"{k}={v}" for k, v in self.num_nodes_by_type().items())
        edges = ", ".join(f"{k}={v}" for k, v in self.num_edges_by_type().items())
        return (f"MemoryGraph(sample_id={self.sample_id!r}, nodes[{nodes}], edges[{edges}], "
                f"windows={self.num_windows}, device={self.device})")
