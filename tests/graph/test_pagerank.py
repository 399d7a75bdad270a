"""Weighted, batched PageRank (SPEC §1.1 maintenance) against an exact dense solve and networkx."""

from __future__ import annotations

import networkx as nx
import pytest
import torch

from synapse_pt.graph.pagerank import pagerank, rescale_unit_interval


def dense_pagerank(edge_index, edge_weight, num_nodes, damping=0.85):
    """Exact solution: pi = (1 - d)/n * (I - d P)^-1 1 with P[i, j] = w_ji / W_j and dangling
    columns (W_j = 0) replaced by the uniform 1/n."""
    P = torch.zeros(num_nodes, num_nodes, dtype=torch.float64)
    for (j, i), w in zip(edge_index.T.tolist(), edge_weight.tolist(), strict=True):
        P[i, j] += w
    out = P.sum(0)
    dangling = out == 0
    P[:, ~dangling] /= out[~dangling]
    P[:, dangling] = 1.0 / num_nodes
    eye = torch.eye(num_nodes, dtype=torch.float64)
    rhs = torch.full((num_nodes,), (1 - damping) / num_nodes, dtype=torch.float64)
    return torch.linalg.solve(eye - damping * P, rhs)


def random_graph(seed, num_nodes, num_edges, zero_weights=False):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_edges,), generator=g)
    dst = torch.randint(0, num_nodes, (num_edges,), generator=g)
    w = torch.rand(num_edges, generator=g, dtype=torch.float64)
    if zero_weights:
        w[src == 0] = 0.0  # node 0 has only zero-weight out-edges: dangling
    return torch.stack([src, dst]), w


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("damping", [0.85, 0.5])
def test_equals_dense_solve(device, seed, damping):
    num_nodes = 4 + 3 * seed  # a few nodes have no out-edge (dangling)
    ei, w = random_graph(seed, num_nodes, 2 * num_nodes, zero_weights=seed % 2 == 1)
    pr = pagerank(ei.to(device), w.to(device), num_nodes, damping=damping, tol=1e-12, max_iter=1000)
    torch.testing.assert_close(
        pr.cpu(), dense_pagerank(ei, w, num_nodes, damping), atol=1e-5, rtol=0
    )
    assert pr.sum().item() == pytest.approx(1.0, abs=1e-9)


def test_equals_networkx_weighted(device):
    g = nx.gnm_random_graph(40, 120, seed=3, directed=True)
    gen = torch.Generator().manual_seed(0)
    for u, v in g.edges:
        g[u][v]["weight"] = torch.rand(1, generator=gen).item()
    ref = nx.pagerank(g, alpha=0.85, weight="weight", tol=1e-12, max_iter=1000)
    ei = torch.tensor(list(g.edges)).T
    w = torch.tensor([g[u][v]["weight"] for u, v in g.edges], dtype=torch.float64)
    pr = pagerank(ei.to(device), w.to(device), 40, tol=1e-12, max_iter=1000).cpu()
    torch.testing.assert_close(
        pr, torch.tensor([ref[i] for i in range(40)], dtype=torch.float64), atol=1e-8, rtol=0
    )
    # the default settings stay within 1e-5 of the converged values
    pr_default = pagerank(ei.to(device), w.to(device), 40).cpu()
    torch.testing.assert_close(pr_default, pr, atol=1e-5, rtol=0)


def test_batched_equals_separate_runs(device):
    sizes = [5, 1, 9, 3]
    parts, weights, batch, offset = [], [], [], 0
    for k, n in enumerate(sizes):
        ei, w = random_graph(10 + k, n, 2 * n)
        parts.append(ei + offset)
        weights.append(w)
        batch += [k] * n
        offset += n
    ei, w = torch.cat(parts, dim=1), torch.cat(weights)
    batch = torch.tensor(batch)
    pr = pagerank(
        ei.to(device), w.to(device), offset, batch=batch.to(device), tol=1e-12, max_iter=1000
    ).cpu()
    offset = 0
    for k, n in enumerate(sizes):
        alone = pagerank(parts[k] - offset, weights[k], n, tol=1e-12, max_iter=1000)
        torch.testing.assert_close(pr[offset : offset + n], alone, atol=1e-10, rtol=0)
        assert pr[offset : offset + n].sum().item() == pytest.approx(1.0, abs=1e-9)
        offset += n


def test_edge_cases(device):
    # no edges at all: uniform; trailing isolated nodes count
    empty = torch.empty(2, 0, dtype=torch.long, device=device)
    torch.testing.assert_close(pagerank(empty, None, 4).cpu(), torch.full((4,), 0.25))
    ei = torch.tensor([[0], [1]], device=device)
    pr = pagerank(ei, None, 3)
    assert pr.shape == (3,) and pr.sum().item() == pytest.approx(1.0, abs=1e-6)
    assert pr[1] > pr[0] and pr[0].item() == pytest.approx(pr[2].item())
    assert pagerank(empty, None, 0).numel() == 0
    assert pagerank(empty, None, 1).tolist() == [1.0]
    with pytest.raises(ValueError, match="outside"):
        pagerank(ei, None, 1)


def test_rescale_unit_interval(device):
    pr = torch.tensor([0.1, 0.3, 0.6, 0.5, 0.5, 1.0, 0.2, 0.8], device=device)
    batch = torch.tensor([0, 0, 0, 1, 1, 2, 3, 3], device=device)
    out = rescale_unit_interval(pr, batch)
    # graph 0: (x - 0.1) / 0.5; graph 1 flat -> 0; graph 2 single node -> 0; graph 3 -> {0, 1}
    torch.testing.assert_close(out.cpu(), torch.tensor([0.0, 0.4, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]))
    torch.testing.assert_close(rescale_unit_interval(pr[:3]).cpu(), out[:3].cpu())
    # power-iteration noise on a symmetric graph is not stretched to [0, 1]
    noisy = torch.tensor([0.25, 0.25 + 1e-9, 0.25, 0.25 - 1e-9], dtype=torch.float64)
    assert rescale_unit_interval(noisy).abs().max().item() == 0.0
    assert rescale_unit_interval(torch.empty(0)).numel() == 0
