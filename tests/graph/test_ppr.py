"""Batched personalised PageRank on candidate subgraphs (synapse_pt/graph/ppr.py) against
networkx, and the depth-limited neighbourhood against networkx's ego graphs."""

from __future__ import annotations

import networkx as nx
import pytest
import torch

from synapse_pt.graph.ppr import neighbourhood, personalised_pagerank


def random_graph(n: int = 30, e: int = 70, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, n, (e,), generator=g), torch.randint(0, n, (e,), generator=g)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    edge_index = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)
    weight = torch.rand(edge_index.shape[1], generator=g, dtype=torch.float64) + 0.1
    return edge_index, weight


def seeds_matrix(n: int) -> torch.Tensor:
    seeds = torch.zeros(n, 4, dtype=torch.float64)
    seeds[[0, 5, 9], 0] = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    seeds[[2, 3], 1] = 1.0
    seeds[7, 2] = 2.0  # normalised to 1
    seeds[11, 3] = 1.0
    return seeds


def nx_graph(edge_index, weight, nodes):
    G = nx.DiGraph()
    G.add_nodes_from(nodes)
    for (a, b), w in zip(edge_index.T.tolist(), weight.tolist(), strict=True):
        if a in nodes and b in nodes:
            G.add_edge(a, b, weight=G[a][b]["weight"] + w if G.has_edge(a, b) else w)
    return G


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_neighbourhood_equals_networkx_ego_graphs(depth) -> None:
    n = 30
    edge_index, weight = random_graph(n)
    seeds = seeds_matrix(n) > 0
    got = neighbourhood(edge_index, n, seeds, depth)
    G = nx_graph(edge_index, weight, set(range(n)))
    for b in range(seeds.shape[1]):
        want = set()
        for s in seeds[:, b].nonzero().flatten().tolist():
            want |= set(nx.ego_graph(G, s, radius=depth).nodes)
        assert set(got[:, b].nonzero().flatten().tolist()) == want


@pytest.mark.parametrize("hub", ["code", "off"])
def test_personalised_pagerank_equals_networkx_on_each_candidate_subgraph(hub) -> None:
    n = 30
    edge_index, weight = random_graph(n, seed=3)
    seeds = seeds_matrix(n)
    cand = neighbourhood(edge_index, n, seeds > 0, 2)
    got = personalised_pagerank(edge_index, weight, n, seeds, cand, alpha=0.6, tol=1e-12,
                                max_iter=1000, hub_dampening=hub, hub_degree=3)
    for b in range(seeds.shape[1]):
        nodes = set(cand[:, b].nonzero().flatten().tolist())
        G = nx_graph(edge_index, weight, nodes)
        want = nx.pagerank(G, alpha=0.6, personalization={i: float(seeds[i, b]) for i in nodes},
                           weight="weight", tol=1e-13, max_iter=10_000)
        for i in range(n):
            assert float(got[i, b]) == pytest.approx(want.get(i, 0.0), abs=1e-9)


def test_effective_hub_dampening_cuts_what_a_hub_passes_on() -> None:
    # a star: hub 0 joined to 1..6 (degree 6), seeds on the hub
    edge_index = torch.tensor([[0] * 6 + list(range(1, 7)), list(range(1, 7)) + [0] * 6])
    weight = torch.ones(12, dtype=torch.float64)
    seeds = torch.zeros(7, 1, dtype=torch.float64)
    seeds[0] = 1.0
    cand = torch.ones(7, 1, dtype=torch.bool)
    plain = personalised_pagerank(edge_index, weight, 7, seeds, cand, hub_degree=3)
    damped = personalised_pagerank(edge_index, weight, 7, seeds, cand, hub_degree=3,
                                   hub_dampening="effective")
    # the hub hands on only 3/6 of its mass: the leaves' share of the total falls
    assert float(damped[1:].sum() / damped.sum()) < float(plain[1:].sum() / plain.sum())
    with pytest.raises(ValueError, match="hub_dampening"):
        personalised_pagerank(edge_index, weight, 7, seeds, cand, hub_dampening="maybe")
