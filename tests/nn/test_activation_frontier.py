"""The frontier path of ActivationDynamics (only the active nodes and their out-neighbours are
propagated) against the plain-Python reference of SPEC §1.2 and against the dense path."""

from __future__ import annotations

import pytest
import torch
from forms import VALUES, layer, spreading_activation

from synapse_pt.nn import Hyperparams, activation_adjacency
from tests.reference import reference_dynamics

N, B = 60, 5


def _graph(seed: int, num_nodes: int = N, degree: int = 2):
    g = torch.Generator().manual_seed(seed)
    E = degree * num_nodes
    ei = torch.randint(0, num_nodes, (2, E), generator=g)
    w = torch.rand(E, generator=g, dtype=torch.float64)
    ei = torch.cat([ei, ei[:, :5]], dim=1)  # repeated edges add up
    w = torch.cat([w, w[:5]])
    return ei, w


def _sparse_a0(seed: int, anchors: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 100)
    a0 = torch.zeros(N, B, dtype=torch.float64)
    for b in range(B):
        idx = torch.randperm(N, generator=g)[:anchors]
        a0[idx, b] = torch.rand(anchors, generator=g, dtype=torch.float64) + 0.5
    return a0


PARAMS = dict(S=torch.tensor([0.8, 1.5, 0.6, 2.0, 0.9], dtype=torch.float64),
              delta=torch.tensor([0.5, 0.2, 0.0, 0.7, 1.0], dtype=torch.float64),
              beta=torch.tensor([0.15, 0.05, 0.0, 0.3, 0.1], dtype=torch.float64),
              gamma=5.0, theta=torch.tensor([0.5, 0.1, 0.3, 0.5, 0.05], dtype=torch.float64))


def _ref_params():
    out = []
    for b in range(B):
        out.append({k: float(v[b]) if isinstance(v, torch.Tensor) else v
                    for k, v in PARAMS.items()})
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("schedule", ["every_step", "last_step"])
def test_frontier_matches_reference(seed, schedule):
    ei, w = _graph(seed)
    a0 = _sparse_a0(seed)
    g = torch.Generator().manual_seed(seed + 7)
    mask = torch.rand(N, B, generator=g) < 0.8
    mask |= a0 > 0
    inhibitors = torch.rand(N, B, generator=g) < 0.5
    run = layer(M=4, T=3, frontier="sparse", inhibition=schedule)
    adj_t = activation_adjacency(ei, w, N, dtype=torch.float64)
    out, pot = run(a0, adj_t, normalized=True, node_mask=mask, inhibitor_mask=inhibitors,
                     return_potential=True, hyper=Hyperparams(**PARAMS))
    edges = [(int(j), int(i), float(x)) for (j, i), x in zip(ei.T, w, strict=True)]
    masks = [set(torch.nonzero(mask[:, b]).flatten().tolist()) for b in range(B)]
    inh = [set(torch.nonzero(inhibitors[:, b]).flatten().tolist()) for b in range(B)]
    pots: list = []
    ref = reference_dynamics(edges, N, a0.T.tolist(), _ref_params(), M=4, T=3, fan=True,
                             fire_zero=False, masks=masks, last_step_only=schedule == "last_step",
                             inhibitors=inh, potentials=pots)
    torch.testing.assert_close(out, torch.tensor(ref, dtype=torch.float64).T)
    torch.testing.assert_close(pot, torch.tensor(pots, dtype=torch.float64).T)
    assert (out > 0).any()  # the dynamics did something


@pytest.mark.parametrize("frontier_density", [1.0, 0.3, 0.05])
def test_auto_equals_dense_whatever_the_switch_point(device, frontier_density):
    """`auto` propagates sparsely, switches to dense once the frontier passes the density, and
    gives the dense result wherever it switches (including never and at once)."""
    ei, w = _graph(3, degree=4)
    a0 = _sparse_a0(3, anchors=3).to(device)
    ei, w = ei.to(device), w.to(device)
    dense = layer(M=5, T=4, frontier="dense")
    auto = layer(M=5, T=4, frontier="auto", frontier_density=frontier_density)
    hyper = Hyperparams(**{k: v.to(device) if isinstance(v, torch.Tensor) else v
                           for k, v in PARAMS.items()})
    want = dense(a0, ei, w, hyper=hyper)
    got = auto(a0, ei, w, hyper=hyper)
    torch.testing.assert_close(got, want)
    assert (want > 0).sum() > B


@pytest.mark.parametrize("frontier_density", [1.0, 0.3, 0.05, 0.01])
@pytest.mark.parametrize("anchors", [1, 3, 20])
def test_probing_a_few_columns_changes_no_decision(monkeypatch, frontier_density, anchors):
    """`auto` first checks the frontier bound of a few columns of a(0), to skip listing every
    non-zero cell of a block that is dense from the start: it takes exactly the steps (and gives
    exactly the result) of the unprobed check."""
    from synapse_pt.nn import frontier as frontier_module

    ei, w = _graph(5, degree=4)
    a0 = _sparse_a0(5, anchors=anchors)
    a0[:, 3:] = a0[:, 3:].roll(7, dims=0)  # columns past the probe differ from those in it
    runs = {}
    monkeypatch.setattr(frontier_module, "_PROBE_MIN_COLUMNS", 0)  # probe these 5 columns
    for probe in (0, 2):
        monkeypatch.setattr(frontier_module, "_PROBE_COLUMNS", probe)
        steps = []
        real = frontier_module.frontier_messages

        def spy(*args, _real=real, _steps=steps, **kwargs):
            _steps.append(1)
            return _real(*args, **kwargs)

        monkeypatch.setattr(frontier_module, "frontier_messages", spy)
        run = layer(M=5, T=3, frontier="auto", frontier_density=frontier_density)
        runs[probe] = (run(a0, ei, w, hyper=Hyperparams(**PARAMS)), len(steps))
    assert runs[0][1] == runs[2][1]
    assert torch.equal(runs[0][0], runs[2][0])


@pytest.mark.parametrize("frontier_density", [1.0, 0.3, 0.05, 0.01])
@pytest.mark.parametrize("anchors", [1, 3, 20])
def test_the_whole_block_bound_changes_no_decision(monkeypatch, frontier_density, anchors):
    """On a sparse adjacency a narrow block checks the first step's frontier bound of every
    column as one product (without listing a(0)'s cells): it takes exactly the frontier steps,
    and gives exactly the result, of the check on the listed cells."""
    from synapse_pt.nn import frontier as frontier_module

    ei, w = _graph(5, degree=4)
    adj_t = activation_adjacency(ei, w, N, dtype=torch.float64)
    a0 = _sparse_a0(5, anchors=anchors)
    runs, checks = {}, []
    real_check = frontier_module._dense_bound_exceeds
    monkeypatch.setattr(frontier_module, "_dense_bound_exceeds",
                        lambda *a: checks.append(real_check(*a)) or checks[-1])
    for cells in (0, frontier_module._BOUND_MAX_CELLS):
        monkeypatch.setattr(frontier_module, "_BOUND_MAX_CELLS", cells)
        steps = []
        real = frontier_module.frontier_messages
        monkeypatch.setattr(frontier_module, "frontier_messages",
                            lambda *a, _real=real, _s=steps, **kw: _s.append(1) or _real(*a, **kw))
        run = layer(M=5, T=3, frontier="auto", frontier_density=frontier_density)
        runs[cells] = (run(a0, adj_t, normalized=True, hyper=Hyperparams(**PARAMS)), len(steps))
    assert len(checks) == 1  # checked once, with the default size limit
    assert runs[0][1] == runs[frontier_module._BOUND_MAX_CELLS][1]
    assert torch.equal(runs[0][0], runs[frontier_module._BOUND_MAX_CELLS][0])
    if frontier_density == 0.01 or anchors == 20:
        assert checks == [True] and runs[0][1] == 0  # dense from the start, decided at once


def test_the_whole_block_bound_by_hand():
    """sum over a column's non-zero cells of 1 + the node's out-degree; NaN counts, -0.0 does
    not (as in nonzero). Out-degrees 2, 0, 1 (node 0 -> 1, 0 -> 2, 2 -> 1)."""
    from synapse_pt.nn import frontier as frontier_module
    from synapse_pt.nn.sparse import out_edges

    adj_t = activation_adjacency(torch.tensor([[0, 0, 2], [1, 2, 1]]), None, 3)
    ptr = out_edges(adj_t).ptr
    a = torch.tensor([[1.0, -0.0, float("nan")],
                      [0.0, 2.0, 0.0],
                      [0.5, 0.0, 3.0]])
    # column bounds: (1 + 2) + (1 + 1) = 5; 1 + 0 = 1; (1 + 2) + (1 + 1) = 5; max 5, B = 3
    assert frontier_module._dense_bound_exceeds(a, ptr, limit=14.9)
    assert not frontier_module._dense_bound_exceeds(a, ptr, limit=15.0)


def test_the_probe_runs_only_on_wide_blocks(monkeypatch):
    """Narrow blocks (where reading a few strided columns is a large share of the scan) list
    their non-zero cells directly; wide ones probe first."""
    from synapse_pt.nn import frontier as frontier_module

    probed = []
    real = frontier_module._bound_exceeds
    monkeypatch.setattr(frontier_module, "_bound_exceeds",
                        lambda a, *rest: probed.append(a.shape[1]) or real(a, *rest))
    ei, w = _graph(6, degree=4)
    probe_layer = layer(M=5, T=3, frontier="auto")
    for width in (frontier_module._PROBE_MIN_COLUMNS - 1, frontier_module._PROBE_MIN_COLUMNS):
        a0 = torch.zeros(N, width, dtype=torch.float64)
        a0[torch.randint(0, N, (3, width)), torch.arange(width)] = 1.0
        probe_layer(a0, ei, w, hyper=Hyperparams(**VALUES))
    assert probed == [frontier_module._PROBE_COLUMNS]


def test_edge_list_path_equals_dense():
    """On an edge list the frontier path needs no sparse adjacency and agrees with the dense
    storage."""
    ei, w = _graph(4, num_nodes=N, degree=3)
    a0 = _sparse_a0(4).float()
    got = spreading_activation(ei, w.float(), a0)
    want = spreading_activation(ei, w.float(), a0, frontier="dense")
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("graph_form", ["edge_list", "adjacency"])
@pytest.mark.parametrize("rule", ["fire_zero", "negative_beta"])
def test_dense_run_propagates_its_first_step_on_the_frontier(monkeypatch, graph_form, rule):
    """Where only inhibition or firing needs every node (fire_zero, beta < 0), ``auto`` still
    propagates a sparse a(0) on its frontier: one sparse product fewer than the dense path, the
    same result as the plain-Python reference (with a node mask), and as ``dense``."""
    from synapse_pt.nn import frontier as frontier_module

    ei, w = _graph(6, degree=3)
    a0 = _sparse_a0(6)
    mask = (torch.rand(N, B, generator=torch.Generator().manual_seed(8)) < 0.8) | (a0 > 0)
    params = dict(PARAMS, beta=-PARAMS["beta"]) if rule == "negative_beta" else PARAMS
    fire_zero = rule == "fire_zero"
    graph = (ei, w) if graph_form == "edge_list" else (
        activation_adjacency(ei, w, N, dtype=torch.float64),)
    products = []
    real = frontier_module.spmm_sum
    monkeypatch.setattr(frontier_module, "spmm_sum",
                        lambda adj_t, x: products.append(x.size(1)) or real(adj_t, x))
    runs = {}
    for frontier in ("dense", "auto"):
        products.clear()
        run = layer(M=4, T=3, fire_zero=fire_zero, frontier=frontier, frontier_density=0.5)
        runs[frontier] = run(a0, *graph, normalized=graph_form == "adjacency",
                               node_mask=mask, hyper=Hyperparams(**params))
        assert len(products) == (3 if frontier == "dense" else 2)
    edges = [(int(j), int(i), float(x)) for (j, i), x in zip(ei.T, w, strict=True)]
    masks = [set(torch.nonzero(mask[:, b]).flatten().tolist()) for b in range(B)]
    ref_params = [dict(p, beta=-p["beta"]) if rule == "negative_beta" else p
                  for p in _ref_params()]
    ref = reference_dynamics(edges, N, a0.T.tolist(), ref_params, M=4, T=3, fan=True,
                             fire_zero=fire_zero, masks=masks)
    torch.testing.assert_close(runs["auto"], torch.tensor(ref, dtype=torch.float64).T)
    torch.testing.assert_close(runs["auto"], runs["dense"])
    # a dense a(0) (a frontier past frontier_density) runs every product densely
    products.clear()
    layer(M=4, T=3, fire_zero=fire_zero, frontier_density=0.5)(
        torch.rand(N, B, dtype=torch.float64), *graph, normalized=graph_form == "adjacency",
        hyper=Hyperparams(**params))
    assert len(products) == 3


def test_frontier_messages_by_hand():
    # 0 -> 1 (w 1), 0 -> 2 (w 1), 3 -> 0 (w 1), 2 -> 4 (w 1); fan(0) = 2
    ei = torch.tensor([[0, 0, 3, 2], [1, 2, 0, 4]])
    adj_t = activation_adjacency(ei, None, 5)
    from synapse_pt.nn.sparse import OutEdges, adjacency_edges, frontier_messages

    # column 0: node 0 active (a 1.0); column 1: nodes 2 (a 0.5) and 3 (a 2.0)
    nodes, cols, values = torch.tensor([0, 2, 3]), torch.tensor([0, 1, 1]), torch.tensor(
        [1.0, 0.5, 2.0])
    packed, spread, a = frontier_messages(OutEdges(*adjacency_edges(adj_t)), nodes, cols, values,
                                          5, 2)
    # column 0's frontier: 0 and its out-neighbours 1, 2; column 1's: 2, 3 and 4 (from 2), 0
    # (from 3); padded to L = 4 with node -1
    assert packed.T.tolist() == [[0, 1, 2, -1], [0, 2, 3, 4]]
    assert spread.T.tolist() == [[0.0, 0.5, 0.5, 0.0], [2.0, 0.0, 0.0, 0.5]]
    assert a.T.tolist() == [[1.0, 0.0, 0.0, 0.0], [0.0, 0.5, 2.0, 0.0]]


def test_sparse_refuses_where_not_exact():
    ei, w = _graph(5)
    a0 = _sparse_a0(5)
    with pytest.raises(ValueError, match="fire_zero"):
        layer(fire_zero=True, frontier="sparse")(a0, ei, w, hyper=Hyperparams(**VALUES))
    with pytest.raises(ValueError, match="beta < 0"):
        layer(frontier="sparse")(a0, ei, w, hyper=Hyperparams(**dict(VALUES, beta=-0.1)))
    # auto runs densely there and still gives the literal result: every node fires
    out = layer(fire_zero=True)(a0, ei, w, hyper=Hyperparams(**VALUES))
    assert (out > 0).all()
    with pytest.raises(ValueError, match="frontier must be one of"):
        layer(frontier="fast")


def test_out_edges_sorted_by_source_and_kept_with_the_adjacency():
    """The adjacency's entries by source with a CSR pointer, in adj_t's order within a source,
    built once per adjacency."""
    from synapse_pt.nn.sparse import adjacency_edges, out_edges

    ei, w = _graph(8, degree=3)
    adj_t = activation_adjacency(ei, w, N, dtype=torch.float64)
    graph = out_edges(adj_t)
    assert out_edges(adj_t) is graph
    src, tgt, val = adjacency_edges(adj_t)
    # independent reference: a plain Python stable grouping of the entries by source
    entries = sorted(zip(src.tolist(), range(src.numel()), strict=True), key=lambda p: p[0])
    order = [i for _, i in entries]
    assert graph.source.tolist() == [src[i].item() for i in order]
    assert graph.target.tolist() == [tgt[i].item() for i in order]
    assert torch.equal(graph.weight, val[order])
    degree = [0] * N
    for j in ei[0].tolist():
        degree[j] += 1
    assert graph.ptr.tolist() == [sum(degree[:j]) for j in range(N + 1)]


def test_frontier_edges_from_the_pointer_equal_a_scan():
    """Ranges of the CSR pointer give the same out-edges (and out-degrees) as one pass over the
    sources, without reading the sources."""
    from synapse_pt.nn.sparse import OutEdges, frontier_edges, out_edges

    ei, w = _graph(9, degree=3)
    graph = out_edges(activation_adjacency(ei, w, N))
    nodes = torch.tensor([2, 2, 5, 17, 17, 17, 40, 59])
    scan = frontier_edges(graph._replace(ptr=None), nodes, N)
    ranged = frontier_edges(OutEdges(torch.empty(0, dtype=torch.long), graph.target,
                                     graph.weight, graph.ptr), nodes, N)
    for x, y in zip(scan, ranged, strict=True):
        assert torch.equal(x, y)
    fan = torch.bincount(ei[0], minlength=N)  # the edge list's out-degrees
    assert torch.equal(scan.nodes, torch.tensor([2, 5, 17, 40, 59]))
    assert torch.equal(scan.degree, fan[scan.nodes])
    assert sorted(graph.source[scan.edges].tolist()) == graph.source[scan.edges].tolist()


@pytest.mark.parametrize("weighted", [True, False])
def test_messages_normalise_their_own_edges_like_normalized_edge_weight(weighted):
    """Raw weights divided per step by the out-degrees counted among the step's edges give
    the floats of the graph-wide normalisation, bit for bit."""
    from synapse_pt.nn.sparse import OutEdges, frontier_messages, normalized_edge_weight

    ei, w = _graph(10, degree=4)
    w = w.float() if weighted else None
    a0 = _sparse_a0(10, anchors=3).float()
    nodes, cols = a0.nonzero(as_tuple=True)
    values = a0[nodes, cols]
    raw = frontier_messages(OutEdges(ei[0], ei[1], w, fan=True), nodes, cols, values, N, B)
    normed = frontier_messages(OutEdges(ei[0], ei[1], normalized_edge_weight(ei, w, N)), nodes,
                               cols, values, N, B)
    for x, y in zip(raw, normed, strict=True):
        assert torch.equal(x, y)


@pytest.mark.parametrize("fill", [0.001, 0.3, 1.0])
def test_nonzero_cells_equal_nonzero(fill):
    """The rows-first listing of a(0)'s non-zero cells gives torch.nonzero's pairs in its
    order: negative values, NaN (non-zero), -0.0 (zero) and silent rows included."""
    from synapse_pt.nn.frontier import _nonzero_cells

    g = torch.Generator().manual_seed(11)
    a = torch.randn(2000, 37, generator=g)
    a[torch.rand(2000, 37, generator=g) >= fill] = 0.0
    a[3, 5], a[7, 0], a[9, 36] = float("nan"), -0.0, -2.5
    a[10:20] = -0.0
    want = a.nonzero(as_tuple=True)
    got = _nonzero_cells(a)
    for x, y in zip(got, want, strict=True):
        assert torch.equal(x, y)
    empty = _nonzero_cells(torch.zeros(50, 4))
    assert empty[0].numel() == 0 and empty[1].numel() == 0


def test_dense_and_frontier_storages_agree_bit_for_bit_at_every_step(monkeypatch):
    """Above the switch threshold (N = 20,000 > 10^4: ``auto`` stores the frontier), the dense
    and the frontier storage give the same floats at every step t = 1..T, and so does ``auto``
    where it turns dense mid-run. Summation order is the one thing the storages may not share
    (the sparse product fuses multiply-adds), so every node here has one in-edge (a random
    tree): each propagated value is one product, and what the test compares is everything else
    of the two storages (packing, masks, inhibition on a packed column, firing, re-packing)."""
    from synapse_pt.nn import frontier as frontier_module

    n, b, T = 20_000, 6, 5
    g = torch.Generator().manual_seed(12)
    parent = (torch.rand(n - 1, generator=g) * torch.arange(1, n)).long()  # an earlier node
    ei = torch.stack([parent, torch.arange(1, n)])
    w = torch.rand(n - 1, generator=g) + 0.5
    a0 = torch.zeros(n, b)
    for col in range(b):
        a0[torch.randperm(200, generator=g)[:3], col] = torch.rand(3, generator=g) + 0.5
    mask = (torch.rand(n, b, generator=g) < 0.9) | (a0 > 0)
    params = dict(S=torch.tensor([2.0, 3.0, 1.5, 2.5, 4.0, 2.0]), delta=0.3,
                  beta=torch.tensor([0.1, 0.05, 0.0, 0.2, 0.1, 0.15]), gamma=4.0,
                  theta=torch.tensor([0.3, 0.2, 0.4, 0.1, 0.3, 0.2]))
    adj_t = activation_adjacency(ei, w, n)
    trace: list = []  # per step: (stored on the packed frontier, a(t) as [N, B])
    for storage in (frontier_module.DenseActivations, frontier_module.FrontierActivations):
        def recording_update(self, a, _real=storage.update, _storage=storage):
            packed = getattr(self, "cells", None) is not None
            _real(self, a)
            if type(self) is _storage:  # the outermost call (FrontierActivations' super())
                trace.append((packed, self.dense().clone()))

        monkeypatch.setattr(storage, "update", recording_update)
    for kwargs in ({}, {"node_mask": mask}):
        runs = {}
        for frontier, density in (("dense", 0.05), ("sparse", 0.05), ("auto", 5e-3)):
            trace.clear()
            run = layer(M=5, T=T, frontier=frontier, frontier_density=density)
            _, potential = run(a0, adj_t, normalized=True, return_potential=True, **kwargs,
                               hyper=Hyperparams(**params))
            runs[frontier] = ([packed for packed, _ in trace], [a for _, a in trace], potential)
        assert runs["dense"][0] == [False] * T
        assert runs["sparse"][0] == [True] * T
        k = runs["auto"][0].count(True)  # auto turns dense mid-run, after k packed steps
        assert 0 < k < T and runs["auto"][0] == [True] * k + [False] * (T - k)
        for frontier in ("sparse", "auto"):
            for t in range(T):
                assert torch.equal(runs[frontier][1][t], runs["dense"][1][t]), (frontier, t)
            assert torch.equal(runs[frontier][2], runs["dense"][2])
        assert (runs["dense"][1][-1] > 0).sum() > 3 * b  # the activation spread past the anchors
