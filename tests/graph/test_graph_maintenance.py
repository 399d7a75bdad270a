from __future__ import annotations

import pytest
import torch
from graph_helpers import ScriptedExtractor, TableEncoder, make_conversation, make_turn

from synapse_pt.graph.consolidation import GraphBuilder
from synapse_pt.graph.maintenance import (
    cap_in_edges,
    collect_dormant,
    dormant_mask,
    mark_activity,
)
from synapse_pt.graph.memory_graph import MemoryGraph
from synapse_pt.graph.types import ABSTRACTION, EPISODIC


def _star(weights: list[float], device: str = "cpu") -> MemoryGraph:
    """Node 0 receives one edge from each of nodes 1..k (weights in slot order), plus 0 -> 1."""
    k = len(weights)
    g = MemoryGraph("s1", 2, device=device)
    g.add_nodes(torch.ones(k + 1, 2), EPISODIC, 0.0, ["t"] * (k + 1),
                [f"D1:{i}" for i in range(k + 1)])
    src = torch.tensor(list(range(1, k + 1)) + [0])
    dst = torch.tensor([0] * k + [1])
    g.add_edges(torch.stack([src, dst]), ABSTRACTION, torch.tensor(weights + [0.2]))
    return g


def test_cap_in_edges_keeps_highest_weights(device):
    g = _star([0.1, 0.9, 0.5, 0.9], device)
    assert cap_in_edges(g, 2) == 2
    assert g.edge_index.tolist() == [[2, 4, 0], [0, 0, 1]]  # order of the survivors kept
    assert g.edge_weight.tolist() == pytest.approx([0.9, 0.9, 0.2])


def test_cap_in_edges_breaks_ties_by_older_edge():
    g = _star([0.5, 0.5, 0.5, 0.9])
    cap_in_edges(g, 3)
    assert g.edge_index[0].tolist() == [1, 2, 4, 0]
    assert cap_in_edges(g, 3) == 0  # nothing above the cap: no-op


def test_collect_dormant_lowest_pagerank_first():
    g = MemoryGraph("s1", 2)
    g.add_nodes(torch.ones(6, 2), EPISODIC, 0.0, ["t"] * 6, [f"D1:{i}" for i in range(6)])
    g.last_active_window[:] = torch.tensor([0, 0, 0, 5, 5, 0])
    g.set_pagerank(torch.tensor([0.3, 0.1, 0.2, 0.1, 0.1, 0.2]))
    g.add_edges(torch.tensor([[0, 1, 3], [1, 2, 4]]), ABSTRACTION, torch.ones(3))
    assert dormant_mask(g, 5, 2).tolist() == [True, True, True, False, False, True]
    victims = collect_dormant(g, window=5, max_nodes=4, dormancy_windows=2)
    assert victims.tolist() == [1, 2]  # 0.1, then the 0.2 tie goes to the smaller id
    assert g.active.tolist() == [True, False, False, True, True, True]
    assert g.edge_index.tolist() == [[3], [4]]  # edges touching 1 or 2 dropped
    # the cap is soft: only dormant nodes can go
    victims = collect_dormant(g, window=5, max_nodes=1, dormancy_windows=2)
    assert sorted(victims.tolist()) == [0, 5] and int(g.active.sum()) == 2


@pytest.mark.parametrize(("gap_hours", "reactivated"), [(1.0, True), (100.0, False)])
def test_activation_needs_an_edge_of_weight_eps(gap_hours, reactivated):
    turns = [make_turn(0), make_turn(1, hours=gap_hours)]
    builder = GraphBuilder(TableEncoder(dim=8), ScriptedExtractor([]), window=1, rho=1.0,
                           dormancy_eps=0.01)
    g = builder.build(make_conversation(turns))
    # the temporal edge 0 -> 1 weighs exp(-1) (counts) or exp(-100) (below eps)
    assert g.last_active_window.tolist() == [1 if reactivated else 0, 1]


def test_node_cap_collects_dormant_nodes_and_keeps_ids():
    n = 12
    table = {f"c{k}": [1.0 if i == k else 0.0 for i in range(16)] for k in range(n)}
    enc = TableEncoder(table, dim=16)
    turns = [make_turn(k, hours=k) for k in range(n)]
    builder = GraphBuilder(enc, ScriptedExtractor([[f"c{k}"] for k in range(n)]), window=1,
                           max_nodes=10, collect_to=1.0, dormancy_windows=2)
    g = builder.build(make_conversation(turns))
    assert g.num_nodes == 2 * n  # ids are never reused
    assert int(g.active.sum()) == 10 and g.num_collected == 2 * n - 10
    gone = (~g.active).nonzero().view(-1)
    ei = g.edge_index
    assert not torch.isin(ei, gone).any()  # collected nodes keep no edges
    assert bool((g.pagerank[gone] == 0).all())
    assert g.pagerank[g.active].sum().item() == pytest.approx(1.0, abs=1e-4)
    assert g.index_of("D1:0") == 0  # keys still resolve
    # the newest nodes are never dormant
    assert all(g.active[g.index_of(k)] for k in ("D1:11", "D1:10", "S:11", "S:10"))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_in_edge_keep_mask_against_a_plain_reference(seed):
    """Per target, the cap keeps the max_in highest weights, ties to the earlier edge: checked
    against sorting each node's in-edges in plain Python (weights with many ties)."""
    from synapse_pt.graph.maintenance import in_edge_keep_mask

    g = torch.Generator().manual_seed(seed)
    n, e, cap = 30, 400, 4
    ei = torch.stack([torch.randint(0, n, (e,), generator=g),
                      torch.randint(0, n // 2, (e,), generator=g)])  # some nodes far over cap
    w = torch.randint(0, 5, (e,), generator=g).float() / 4  # ties
    keep = in_edge_keep_mask(ei, w, n, cap)
    want = [False] * e
    for node in range(n):
        into = [k for k in range(e) if int(ei[1, k]) == node]
        for k in sorted(into, key=lambda k: (-float(w[k]), k))[:cap]:
            want[k] = True
    assert keep.tolist() == want
    assert (~keep).any()


def test_collect_dormant_down_to_a_low_water_mark():
    g = MemoryGraph("s1", 2)
    g.add_nodes(torch.ones(6, 2), EPISODIC, 0.0, ["t"] * 6, [f"D1:{i}" for i in range(6)])
    g.last_active_window[:] = torch.tensor([0, 0, 0, 5, 5, 0])
    g.set_pagerank(torch.tensor([0.3, 0.1, 0.2, 0.1, 0.1, 0.2]))
    # at the cap nothing is collected, whatever the low-water mark
    assert collect_dormant(g, 5, max_nodes=6, dormancy_windows=2, collect_to=2).numel() == 0
    # over the cap: down to 3 active, lowest PageRank first (0.1; 0.2 tie to the smaller id)
    victims = collect_dormant(g, 5, max_nodes=5, dormancy_windows=2, collect_to=3)
    assert victims.tolist() == [1, 2, 5] and g.num_active == 3
    assert g.active.tolist() == [True, False, False, True, True, False]


def test_builder_low_water_mark_collects_less_often():
    n = 16
    table = {f"c{k}": [1.0 if i == k else 0.0 for i in range(16)] for k in range(n)}
    turns = [make_turn(k, hours=k) for k in range(n)]
    sizes = {}
    for collect_to in (1.0, 0.5):
        builder = GraphBuilder(TableEncoder(table, dim=16),
                               ScriptedExtractor([[f"c{k}"] for k in range(n)]), window=1,
                               max_nodes=10, collect_to=collect_to, dormancy_windows=2)
        g = builder.new_graph("s1")
        conv = make_conversation(turns)
        active = []
        for k, turn in enumerate(conv.turns()):
            emb = builder.encoder.encode([builder.renderer(turn)])
            builder.consolidate(g, [turn], emb, [f"c{k}"], builder.encoder.encode([f"c{k}"]),
                                finalize=k == n - 1)
            active.append(g.num_active)
            assert g.num_active == int(g.active.sum()) <= 10
        sizes[collect_to] = active
    # literal: every window past the cap collects back to exactly 10 (each adds 2 nodes)
    assert sizes[1.0][5:] == [10] * (n - 5)
    # low-water mark 5: a collection drops to 5; the next comes when the cap is passed again,
    # three windows later (5 -> 7 -> 9 -> 11 > 10): 4 collections instead of 11
    assert sizes[0.5][:6] == [2, 4, 6, 8, 10, 5]
    drops = [k for k in range(1, n) if sizes[0.5][k] < sizes[0.5][k - 1]]
    assert drops == [5, 8, 11, 14] and all(sizes[0.5][k] == 5 for k in drops)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mark_activity_against_a_plain_reference(seed):
    gen = torch.Generator().manual_seed(seed)
    n, eps, window = 30, 0.3, 7
    g = MemoryGraph("s1", 2)
    g.add_nodes(torch.ones(n, 2), EPISODIC, 0.0, ["t"] * n, [f"D1:{i}" for i in range(n)])
    g.deactivate(torch.tensor([3, 4]))
    touched = [(torch.randint(0, n, (9,), generator=gen), torch.randint(0, n, (9,), generator=gen),
                torch.rand(9, generator=gen)) for _ in range(2)]
    first_new = 25
    best = [-1.0] * n  # the largest weight touching each node: the docstring's definition
    for src, dst, w in touched:
        for s_, d_, w_ in zip(src.tolist(), dst.tolist(), w.tolist(), strict=True):
            best[s_], best[d_] = max(best[s_], w_), max(best[d_], w_)
    expected = [i for i in range(n) if (i >= first_new or best[i] >= eps) and i not in (3, 4)]
    got = mark_activity(g, window, first_new, touched, eps)
    assert got.tolist() == expected
    assert [i for i in range(n) if int(g.last_active_window[i]) == window] == expected
