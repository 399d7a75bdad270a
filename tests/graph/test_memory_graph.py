from __future__ import annotations

import math

import pytest
import torch

from synapse_pt.graph.memory_graph import MemoryGraph
from synapse_pt.graph.types import ABSTRACTION, EPISODIC, SEMANTIC, TEMPORAL


def _graph(device: str, n: int = 3, dim: int = 4) -> MemoryGraph:
    g = MemoryGraph("s1", dim, device=device, node_capacity=2, edge_capacity=2)
    g.add_nodes(torch.eye(dim)[:n], EPISODIC, torch.arange(n, dtype=torch.float64),
                [f"t{i}" for i in range(n)], [f"D1:{i}" for i in range(n)], ["A"] * n)
    return g


def test_add_nodes_and_edges_views(device):
    g = _graph(device)
    ids = g.add_nodes(torch.ones(1, 4), SEMANTIC, 10.0, ["ski trip"], ["S:0"], window=2)
    assert ids.tolist() == [3] and ids.device.type == torch.device(device).type
    slots = g.add_edges(torch.tensor([[0, 1], [1, 2]]), TEMPORAL, torch.tensor([0.5, 0.25]))
    assert slots.tolist() == [0, 1]
    assert g.num_nodes == 4 and g.num_edges == 2
    assert g.x.shape == (4, 4) and g.edge_index.shape == (2, 2)
    assert g.node_type.tolist() == [EPISODIC] * 3 + [SEMANTIC]
    assert g.timestamp.dtype == torch.float64 and g.timestamp[3].item() == 10.0
    assert g.speakers == ["A", "A", "A", None]
    assert g.node_keys == ["D1:0", "D1:1", "D1:2", "S:0"]
    assert g.index_of("S:0") == 3 and g.last_active_window.tolist() == [0, 0, 0, 2]
    assert g.active.all()
    assert g.num_nodes_by_type() == {"episodic": 3, "semantic": 1}
    assert g.num_edges_by_type() == {"temporal": 2, "abstraction": 0, "association": 0}


def test_errors_name_the_problem():
    g = _graph("cpu")
    with pytest.raises(ValueError, match="duplicate node key 'D1:0'"):
        g.add_nodes(torch.zeros(1, 4), EPISODIC, 0.0, ["x"], ["D1:0"])
    with pytest.raises(ValueError, match=r"expected \[1, 4\]"):
        g.add_nodes(torch.zeros(1, 3), EPISODIC, 0.0, ["x"], ["D1:9"])
    with pytest.raises(IndexError, match="out of range"):
        g.add_edges(torch.tensor([[0], [7]]), TEMPORAL, torch.ones(1))
    with pytest.raises(KeyError, match="no node with key 'D9:9'"):
        g.index_of("D9:9")


def test_capacity_doubles_geometrically_and_keeps_data(device):
    g = MemoryGraph("s1", 3, device=device, node_capacity=1, edge_capacity=1)
    n = 1000
    xs = torch.randn(n, 3)
    caps = set()
    for i in range(n):
        g.add_nodes(xs[i:i + 1], EPISODIC, float(i), [f"t{i}"], [f"D1:{i}"], ["A"])
        if i:
            g.add_edges(torch.tensor([[i - 1], [i]]), TEMPORAL, torch.tensor([i / n]))
        caps.add(g.node_capacity)
    # Reallocations grow log2(n), not n: 1 -> 2 -> 4 -> ... -> 1024.
    assert g.node_reallocations == math.ceil(math.log2(n))
    assert g.edge_reallocations == math.ceil(math.log2(n - 1))
    assert sorted(caps) == [2 ** k for k in range(11)]
    assert g.node_capacity == 1024 and g.num_nodes == n
    assert torch.equal(g.x.cpu(), xs)
    assert torch.equal(g.timestamp.cpu(), torch.arange(n, dtype=torch.float64))
    assert torch.equal(g.edge_index.cpu(), torch.stack([torch.arange(n - 1), torch.arange(1, n)]))
    assert torch.allclose(g.edge_weight.cpu(), torch.arange(1, n) / n)
    assert g.node_keys[-1] == f"D1:{n - 1}" and g.index_of("D1:500") == 500


def test_views_share_buffer_without_copy():
    g = MemoryGraph("s1", 2, node_capacity=8)
    g.add_nodes(torch.ones(2, 2), EPISODIC, 0.0, ["a", "b"], ["D1:0", "D1:1"])
    ptr = g.x.data_ptr()
    g.add_nodes(torch.ones(1, 2), EPISODIC, 0.0, ["c"], ["D1:2"])
    assert g.x.data_ptr() == ptr and g.node_reallocations == 0


def test_keep_edges_is_stable_and_deactivate_drops_edges(device):
    g = _graph(device, n=4)
    g.add_edges(torch.tensor([[0, 1, 2, 3, 0], [1, 2, 3, 0, 2]]), ABSTRACTION,
                torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5]))
    assert g.keep_edges(torch.tensor([True, False, True, True, True], device=device)) == 1
    assert g.edge_weight.tolist() == pytest.approx([0.1, 0.3, 0.4, 0.5])
    dropped = g.deactivate(torch.tensor([3]))
    assert dropped == 2
    assert g.edge_index.tolist() == [[0, 0], [1, 2]]
    assert g.active.tolist() == [True, True, True, False]
    assert g.index_of("D1:3") == 3 and g.num_collected == 1  # ids stay stable


def test_to_data_is_a_snapshot():
    g = _graph("cpu")
    g.add_edges(torch.tensor([[0], [1]]), TEMPORAL, torch.tensor([0.9]))
    data = g.to_data()
    for name in ("x", "node_type", "timestamp", "active", "last_active_window", "pagerank",
                 "edge_index", "edge_type", "edge_weight"):
        assert torch.equal(getattr(data, name), getattr(g, name)), name
    assert data.num_nodes == 3 and data.sample_id == "s1" and data.node_keys == g.node_keys
    g.keep_edges(torch.tensor([False]))
    assert data.edge_index.shape == (2, 1)


def _reference_nearest(g: MemoryGraph, emb: torch.Tensor) -> tuple[list[float], list[int]]:
    """A plain reference: cosine against every active semantic node, first maximum wins."""
    ids = [i for i in range(g.num_nodes)
           if int(g.node_type[i]) == SEMANTIC and bool(g.active[i])]
    best, node = [], []
    for row in emb:
        scores = [float(row @ g.x[i]) for i in ids]
        if not scores:
            best.append(-math.inf)
            node.append(-1)
            continue
        top = max(scores)
        best.append(top)
        node.append(ids[scores.index(top)])
    return best, node


@pytest.mark.parametrize("seed", [0, 1])
def test_nearest_semantic_against_a_plain_reference_through_collections(device, seed):
    gen = torch.Generator().manual_seed(seed)
    dim = 8
    g = MemoryGraph("s1", dim, device=device, node_capacity=4)
    queries = torch.nn.functional.normalize(torch.randn(5, dim, generator=gen), dim=1)
    assert g.nearest_semantic(queries.to(device))[1].tolist() == [-1] * 5  # no concept yet
    created = 0
    for step in range(30):  # mixed batches of turns and concepts; collect some concepts often
        types = (torch.rand(6, generator=gen) < 0.6).long()  # 1 = SEMANTIC
        x = torch.nn.functional.normalize(torch.randn(6, dim, generator=gen), dim=1)
        keys = [f"D{step}:{i}" if int(t) != SEMANTIC else f"S:{created + i}"
                for i, t in enumerate(types)]
        created += 6
        g.add_nodes(x, types, 0.0, ["t"] * 6, keys)
        if step % 3 == 2:  # collect half of the active concepts, ids chosen at random
            alive = ((g.node_type == SEMANTIC) & g.active).nonzero().view(-1).cpu()
            victims = alive[torch.randperm(alive.numel(), generator=gen)[: alive.numel() // 2]]
            g.deactivate(victims.to(device))
        best, node = g.nearest_semantic(queries.to(device))
        ref_best, ref_node = _reference_nearest(g, queries.to(device))
        assert node.tolist() == ref_node
        assert best.tolist() == pytest.approx(ref_best, abs=1e-5)
    assert g.num_active == int(g.active.sum())
    assert g._sem_len < created  # the store was compacted on the way


def test_deactivate_updates_the_concept_index_and_the_active_count():
    g = _graph("cpu")
    ids = g.add_nodes(torch.eye(4)[:2], SEMANTIC, 0.0, ["Ski Trip", "Mark"], ["S:0", "S:1"])
    g.index_concept("Ski Trip", int(ids[0]))
    g.index_concept("ski trip", int(ids[1]))  # already mapped: the first node keeps the text
    g.index_concept("Mark", int(ids[1]))
    assert g.concept_index == {"ski trip": 3, "mark": 4} and g.num_active == 5
    g.deactivate(torch.tensor([3, 3]))  # a repeated id is collected once
    assert g.concept_index == {"mark": 4} and g.num_active == 4 and g.num_collected == 1
    g.deactivate(torch.tensor([3]))  # already collected: nothing changes
    assert g.num_active == 4 and g.num_collected == 1
