from __future__ import annotations

import pytest
import torch
from graph_helpers import ScriptedExtractor, simple_conversation
from torch_geometric.data import Batch

from synapse_pt.graph.batch import GraphBatch
from synapse_pt.graph.consolidation import GraphBuilder
from synapse_pt.models.hashing import HashingEncoder


@pytest.fixture
def graphs(device):
    convs = [simple_conversation(7, "s1"), simple_conversation(4, "s2"),
             simple_conversation(6, "s3")]
    script = [["Ann", "pottery"], ["camping"], ["Bob", "ski trip"], ["ski trip"], ["museum"]]
    return GraphBuilder(HashingEncoder(16), ScriptedExtractor(script), window=5,
                        device=device).build_many(convs)


def test_offsets_keep_edges_inside_their_graph(graphs):
    b = GraphBatch(graphs)
    sizes = [g.num_nodes for g in graphs]
    assert b.num_graphs == 3 and b.num_nodes == sum(sizes)
    assert b.ptr.tolist() == [0, sizes[0], sizes[0] + sizes[1], sum(sizes)]
    assert b.batch.tolist() == sum(([i] * n for i, n in enumerate(sizes)), [])
    assert b.num_edges == sum(g.num_edges for g in graphs)
    for gi, g in enumerate(graphs):
        start, end = b.node_range(gi)
        sel = b.edge_batch == gi
        ei = b.edge_index[:, sel]
        assert bool(((ei >= start) & (ei < end)).all())
        assert torch.equal(ei - start, g.edge_index)  # graph 2's edges point into graph 2
        assert torch.equal(b.edge_weight[sel], g.edge_weight)
        assert torch.equal(b.x[start:end], g.x)
    # the same shift as PyG's own batching of edge_index
    pyg = Batch.from_data_list([g.to_data() for g in graphs])
    assert torch.equal(pyg.edge_index, b.edge_index)


def test_keys_and_graph_lookup(graphs):
    b = GraphBatch(graphs)
    assert b.graph_of("s2") == 1 and b.sample_ids == ["s1", "s2", "s3"]
    i = b.index_of("s2", "D1:3")
    assert b.node_keys[i] == "D1:3" and int(b.batch[i]) == 1
    assert i == b.ptr[1].item() + graphs[1].index_of("D1:3")
    assert b.texts[i] == graphs[1].texts[graphs[1].index_of("D1:3")]
    assert len(b.node_keys) == len(b.texts) == len(b.speakers) == b.num_nodes
    with pytest.raises(KeyError, match="no graph for sample_id 'nope'"):
        b.graph_of("nope")
    with pytest.raises(KeyError, match="no node with key 'S:99'"):
        b.index_of("s1", "S:99")


def test_pagerank_unit_is_rescaled_per_graph(graphs):
    b = GraphBatch(graphs)
    assert torch.equal(b.pagerank, torch.cat([g.pagerank for g in graphs]))
    for gi in range(b.num_graphs):
        start, end = b.node_range(gi)
        pu = b.pagerank_unit[start:end]
        assert pu.min().item() == pytest.approx(0.0) and pu.max().item() == pytest.approx(1.0)
        order = torch.argsort(b.pagerank[start:end])
        assert bool((pu[order].diff() >= -1e-6).all())  # monotone in the raw score


def test_duplicate_sample_ids_rejected(graphs):
    with pytest.raises(ValueError, match="duplicate sample_id"):
        GraphBatch([graphs[0], graphs[0]])
    with pytest.raises(ValueError, match="no graphs"):
        GraphBatch([])
