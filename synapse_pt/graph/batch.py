"""Many conversations' memory graphs as one disconnected graph (PyG ``Batch`` semantics).

The concatenation is done here rather than with :meth:`torch_geometric.data.Batch.from_data_list`,
which shifts by the node offset *every* attribute whose name contains ``"index"`` (it would corrupt
e.g. an index-valued node field) and keeps Python lists nested per graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .memory_graph import MemoryGraph
from .pagerank import rescale_unit_interval


@dataclass(frozen=True)
class GraphBlock:
    """One conversation's graph out of a :class:`GraphBatch`, with local node ids
    (:meth:`GraphBatch.block`): what a per-conversation retrieval block reads.

    Attributes:
        graph: its position in the batch; ``sample_id``: its conversation.
        offset: the global id of its node 0 (``ptr[graph]``); ``nodes``: its global id range.
        x ``[N_g, d]``, node_type, active, pagerank (raw) ``[N_g]``: views of the batch's rows.
        edge_index ``[2, E_g]`` (local ids), edge_type, edge_weight ``[E_g]``.
    """

    graph: int
    sample_id: str
    offset: int
    x: Tensor
    node_type: Tensor
    active: Tensor
    pagerank: Tensor
    edge_index: Tensor
    edge_type: Tensor
    edge_weight: Tensor

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    @property
    def nodes(self) -> slice:
        """The block's rows in the batch's node tensors."""
        return slice(self.offset, self.offset + self.num_nodes)


class GraphBatch:
    r"""The disjoint union of graphs :math:`G_1, \dots, G_B`.

    Node ``n`` of graph ``g`` becomes global node ``ptr[g] + n``; ``edge_index`` is shifted
    accordingly, so no edge leaves its graph.

    Attributes:
        x, node_type, timestamp, active, last_active_window, pagerank: concatenated node tensors
            ``[N, ...]`` (``pagerank`` raw, each graph's scores summing to 1 over its active nodes).
        pagerank_unit: ``[N]`` PageRank min-max rescaled to :math:`[0, 1]` within each graph.
        edge_index ``[2, E]`` (global ids), edge_type ``[E]``, edge_weight ``[E]``.
        batch: ``[N]`` long, the graph of each node; ``edge_batch``: ``[E]`` the graph of each edge.
        ptr: ``[B + 1]`` long node offsets; ``edge_ptr``: ``[B + 1]`` edge offsets.
        sample_ids: ``B`` conversation ids; ``texts``, ``node_keys``, ``speakers``: global lists.
        key_to_index: one dict per graph mapping a node key to its *global* node id.
    """

    def __init__(self, graphs: Sequence[MemoryGraph], *, device: str | torch.device | None = None
                 ) -> None:
        if not graphs:
            raise ValueError("GraphBatch: no graphs given")
        self.device = torch.device(device) if device is not None else graphs[0].device
        self.sample_ids = [g.sample_id for g in graphs]
        dupes = sorted({s for s in self.sample_ids if self.sample_ids.count(s) > 1})
        if dupes:
            raise ValueError(f"GraphBatch: duplicate sample_id(s) {dupes}")
        dims = {g.dim for g in graphs}
        if len(dims) > 1:
            raise ValueError(f"GraphBatch: graphs have different embedding sizes {sorted(dims)}")
        self._graph_index = {s: i for i, s in enumerate(self.sample_ids)}
        dev = self.device
        num_nodes = torch.tensor([g.num_nodes for g in graphs], device=dev)
        num_edges = torch.tensor([g.num_edges for g in graphs], device=dev)
        self.ptr = torch.cat([num_nodes.new_zeros(1), num_nodes.cumsum(0)])
        self.edge_ptr = torch.cat([num_edges.new_zeros(1), num_edges.cumsum(0)])
        graph_ids = torch.arange(len(graphs), device=dev)
        self.batch = graph_ids.repeat_interleave(num_nodes)
        self.edge_batch = graph_ids.repeat_interleave(num_edges)

        def cat(name: str) -> Tensor:
            return torch.cat([getattr(g, name).to(dev) for g in graphs])

        self.x = cat("x")
        self.node_type = cat("node_type")
        self.timestamp = cat("timestamp")
        self.active = cat("active")
        self.last_active_window = cat("last_active_window")
        self.pagerank = cat("pagerank")
        self.edge_type = cat("edge_type")
        self.edge_weight = cat("edge_weight")
        self.edge_index = (torch.cat([g.edge_index.to(dev) for g in graphs], dim=1)
                           + self.ptr[:-1][self.edge_batch])
        self.pagerank_unit = rescale_unit_interval(self.pagerank, self.batch)

        self.texts: list[str] = []
        self.node_keys: list[str] = []
        self.speakers: list[str | None] = []
        self.key_to_index: list[dict[str, int]] = []
        for g, offset in zip(graphs, self.ptr[:-1].tolist(), strict=True):
            self.texts.extend(g.texts)
            self.node_keys.extend(g.node_keys)
            self.speakers.extend(g.speakers)
            self.key_to_index.append({k: offset + i for k, i in g.key_to_index.items()})

    @property
    def num_graphs(self) -> int:
        return len(self.sample_ids)

    @property
    def num_nodes(self) -> int:
        return int(self.ptr[-1])

    @property
    def num_edges(self) -> int:
        return int(self.edge_ptr[-1])

    def graph_of(self, sample_id: str) -> int:
        """Position of conversation ``sample_id`` in the batch."""
        try:
            return self._graph_index[sample_id]
        except KeyError:
            raise KeyError(f"GraphBatch: no graph for sample_id {sample_id!r} "
                           f"(have {self.sample_ids})") from None

    def node_range(self, graph: int | str) -> tuple[int, int]:
        """Global node ids ``[start, end)`` of a graph given by position or ``sample_id``."""
        g = self.graph_of(graph) if isinstance(graph, str) else graph
        return int(self.ptr[g]), int(self.ptr[g + 1])

    def block(self, graph: int | str) -> GraphBlock:
        """Graph ``graph`` (position or ``sample_id``) as a :class:`GraphBlock`: its node rows
        and its edges with local ids. The one place a graph is cut out of the batch."""
        g = self.graph_of(graph) if isinstance(graph, str) else graph
        n0, n1 = int(self.ptr[g]), int(self.ptr[g + 1])
        e0, e1 = int(self.edge_ptr[g]), int(self.edge_ptr[g + 1])
        return GraphBlock(g, self.sample_ids[g], n0, self.x[n0:n1], self.node_type[n0:n1],
                          self.active[n0:n1], self.pagerank[n0:n1],
                          self.edge_index[:, e0:e1] - n0, self.edge_type[e0:e1],
                          self.edge_weight[e0:e1])

    def index_of(self, sample_id: str, key: str) -> int:
        """Global node id of node ``key`` of conversation ``sample_id``."""
        mapping = self.key_to_index[self.graph_of(sample_id)]
        try:
            return mapping[key]
        except KeyError:
            raise KeyError(f"GraphBatch: graph {sample_id!r} has no node with key "
                           f"{key!r}") from None

    def __repr__(self) -> str:
        return (f"GraphBatch(num_graphs={self.num_graphs}, num_nodes={self.num_nodes}, "
                f"num_edges={self.num_edges}, device={self.device})")
