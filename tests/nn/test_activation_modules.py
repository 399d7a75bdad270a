"""Module form of the dynamics (SPEC §1.2, ablations §1.3): identical to the functional form."""

from __future__ import annotations

import itertools

import pytest
import torch

from synapse_pt.nn import (
    ActivationDynamics,
    Firing,
    LateralInhibition,
    SpreadingActivation,
    fire,
    lateral_inhibition,
    spreading_activation,
)


def random_graph(seed, num_nodes, num_edges, device, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_edges,), generator=g)
    dst = torch.randint(0, num_nodes, (num_edges,), generator=g)
    w = torch.rand(num_edges, generator=g, dtype=dtype)
    return torch.stack([src, dst]).to(device), w.to(device), g


def test_spreading_activation_layer_by_hand(device):
    # 0 -> 1 (w 1.0), 0 -> 2 (w 0.5), 1 -> 2 (w 0.4), 2 -> 3 (w 0.9); node 4 isolated
    ei = torch.tensor([[0, 0, 1, 2], [1, 2, 2, 3]], device=device)
    w = torch.tensor([1.0, 0.5, 0.4, 0.9], dtype=torch.float64, device=device)
    a = torch.tensor([[1.0], [0.5], [0.0], [0.2], [0.3]], dtype=torch.float64, device=device)
    # u = 0.5 a + 0.8 P a = [0.5, 0.25 + 0.4, 0.2 + 0.16, 0.1, 0.15] (see the functional test)
    expected = a.new_tensor([[0.5], [0.65], [0.36], [0.1], [0.15]])
    for fused in (True, False):
        layer = SpreadingActivation(S=0.8, delta=0.5, fused=fused).to(device)
        torch.testing.assert_close(layer(a, ei, w), expected)
    # per-call override: S = 0, delta = 0 -> u = a
    torch.testing.assert_close(SpreadingActivation().to(device)(a, ei, w, S=0.0, delta=0.0), a)


def test_message_path_equals_fused_and_sparse_input(device):
    ei, w, g = random_graph(1, 20, 60, device)
    # sparse input has no duplicate edges; drop them so both fans count the same edges
    key = ei[0] * 20 + ei[1]
    uniq = torch.unique(key)
    ei, w = torch.stack([uniq // 20, uniq % 20]), w[: uniq.numel()]
    a = torch.rand(20, 5, generator=g, dtype=torch.float64).to(device)
    fused = SpreadingActivation(fused=True)(a, ei, w)
    unfused = SpreadingActivation(fused=False)(a, ei, w)
    torch.testing.assert_close(fused, unfused, atol=1e-12, rtol=1e-12)
    adj_t = torch.sparse_coo_tensor(
        torch.stack([ei[1], ei[0]]), w, (20, 20), check_invariants=True
    ).to_sparse_csr()
    torch.testing.assert_close(SpreadingActivation()(a, adj_t), fused, atol=1e-12, rtol=1e-12)


def test_message_is_weight_times_source():
    layer = SpreadingActivation()
    x_j = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    w = torch.tensor([0.5, 2.0])
    assert torch.equal(layer.message(x_j, w), torch.tensor([[0.5, 1.0], [6.0, 8.0]]))


def test_cached_layer_reuses_first_graph():
    ei, w, g = random_graph(2, 8, 20, "cpu")
    a = torch.rand(8, 2, generator=g, dtype=torch.float64)
    layer = SpreadingActivation(cached=True)
    first = layer(a, ei, w)
    assert torch.equal(layer(a, ei, w * 0), first)  # cached graph is used
    layer.reset_parameters()
    assert not torch.equal(layer(a, ei, w * 0), first)


SETTINGS = [
    {},
    {"fan": False},
    {"delta": 0.0},
    {"beta": 0.0},
    {"M": 2, "beta": 0.3},
    {"fire_zero": True},
    {"T": 0},
    {"T": 1},
    {"T": 5, "S": 1.0, "gamma": 3.0, "theta": 0.2},
]


@pytest.mark.parametrize("setting", SETTINGS, ids=[str(s) for s in SETTINGS])
def test_module_equals_functional_exactly(device, setting):
    for dtype in (torch.float32, torch.float64):
        ei, w, g = random_graph(3, 30, 120, device, dtype)
        a0 = torch.rand(30, 7, generator=g, dtype=dtype).to(device)
        a0[a0 < 0.7] = 0.0
        module = ActivationDynamics(**setting).to(device)
        assert torch.equal(
            module(a0, ei, w), spreading_activation(ei, w, a0, num_nodes=30, **setting)
        )


def test_module_equals_functional_with_mask_and_per_column_overrides(device):
    ei, w, g = random_graph(4, 12, 40, device)
    a0 = torch.rand(12, 6, generator=g, dtype=torch.float64).to(device)
    mask = (torch.rand(12, 6, generator=g) < 0.7).to(device)
    cols = {
        "S": torch.linspace(0.3, 1.0, 6, dtype=torch.float64, device=device),
        "delta": torch.linspace(0.0, 0.9, 6, dtype=torch.float64, device=device),
        "beta": torch.linspace(0.0, 0.3, 6, dtype=torch.float64, device=device),
        "gamma": torch.linspace(1.0, 8.0, 6, dtype=torch.float64, device=device),
        "theta": torch.linspace(0.1, 0.7, 6, dtype=torch.float64, device=device),
    }
    module = ActivationDynamics(fire_zero=True, M=4).to(device)
    out = module(a0, ei, w, node_mask=mask, **cols)
    ref = spreading_activation(ei, w, a0, num_nodes=12, fire_zero=True, M=4, node_mask=mask, **cols)
    assert torch.equal(out, ref)
    # per-column hyperparameters at construction
    module_c = ActivationDynamics(fire_zero=True, M=4, **{k: v.cpu() for k, v in cols.items()})
    assert torch.equal(module_c.to(device)(a0, ei, w, node_mask=mask), ref)


def test_inhibition_switch_equals_beta0(device):
    ei, w, g = random_graph(5, 15, 50, device)
    a0 = torch.rand(15, 4, generator=g, dtype=torch.float64).to(device)
    off = ActivationDynamics(inhibition=False).to(device)(a0, ei, w)
    assert torch.equal(off, spreading_activation(ei, w, a0, num_nodes=15, beta=0.0))
    assert torch.equal(off, ActivationDynamics(beta=0.0).to(device)(a0, ei, w))
    assert not torch.allclose(off, ActivationDynamics().to(device)(a0, ei, w))


@pytest.mark.parametrize(
    "fan,delta,beta,inhibition",
    itertools.product([True, False], [0.5, 0.0], [0.15, 0.0], [True, False]),
)
def test_every_ablation_combination_matches_functional(fan, delta, beta, inhibition):
    ei, w, g = random_graph(6, 10, 30, "cpu")
    a0 = torch.rand(10, 3, generator=g, dtype=torch.float64)
    out = ActivationDynamics(fan=fan, delta=delta, beta=beta, inhibition=inhibition)(a0, ei, w)
    ref = spreading_activation(
        ei, w, a0, num_nodes=10, fan=fan, delta=delta, beta=beta if inhibition else 0.0
    )
    assert torch.equal(out, ref)


def test_unfused_module_close_to_functional(device):
    ei, w, g = random_graph(7, 25, 80, device)
    a0 = torch.rand(25, 3, generator=g, dtype=torch.float64).to(device)
    out = ActivationDynamics(fused=False).to(device)(a0, ei, w)
    torch.testing.assert_close(
        out, spreading_activation(ei, w, a0, num_nodes=25), atol=1e-12, rtol=1e-12
    )


def test_pointwise_modules_equal_functions(device):
    g = torch.Generator().manual_seed(8)
    u = torch.rand(9, 4, generator=g, dtype=torch.float64).to(device)
    assert torch.equal(LateralInhibition(3, 0.2).to(device)(u), lateral_inhibition(u, 3, 0.2))
    beta = torch.tensor([0.0, 0.1, 0.2, 0.3], dtype=torch.float64, device=device)
    assert torch.equal(
        LateralInhibition(3).to(device)(u, beta=beta), lateral_inhibition(u, 3, beta)
    )
    assert torch.equal(Firing(4.0, 0.3).to(device)(u), fire(u, 4.0, 0.3))
    assert torch.equal(Firing(fire_zero=True).to(device)(u * 0), fire(u * 0, fire_zero=True))


def test_hyperparameters_are_buffers():
    module = ActivationDynamics(S=0.7, delta=0.4, beta=0.1, gamma=6.0, theta=0.3)
    state = module.state_dict()
    assert state["spreading.S"].item() == 0.7
    assert state["spreading.delta"].item() == 0.4
    assert state["lateral_inhibition.beta"].item() == 0.1
    assert state["firing.gamma"].item() == 6.0 and state["firing.theta"].item() == 0.3
    assert list(module.parameters()) == []
    with pytest.raises(ValueError, match="T must be"):
        ActivationDynamics(T=-1)
