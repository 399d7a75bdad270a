"""The SYNAPSE dynamics (SPEC §1.2 steps 3-5): hand-worked values, a plain-loop reference
written straight from the spec, invariances and ablation switches."""

from __future__ import annotations

import pytest
import torch
from forms import activation_dynamics, layer, propagate, spreading_activation
from reference import reference_dynamics, sigmoid

from synapse_pt.nn import fire, lateral_inhibition
from synapse_pt.nn.sparse import (
    activation_adjacency,
    csr_by_row,
    fan_out,
    normalized_edge_weight,
    spmm_sum,
)


# --------------------------------------------------------------------------------------------
# Hand-built graph used by several tests (N = 5, node 4 isolated and trailing):
#   0 -> 1 (w 1.0), 0 -> 2 (w 0.5), 1 -> 2 (w 0.4), 2 -> 3 (w 0.9)
#   fan(0) = 2, fan(1) = 1, fan(2) = 1, fan(3) = 0, fan(4) = 0
# --------------------------------------------------------------------------------------------
def toy_graph(device, dtype=torch.float64):
    edge_index = torch.tensor([[0, 0, 1, 2], [1, 2, 2, 3]], device=device)
    edge_weight = torch.tensor([1.0, 0.5, 0.4, 0.9], dtype=dtype, device=device)
    return edge_index, edge_weight, 5


def toy_activations(device, dtype=torch.float64):
    # column 0: a = [1.0, 0.5, 0.0, 0.2, 0.3]; column 1: a = [0, 0, 1, 0, 0]
    return torch.tensor(
        [[1.0, 0.0], [0.5, 0.0], [0.0, 1.0], [0.2, 0.0], [0.3, 0.0]], dtype=dtype, device=device
    )


def test_fan_out_counts_edges_and_keeps_trailing_nodes(device):
    ei, _, n = toy_graph(device)
    assert fan_out(ei, n).tolist() == [2, 1, 1, 0, 0]
    # a repeated edge counts twice
    ei2 = torch.tensor([[0, 0, 0], [1, 1, 2]], device=device)
    assert fan_out(ei2, 4).tolist() == [3, 0, 0, 0]


def test_normalized_edge_weight(device):
    ei, w, n = toy_graph(device)
    torch.testing.assert_close(
        normalized_edge_weight(ei, w, n),
        torch.tensor([0.5, 0.25, 0.4, 0.9], dtype=torch.float64, device=device),
    )
    # fan=False divides by 1
    assert torch.equal(normalized_edge_weight(ei, w, n, fan=False), w)
    # no weights: 1 / fan(j)
    torch.testing.assert_close(
        normalized_edge_weight(ei, None, n),
        torch.tensor([0.5, 0.5, 1.0, 1.0], device=device),
    )


def test_propagation_with_fan_and_decay_by_hand(device):
    ei, w, n = toy_graph(device)
    a = toy_activations(device)
    adj = activation_adjacency(ei, w, n)
    u = propagate(adj, a, S=0.8, delta=0.5)
    # column 0, u_i = 0.5 a_i + sum_j 0.8 w_ji a_j / fan(j):
    #   u0 = 0.5*1.0                                    = 0.5
    #   u1 = 0.5*0.5 + 0.8*1.0*1.0/2                    = 0.25 + 0.4 = 0.65
    #   u2 = 0.5*0.0 + 0.8*0.5*1.0/2 + 0.8*0.4*0.5/1    = 0.2 + 0.16 = 0.36
    #   u3 = 0.5*0.2 + 0.8*0.9*0.0/1                    = 0.1
    #   u4 = 0.5*0.3 (isolated, trailing)               = 0.15
    # column 1 (a2 = 1): u2 = 0.5*1 = 0.5, u3 = 0.8*0.9*1/1 = 0.72, others 0
    expected = torch.tensor(
        [[0.5, 0.0], [0.65, 0.0], [0.36, 0.5], [0.1, 0.72], [0.15, 0.0]],
        dtype=torch.float64,
        device=device,
    )
    torch.testing.assert_close(u, expected)

    # no_fan: fan(j) = 1 -> u1 = 0.25 + 0.8*1.0 = 1.05, u2 = 0.8*0.5 + 0.16 = 0.56
    u_nofan = propagate(activation_adjacency(ei, w, n, fan=False), a, S=0.8, delta=0.5)
    torch.testing.assert_close(
        u_nofan[:, 0], expected[:, 0].new_tensor([0.5, 1.05, 0.56, 0.1, 0.15])
    )

    # no_decay: delta = 0 keeps all of a_i -> u = a + 0.8 * P a
    u_nodecay = propagate(adj, a, S=0.8, delta=0.0)
    torch.testing.assert_close(
        u_nodecay[:, 0], expected[:, 0].new_tensor([1.0, 0.9, 0.36, 0.2, 0.3])
    )
    # delta = 1 drops self-retention entirely: u = 0.8 * P a
    u_noret = propagate(adj, a, S=0.8, delta=1.0)
    torch.testing.assert_close(u_noret[:, 0], expected[:, 0].new_tensor([0.0, 0.4, 0.36, 0.0, 0.0]))


def test_duplicate_edges_add_up_and_count_in_fan(device):
    # 0 -> 1 twice (w 0.3 and 0.6), 0 -> 2 once (w 0.9): fan(0) = 3
    ei = torch.tensor([[0, 0, 0], [1, 1, 2]], device=device)
    w = torch.tensor([0.3, 0.6, 0.9], dtype=torch.float64, device=device)
    a = torch.tensor([[1.0], [0.0], [0.0]], dtype=torch.float64, device=device)
    u = propagate(activation_adjacency(ei, w, 3), a, S=1.0, delta=1.0)
    # u1 = (0.3 + 0.6) / 3 = 0.3, u2 = 0.9 / 3 = 0.3
    torch.testing.assert_close(u[:, 0], a.new_tensor([0.0, 0.3, 0.3]))


@pytest.mark.parametrize("seed", [0, 1])
def test_csr_by_row_equals_the_coalesced_matrix(seed):
    gen = torch.Generator().manual_seed(seed)
    n, e = 9, 40  # many repeated (row, col) pairs
    row, col = torch.randint(0, n, (e,), generator=gen), torch.randint(0, n, (e,), generator=gen)
    val = torch.rand(e, generator=gen, dtype=torch.float64)
    expected = torch.zeros(n, n, dtype=torch.float64)
    expected.index_put_((row, col), val, accumulate=True)
    csr = csr_by_row(row, col, val, n)
    vec = torch.rand(n, generator=gen, dtype=torch.float64)
    assert torch.allclose(torch.mv(csr, vec), expected @ vec)
    assert torch.allclose(csr.to_dense(), expected)
    # columns ascending within each row, repeats side by side in input order
    crow, cols = csr.crow_indices(), csr.col_indices()
    for r in range(n):
        seg = cols[crow[r]:crow[r + 1]]
        assert torch.equal(seg, seg.sort().values)
        assert torch.equal(csr.values()[crow[r]:crow[r + 1]],
                           val[(row == r).nonzero().squeeze(1)[col[row == r].argsort(stable=True)]])


@pytest.mark.parametrize("fan", [True, False])
def test_activation_adjacency_equals_torchs_coalesced_csr(device, fan):
    # Without repeated edges the stored matrix is exactly torch's coalesce() + to_sparse_csr() of
    # the (target, source) entries; with repeats the products agree up to rounding.
    gen = torch.Generator().manual_seed(3)
    n = 40
    pairs = torch.randperm(n * n, generator=gen)[:300]
    src, dst = (pairs // n).to(device), (pairs % n).to(device)
    ei = torch.stack([src, dst])
    w = torch.rand(300, generator=gen, dtype=torch.float64).to(device)
    wn = normalized_edge_weight(ei, w, n, fan=fan)
    ref = torch.sparse_coo_tensor(torch.stack([dst, src]), wn, (n, n),
                                  check_invariants=True).coalesce().to_sparse_csr()
    got = activation_adjacency(ei, w, n, fan=fan)
    for part in ("crow_indices", "col_indices", "values"):
        assert torch.equal(getattr(got, part)(), getattr(ref, part)())
    rep = torch.cat([ei, ei[:, :50]], dim=1)
    w_rep = torch.cat([w, w[:50] * 0.5])
    wn = normalized_edge_weight(rep, w_rep, n, fan=fan)
    ref = torch.sparse_coo_tensor(rep.flip(0), wn, (n, n), check_invariants=True).coalesce()
    got = activation_adjacency(rep, w_rep, n, fan=fan)
    assert got._nnz() == 350
    x = torch.rand(n, 7, generator=gen, dtype=torch.float64).to(device)
    torch.testing.assert_close(torch.sparse.mm(got, x), torch.sparse.mm(ref, x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_spmm_sum_writes_every_row_empty_ones_included(device, dtype):
    # rows without in-edges come out 0 whatever memory the product is written to: a NaN-filled
    # buffer of the same size is freed just before, so the new one likely reuses its memory
    ei = torch.tensor([[0, 1, 1, 5], [2, 2, 5, 5]], device=device)  # rows 0, 1, 3, 4, 6 empty
    w = torch.tensor([0.5, 1.0, 2.0, 0.25], dtype=dtype, device=device)
    adj = activation_adjacency(ei, w, 7)
    x = torch.rand(7, 33, dtype=dtype, device=device)
    expected = adj.to_dense() @ x
    for _ in range(3):
        garbage = torch.full((7, 33), float("nan"), dtype=dtype, device=device)
        del garbage
        got = spmm_sum(adj, x)
        torch.testing.assert_close(got, expected)
        assert not got.isnan().any()
        assert (got[[0, 1, 3, 4, 6]] == 0).all()
        assert torch.equal(got, torch.sparse.mm(adj, x))  # the CPU path's floats are torch's
    x.requires_grad_(True)  # autograd takes torch.sparse.mm
    spmm_sum(adj, x).sum().backward()
    torch.testing.assert_close(x.grad, adj.to_dense().sum(dim=0)[:, None].expand(7, 33))


def test_lateral_inhibition_with_ties(device):
    u = torch.tensor([[0.9], [0.9], [0.5], [0.5], [0.1], [0.0]], dtype=torch.float64, device=device)
    # M = 3: top values {0.9, 0.9, 0.5} (which 0.5 topk picks does not matter), beta = 0.15
    #   0.9: ties and smaller values inhibit nothing                    -> 0.9
    #   0.5: 0.5 - 0.15 * ((0.9-0.5) + (0.9-0.5) + 0)  = 0.5 - 0.12      -> 0.38 (both 0.5s)
    #   0.1: 0.1 - 0.15 * (0.8 + 0.8 + 0.4)            = 0.1 - 0.30      -> 0 (floored)
    #   0.0: 0.0 - 0.15 * (0.9 + 0.9 + 0.5)                              -> 0
    out = lateral_inhibition(u, M=3, beta=0.15)
    torch.testing.assert_close(out[:, 0], u.new_tensor([0.9, 0.9, 0.38, 0.38, 0.0, 0.0]))
    # M = 1: only 0.9 inhibits: 0.5 - 0.15*0.4 = 0.44, 0.1 - 0.15*0.8 = -0.02 -> 0
    out1 = lateral_inhibition(u, M=1, beta=0.15)
    torch.testing.assert_close(out1[:, 0], u.new_tensor([0.9, 0.9, 0.44, 0.44, 0.0, 0.0]))


def test_lateral_inhibition_clips_M_and_beta0(device):
    u = torch.tensor([[1.0], [0.6], [0.6], [0.2]], dtype=torch.float64, device=device)
    # M = 10 clipped to N = 4, beta = 0.1:
    #   0.6: 0.6 - 0.1*(1.0-0.6)                          = 0.56
    #   0.2: 0.2 - 0.1*((1.0-0.2) + (0.6-0.2)*2) = 0.2 - 0.16 = 0.04
    out = lateral_inhibition(u, M=10, beta=0.1)
    torch.testing.assert_close(out[:, 0], u.new_tensor([1.0, 0.56, 0.56, 0.04]))
    # M = 2: top {1.0, 0.6}: 0.2 - 0.1*(0.8 + 0.4) = 0.08
    out2 = lateral_inhibition(u, M=2, beta=0.1)
    torch.testing.assert_close(out2[:, 0], u.new_tensor([1.0, 0.56, 0.56, 0.08]))
    # beta = 0 (float or tensor) and M = 0 are no inhibition: uhat = max(0, u)
    for off in (
        lateral_inhibition(u, 7, 0.0),
        lateral_inhibition(u, 7, torch.tensor(0.0)),
        lateral_inhibition(u, 0, 0.15),
    ):
        assert torch.equal(off, u)


def test_lateral_inhibition_large_input_uses_blocks(device):
    # More rows than one CPU block: the blocked loop must equal the plain formula.
    g = torch.Generator().manual_seed(0)
    u = torch.rand(3000, 200, generator=g, dtype=torch.float64).to(device)
    top = u.topk(7, dim=0).values
    ref = (u - 0.15 * sum(torch.relu(top[k] - u) for k in range(7))).clamp(min=0)
    torch.testing.assert_close(lateral_inhibition(u, 7, 0.15), ref)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_pass_inhibition_equals_the_loop_under_masks(device, seed):
    # zero_outside: rows outside the mask hold 0, so the one-pass form applies; it must give the
    # loop's result (the plain formula over the masked top-M), per-column beta included
    g = torch.Generator().manual_seed(seed)
    n, b = 300, 40
    mask = torch.rand(n, b, generator=g) < 0.7
    mask[:, 0] = False
    mask[:3, 0] = True  # column 0: 3 candidates < M = 7 (its M-th value is -inf: the loop runs)
    u = (torch.rand(n, b, generator=g, dtype=torch.float64) * mask).to(device)
    u[:2, 5] = u[2, 5]  # ties at the top of a column
    beta = torch.rand(b, generator=g, dtype=torch.float64).to(device) * 0.3
    mask = mask.to(device)
    fast = lateral_inhibition(u, 7, beta, candidates=mask, zero_outside=True)
    loop = lateral_inhibition(u, 7, beta, candidates=mask)  # zero_outside unknown: the loop
    top = u.masked_fill(~mask, float("-inf")).topk(7, dim=0).values
    ref = (u - beta * sum(torch.relu(top[k] - u) for k in range(7))).clamp(min=0)
    torch.testing.assert_close(loop, ref)
    torch.testing.assert_close(fast, ref)
    # without a mask every row is a candidate: the one-pass form, same values
    torch.testing.assert_close(lateral_inhibition(u, 7, beta),
                               (u - beta * sum(torch.relu(u.topk(7, dim=0).values[k] - u)
                                               for k in range(7))).clamp(min=0))


def test_firing_by_hand(device):
    uhat = torch.tensor([[0.5], [0.0], [0.9], [0.1]], dtype=torch.float64, device=device)
    # a = sigmoid(5 * (uhat - 0.5)):
    #   0.5 -> sigmoid(0) = 0.5;  0.9 -> sigmoid(2); 0.1 -> sigmoid(-2)
    #   0.0 -> 0 by default; sigmoid(-2.5) with fire_zero (the literal formula)
    out = fire(uhat, gamma=5.0, theta=0.5, fire_zero=False)
    torch.testing.assert_close(out[:, 0], uhat.new_tensor([0.5, 0.0, sigmoid(2.0), sigmoid(-2.0)]))
    assert out[1, 0].item() == 0.0  # exactly 0
    out_z = fire(uhat, gamma=5.0, theta=0.5, fire_zero=True)
    torch.testing.assert_close(
        out_z[:, 0], uhat.new_tensor([0.5, sigmoid(-2.5), sigmoid(2.0), sigmoid(-2.0)])
    )


def test_one_full_step_by_hand(device):
    # 0 -> 1 (w 1), 0 -> 2 (w 1), a(0) = [1, 0, 0]
    ei = torch.tensor([[0, 0], [1, 2]], device=device)
    w = torch.ones(2, dtype=torch.float64, device=device)
    a0 = torch.tensor([[1.0], [0.0], [0.0]], dtype=torch.float64, device=device)
    # u = [0.5*1, 0.8*1/2, 0.8*1/2] = [0.5, 0.4, 0.4]
    # M = 7 -> 3; uhat1 = 0.4 - 0.15*(0.5-0.4) = 0.385 (same for node 2); uhat0 = 0.5
    # a = [sigmoid(0), sigmoid(5*(0.385-0.5)), same] = [0.5, sigmoid(-0.575), sigmoid(-0.575)]
    a1 = spreading_activation(ei, w, a0, T=1)
    torch.testing.assert_close(a1[:, 0], a0.new_tensor([0.5, sigmoid(-0.575), sigmoid(-0.575)]))
    # T = 0 returns a(0) itself
    assert spreading_activation(ei, w, a0, T=0) is a0


# --------------------------------------------------------------------------------------------
# Plain-loop reference, straight from SPEC §1.2 (loops over columns, steps, edges and nodes).
# --------------------------------------------------------------------------------------------
def random_graph(seed, num_nodes, num_edges, device):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_edges,), generator=g)
    dst = torch.randint(0, num_nodes, (num_edges,), generator=g)
    w = torch.rand(num_edges, generator=g, dtype=torch.float64)
    return torch.stack([src, dst]).to(device), w.to(device), g


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("fan", [True, False])
@pytest.mark.parametrize("fire_zero", [False, True])
def test_batched_equals_plain_loop_reference(device, seed, fan, fire_zero):
    num_nodes = 3 + seed  # 3 .. 8 nodes
    ei, w, g = random_graph(seed, num_nodes, 2 * num_nodes, device)
    B = 4
    a0 = torch.rand(num_nodes, B, generator=g, dtype=torch.float64)
    a0[torch.rand(num_nodes, B, generator=g) < 0.5] = 0.0  # energy on some anchors only
    hp = {
        "S": torch.rand(B, generator=g, dtype=torch.float64) + 0.3,
        "delta": torch.rand(B, generator=g, dtype=torch.float64),
        "beta": torch.rand(B, generator=g, dtype=torch.float64) * 0.4,
        "gamma": torch.rand(B, generator=g, dtype=torch.float64) * 8 + 1,
        "theta": torch.rand(B, generator=g, dtype=torch.float64),
    }
    M = 1 + seed % 4
    out = spreading_activation(
        ei,
        w,
        a0.to(device),
        M=M,
        T=3,
        fan=fan,
        fire_zero=fire_zero,
        **{k: v.to(device) for k, v in hp.items()},
    )
    edges = list(zip(ei[0].tolist(), ei[1].tolist(), w.tolist(), strict=True))
    params = [{k: v[b].item() for k, v in hp.items()} for b in range(B)]
    ref = reference_dynamics(
        edges, num_nodes, a0.T.tolist(), params, M=M, T=3, fan=fan, fire_zero=fire_zero
    )
    for b in range(B):
        torch.testing.assert_close(
            out[:, b].cpu(), torch.tensor(ref[b], dtype=torch.float64), atol=1e-10, rtol=1e-10
        )


def test_node_mask_matches_reference_and_separate_graphs(device):
    # Two conversations batched in one graph: nodes 0-3 and 4-8, no edges across.
    ei_a, w_a, _ = random_graph(10, 4, 8, "cpu")
    ei_b, w_b, _ = random_graph(11, 5, 10, "cpu")
    ei = torch.cat([ei_a, ei_b + 4], dim=1)
    w = torch.cat([w_a, w_b])
    batch = torch.tensor([0] * 4 + [1] * 5)
    query_graph = torch.tensor([0, 1, 1])
    g = torch.Generator().manual_seed(3)
    a0 = torch.rand(9, 3, generator=g, dtype=torch.float64)
    mask = batch.view(-1, 1) == query_graph.view(1, -1)
    a0 = a0 * mask
    out = spreading_activation(
        ei.to(device),
        w.to(device),
        a0.to(device),
        M=3,
        fire_zero=True,
        node_mask=mask.to(device),
    ).cpu()
    assert (out[~mask] == 0).all()
    # each column equals a run on its own graph alone
    for b, q in enumerate(query_graph.tolist()):
        nodes = (batch == q).nonzero().view(-1)
        ei_q, w_q = (ei_a, w_a) if q == 0 else (ei_b, w_b)
        alone = spreading_activation(
            ei_q, w_q, a0[nodes, b : b + 1], M=3, fire_zero=True
        )
        torch.testing.assert_close(out[nodes, b : b + 1], alone, atol=1e-12, rtol=1e-12)
    # and the plain-loop reference with masks
    edges = list(zip(ei[0].tolist(), ei[1].tolist(), w.tolist(), strict=True))
    p = {"S": 0.8, "delta": 0.5, "beta": 0.15, "gamma": 5.0, "theta": 0.5}
    masks = [set(mask[:, b].nonzero().view(-1).tolist()) for b in range(3)]
    ref = reference_dynamics(
        edges, 9, a0.T.tolist(), [p] * 3, M=3, T=3, fan=True, fire_zero=True, masks=masks
    )
    torch.testing.assert_close(out, torch.tensor(ref, dtype=torch.float64).T)
    # an [N, 1] mask broadcasts over the columns
    one = spreading_activation(
        ei.to(device),
        w.to(device),
        a0.to(device),
        fire_zero=True,
        node_mask=(batch == 1).view(-1, 1).to(device),
    )
    assert (one[:4] == 0).all()


def test_permutation_equivariance(device):
    ei, w, g = random_graph(5, 10, 30, device)
    a0 = torch.rand(10, 6, generator=g, dtype=torch.float64).to(device)
    out = spreading_activation(ei, w, a0)
    perm = torch.randperm(10, generator=g).to(device)  # new node k is old node perm[k]
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(10, device=device)
    out_p = spreading_activation(inv[ei], w, a0[perm])
    torch.testing.assert_close(out_p, out[perm], atol=1e-12, rtol=1e-12)


def test_trailing_isolated_nodes_keep_their_rows(device):
    ei = torch.tensor([[0], [1]], device=device)
    a0 = torch.zeros(6, 1, device=device)
    a0[5, 0] = 1.0  # energy on an isolated trailing node
    out = spreading_activation(ei, None, a0, T=1)
    assert out.shape == (6, 1)
    # u5 = 0.5 -> uhat5 = 0.5 (nobody above it) -> sigmoid(0) = 0.5
    assert out[5, 0].item() == pytest.approx(0.5)
    # and a graph without edges
    out0 = spreading_activation(
        torch.empty(2, 0, dtype=torch.long, device=device), None, a0, T=2
    )
    assert out0.shape == (6, 1) and (out0[:5] == 0).all()


# --------------------------------------------------------------------------------------------
# Ablation switches change exactly what they should.
# --------------------------------------------------------------------------------------------
def test_no_fan_equals_weights_divided_by_one(device):
    ei, w, g = random_graph(7, 8, 20, device)
    a0 = torch.rand(8, 3, generator=g, dtype=torch.float64).to(device)
    fan = fan_out(ei, 8).to(w.dtype)
    # fan=False with weights w equals fan=True with weights w * fan(j)
    off = spreading_activation(ei, w, a0, fan=False)
    on_scaled = spreading_activation(ei, w * fan[ei[0]], a0, fan=True)
    torch.testing.assert_close(off, on_scaled, atol=1e-12, rtol=1e-12)
    assert not torch.allclose(off, spreading_activation(ei, w, a0))


def manual_dynamics(
    adj, a, T, *, S=0.8, delta=0.5, M=7, beta=0.15, gamma=5.0, theta=0.5, inhibit=True
):
    for _ in range(T):
        u = propagate(adj, a, S=S, delta=delta)
        uhat = lateral_inhibition(u, M, beta) if inhibit else u.clamp(min=0)
        a = fire(uhat, gamma, theta, False)
    return a


def test_beta0_equals_skipping_inhibition(device):
    ei, w, g = random_graph(8, 9, 25, device)
    a0 = torch.rand(9, 4, generator=g, dtype=torch.float64).to(device)
    adj = activation_adjacency(ei, w, 9)
    skipped = manual_dynamics(adj, a0, 3, inhibit=False)
    assert torch.equal(spreading_activation(ei, w, a0, beta=0.0), skipped)
    assert torch.equal(
        spreading_activation(ei, w, a0, beta=torch.zeros(4, device=device)), skipped
    )
    assert torch.equal(spreading_activation(ei, w, a0, M=0), skipped)
    # inhibition on changes the result, and matches the composed building blocks
    on = spreading_activation(ei, w, a0)
    assert not torch.allclose(on, skipped)
    assert torch.equal(on, manual_dynamics(adj, a0, 3))


def test_delta_only_changes_self_retention(device):
    ei, w, g = random_graph(9, 7, 15, device)
    a = torch.rand(7, 3, generator=g, dtype=torch.float64).to(device)
    adj = activation_adjacency(ei, w, 7)
    spread = propagate(adj, a, S=0.8, delta=1.0)  # no retention: S * P a
    torch.testing.assert_close(propagate(adj, a, S=0.8, delta=0.0), a + spread)  # no_decay
    torch.testing.assert_close(propagate(adj, a, S=0.8, delta=0.5), 0.5 * a + spread)
    # S = 0: only retention
    torch.testing.assert_close(propagate(adj, a, S=0.0, delta=0.3), 0.7 * a)


def test_T_composes_steps(device):
    ei, w, g = random_graph(12, 8, 20, device)
    a0 = torch.rand(8, 2, generator=g, dtype=torch.float64).to(device)
    adj = activation_adjacency(ei, w, 8)
    a = a0
    for T in range(1, 5):
        a = manual_dynamics(adj, a, 1)
        assert torch.equal(spreading_activation(ei, w, a0, T=T), a)
        assert torch.equal(activation_dynamics(adj, a0, T=T), a)


def test_fire_zero_only_changes_silent_nodes(device):
    ei = torch.tensor([[0], [1]], device=device)
    a0 = torch.tensor([[1.0], [0.0], [0.0]], dtype=torch.float64, device=device)
    quiet = spreading_activation(ei, None, a0, T=1)
    loud = spreading_activation(ei, None, a0, T=1, fire_zero=True)
    # node 2 gets nothing: 0 by default, sigmoid(-gamma*theta) = sigmoid(-2.5) literally
    assert quiet[2, 0].item() == 0.0
    assert loud[2, 0].item() == pytest.approx(sigmoid(-2.5))
    assert torch.equal(quiet[:2], loud[:2])


# --------------------------------------------------------------------------------------------
# Per-column hyperparameters: one batched pass == separate scalar runs.
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_per_column_hyperparameters_equal_separate_runs(device, dtype):
    ei, w, g = random_graph(21, 10, 30, device)
    w = w.to(dtype)
    n_queries, n_configs = 3, 5
    a_q = torch.rand(10, n_queries, generator=g, dtype=dtype).to(device)
    configs = {
        "S": torch.tensor([0.8, 0.5, 1.0, 0.8, 0.3], dtype=dtype),
        "delta": torch.tensor([0.5, 0.0, 0.2, 0.9, 0.5], dtype=dtype),
        "beta": torch.tensor([0.15, 0.0, 0.3, 0.15, 0.05], dtype=dtype),
        "gamma": torch.tensor([5.0, 2.0, 8.0, 5.0, 1.0], dtype=dtype),
        "theta": torch.tensor([0.5, 0.2, 0.7, 0.1, 0.5], dtype=dtype),
    }
    # columns = (config, query) pairs, config-major
    a0 = a_q.repeat(1, n_configs)
    per_col = {k: v.repeat_interleave(n_queries).to(device) for k, v in configs.items()}
    out = spreading_activation(ei, w, a0, **per_col)
    for c in range(n_configs):
        scalars = {k: v[c].item() for k, v in configs.items()}
        sep = spreading_activation(ei, w, a_q, **scalars)
        tol = 1e-6 if dtype == torch.float32 else 1e-12
        torch.testing.assert_close(
            out[:, c * n_queries : (c + 1) * n_queries], sep, atol=tol, rtol=tol
        )


def test_bad_hyperparameter_shape_and_inputs_raise():
    ei = torch.tensor([[0], [1]])
    a0 = torch.rand(2, 3)
    with pytest.raises(ValueError, match="'S'"):
        spreading_activation(ei, None, a0, S=torch.ones(2))
    with pytest.raises(ValueError, match="num_nodes"):  # an edge past the activations' rows
        spreading_activation(ei, None, torch.rand(1, 3))
    with pytest.raises(ValueError, match="a0"):
        spreading_activation(ei, None, torch.rand(3))
    with pytest.raises(ValueError, match="T must be"):
        layer(T=-1)
    with pytest.raises(ValueError, match="node_mask"):
        spreading_activation(ei, None, a0, node_mask=torch.ones(2, 2, dtype=bool))


def test_gradients():
    ei, w, g = random_graph(30, 6, 12, "cpu")
    a0 = torch.rand(6, generator=g, dtype=torch.float64)
    # differentiable in a(0) and in the (per-column) hyperparameters
    gamma = torch.full((1,), 5.0, dtype=torch.float64, requires_grad=True)
    a0g = a0[:, None].clone().requires_grad_(True)
    spreading_activation(ei, w, a0g, gamma=gamma).sum().backward()
    assert a0g.grad is not None and gamma.grad is not None
    assert torch.isfinite(a0g.grad).all() and torch.isfinite(gamma.grad).all()


# --------------------------------------------------------------------------------------------
# In-place fast paths: same values as the out-of-place ones, inputs left alone unless asked.
# --------------------------------------------------------------------------------------------
def test_inputs_untouched_and_inplace_variants(device):
    ei, w, g = random_graph(40, 300, 900, device)
    a0 = torch.rand(300, 50, generator=g, dtype=torch.float64).to(device)  # several CPU blocks
    a0_copy = a0.clone()
    out = spreading_activation(ei, w, a0)
    assert torch.equal(a0, a0_copy)
    u = propagate(activation_adjacency(ei, w, 300), a0)
    u_copy = u.clone()
    uhat = lateral_inhibition(u, 7, 0.15)
    assert torch.equal(u, u_copy)
    assert torch.equal(lateral_inhibition(u_copy, 7, 0.15, inplace=True), uhat)
    assert torch.equal(u_copy, uhat)  # written in place
    a = fire(uhat, 5.0, 0.5, False)
    assert torch.equal(fire(uhat.clone(), 5.0, 0.5, False, inplace=True), a)
    # the autograd path (out-of-place formulas) gives the same values
    a0_g = a0.clone().requires_grad_(True)
    torch.testing.assert_close(
        spreading_activation(ei, w, a0_g), out, atol=1e-12, rtol=1e-12
    )


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("inhibition", ["every_step", "last_step"])
@pytest.mark.parametrize("scoped", [False, True])
def test_readings_equal_plain_loop_reference(device, seed, inhibition, scoped):
    # SPEC §1.5: inhibition once after the last step; top-M among a subset (the anchors'
    # neighbourhood); the last step's pre-sigmoid potential
    num_nodes = 5 + seed
    ei, w, g = random_graph(100 + seed, num_nodes, 3 * num_nodes, device)
    B = 3
    a0 = torch.rand(num_nodes, B, generator=g, dtype=torch.float64)
    a0[torch.rand(num_nodes, B, generator=g) < 0.4] = 0.0
    inhibitors = torch.rand(num_nodes, B, generator=g) < 0.5 if scoped else None
    hp = {"S": 0.8, "delta": 0.3, "beta": 0.3, "gamma": 5.0, "theta": 0.2}
    out, potential = activation_dynamics(
        activation_adjacency(ei, w, num_nodes), a0.to(device), M=2, T=3,
        inhibition=inhibition, return_potential=True,
        inhibitor_mask=None if inhibitors is None else inhibitors.to(device), **hp)
    edges = list(zip(ei[0].tolist(), ei[1].tolist(), w.tolist(), strict=True))
    pots: list = []
    ref = reference_dynamics(
        edges, num_nodes, a0.T.tolist(), [hp] * B, M=2, T=3, fan=True, fire_zero=False,
        last_step_only=inhibition == "last_step", potentials=pots,
        inhibitors=None if inhibitors is None else
        [set(inhibitors[:, b].nonzero().flatten().tolist()) for b in range(B)])
    for b in range(B):
        torch.testing.assert_close(out[:, b].cpu(), torch.tensor(ref[b], dtype=torch.float64))
        torch.testing.assert_close(potential[:, b].cpu(), torch.tensor(pots[b],
                                                                       dtype=torch.float64))


def test_unknown_inhibition_schedule_is_named():
    adj = activation_adjacency(torch.tensor([[0], [1]]), None, 2)
    with pytest.raises(ValueError, match="inhibition must be one of"):
        activation_dynamics(adj, torch.ones(2, 1), inhibition="sometimes")



@pytest.mark.parametrize("sorted_", [True, False])
@pytest.mark.parametrize("shape", [(20_000, 40), (12_001, 48), (2_003, 300), (1_331, 600),
                                   (300, 2_048), (500, 7), (30, 100)])
def test_column_topk_gives_topks_values_and_rows_holding_them(shape, sorted_) -> None:
    """Both CPU paths (row-group candidates for large blocks, plain topk below) give
    torch.topk(dim=0)'s values exactly, with k distinct rows per column that hold them: many
    tied zeros (silent nodes), tied non-zero values inside the top, -inf (masked) rows, leftover
    rows past the last full group holding the maximum, columns that are all -inf."""
    from synapse_pt.nn.sparse import column_topk

    g = torch.Generator().manual_seed(7)
    x = torch.rand(shape, generator=g)
    x[x < 0.6] = 0.0
    x[torch.rand(shape, generator=g) < 0.05] = 0.9  # ties inside the top
    x[torch.rand(shape, generator=g) < 0.1] = float("-inf")
    x[-1, ::3] = 2.0  # the last row (a leftover one where the groups do not divide N)
    x[:, 1] = float("-inf")
    for k in (1, 7, min(31, shape[0])):
        values, indices = column_topk(x, k, sorted=sorted_)
        ref = torch.topk(x, k, dim=0, sorted=sorted_)
        if sorted_:
            assert torch.equal(values, ref.values)
        else:
            assert torch.equal(values.sort(dim=0).values, ref.values.sort(dim=0).values)
        assert torch.equal(x.gather(0, indices), values)
        assert ((indices >= 0) & (indices < shape[0])).all()
        assert (indices.sort(dim=0).values.diff(dim=0) > 0).all()  # k distinct rows
        strided = x.T.contiguous().T  # the same matrix, column-major
        assert torch.equal(column_topk(strided, k, sorted=True)[0], torch.topk(x, k, dim=0)[0])


@pytest.mark.parametrize("shape", [(1_331, 600), (300, 2_048), (1_999, 300)])
def test_column_topk_below_2000_rows_takes_topks_rows_even_at_ties(shape) -> None:
    """On blocks of fewer than 2,000 rows (LoCoMo's) the candidate path returns torch.topk's
    set of rows in every column: where the top k is unique (distinct values) and where rows tie
    across the k-th value (values on a coarse grid: many such columns, each handed to topk),
    so lateral inhibition writes the same rows as before. Unsorted requests there are topk's own
    answer, order included."""
    from synapse_pt.nn.sparse import column_topk

    g = torch.Generator().manual_seed(3)
    for x in (torch.rand(shape, generator=g),  # distinct values: unique tops
              torch.randint(0, 40, shape, generator=g).float() / 40,  # ties everywhere
              torch.where(torch.rand(shape, generator=g) < 0.995, 0.0,  # few non-zeros per
                          torch.rand(shape, generator=g))):             # column: tied zeros
        for k in (7, 11):
            values, indices = column_topk(x, k)
            ref = torch.topk(x, k, dim=0)
            assert torch.equal(values, ref.values)
            assert torch.equal(indices.sort(dim=0).values, ref.indices.sort(dim=0).values)
            unsorted = column_topk(x, k, sorted=False)
            plain = torch.topk(x, k, dim=0, sorted=False)
            assert torch.equal(unsorted[0], plain.values)
            assert torch.equal(unsorted[1], plain.indices)


def test_column_topk_hands_nan_blocks_to_topk() -> None:
    """topk counts NaN as the largest value; a block holding NaN (in a group or in the leftover
    rows) gets topk's answer."""
    from synapse_pt.nn.sparse import column_topk

    for row in (5, 1_330):  # inside a group; a leftover row (1,331 = 95 groups of 14 + 1)
        x = torch.rand(1_331, 600, generator=torch.Generator().manual_seed(row))
        x[row, 17] = float("nan")
        values, indices = column_topk(x, 7)
        ref = torch.topk(x, 7, dim=0)
        torch.testing.assert_close(values, ref.values, rtol=0, atol=0, equal_nan=True)
        assert torch.isnan(values[0, 17]) and int(indices[0, 17]) == row
        assert torch.equal(indices.sort(dim=0).values, ref.indices.sort(dim=0).values)


def test_column_topk_takes_the_candidate_path_on_large_blocks(monkeypatch) -> None:
    """The shapes above do reach the candidate path, LoCoMo's sweep blocks included (about
    1,300 x 3,000), and small or narrow blocks do not."""
    from synapse_pt.nn import sparse as F

    calls = []
    real = F._candidate_column_topk
    monkeypatch.setattr(F, "_candidate_column_topk",
                        lambda *a: calls.append(tuple(a[0].shape)) or real(*a))
    for shape in [(20_000, 40), (12_001, 48), (2_003, 300), (1_331, 3_000), (300, 2_048),
                  (1_300, 200), (500, 7), (30, 100)]:
        F.column_topk(torch.rand(shape), 7)
    assert calls == [(20_000, 40), (12_001, 48), (2_003, 300), (1_331, 3_000), (300, 2_048)]
    calls.clear()
    F.column_topk(torch.rand(1_331, 3_000), 7, sorted=False)  # topk's own order below 2,000
    F.column_topk(torch.rand(2_003, 300), 7, sorted=False)
    F.column_topk(torch.rand(2_003, 300, dtype=torch.float64), 7)
    F.column_topk(torch.rand(2_003, 300).bfloat16(), 7)  # row numbers past 256 are not exact
    assert calls == [(2_003, 300), (2_003, 300)]


def test_a_raw_sparse_adjacency_equals_the_edge_list():
    """A sparse ``adj_t`` with raw weights (row = target) is normalised by the layer as the edge
    list is (no repeated edges here: the sparse input coalesces them)."""
    ei, w, g = random_graph(1, 20, 60, "cpu")
    uniq = torch.unique(ei[0] * 20 + ei[1])
    ei, w = torch.stack([uniq // 20, uniq % 20]), w[: uniq.numel()]
    a = torch.rand(20, 5, generator=g, dtype=torch.float64)
    adj_t = torch.sparse_coo_tensor(torch.stack([ei[1], ei[0]]), w, (20, 20),
                                    check_invariants=True).to_sparse_csr()
    for frontier in ("dense", "auto"):
        torch.testing.assert_close(spreading_activation(adj_t, None, a, frontier=frontier),
                                   spreading_activation(ei, w, a), atol=1e-12, rtol=1e-12)
