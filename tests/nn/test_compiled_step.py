"""The compiled inhibition-and-firing kernel (``compile=True``): the same result as the eager
stages, which are tested against hand-worked values and plain loops elsewhere."""

from __future__ import annotations

import pytest
import torch

from synapse_pt.nn import ActivationDynamics, fire, lateral_inhibition
from synapse_pt.nn.functional import inhibit_and_fire


def _u(seed: int, n: int, b: int, device: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, b, generator=g)
    u = (u * 10).round() / 10  # many ties, inside the top M too
    return (u * (torch.rand(n, b, generator=g) < 0.4)).to(device)  # mostly silent nodes


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("M", [5, 500])  # 500 > N: clipped, every row inhibits
def test_inhibit_and_fire_equals_the_eager_stages(device, compiled, M):
    u = _u(0, 300, 70, device)
    g = torch.Generator().manual_seed(1)
    per_column = [(torch.rand(70, generator=g) * s).to(device) for s in (0.5, 9.0, 1.0)]
    for beta, gamma, theta in (per_column, (0.15, 5.0, 0.5), (0.0, 5.0, 0.5)):
        want = fire(lateral_inhibition(u, M, beta), gamma, theta)
        got = inhibit_and_fire(u.clone(), M, beta, gamma, theta, compiled=compiled)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
        assert torch.equal(got > 0, want > 0)  # the same nodes fire


def test_inhibit_and_fire_literal_firing_and_in_place(device):
    u = _u(2, 120, 33, device)
    want = fire(lateral_inhibition(u, 7, 0.2), 5.0, 0.5, fire_zero=True)
    x = u.clone()
    got = inhibit_and_fire(x, 7, 0.2, 5.0, 0.5, fire_zero=True)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    assert got.data_ptr() == x.data_ptr()
    with pytest.raises(ValueError, match="without autograd"):
        inhibit_and_fire(u.clone().requires_grad_(), 7, 0.2)


@pytest.mark.parametrize("schedule", ["every_step", "last_step"])
def test_compiled_dynamics_equal_eager(device, schedule):
    g = torch.Generator().manual_seed(3)
    n, b = 400, 48
    ei = torch.randint(0, n, (2, 3000), generator=g).to(device)
    w = torch.rand(3000, generator=g).to(device)
    a0 = (torch.rand(n, b, generator=g) * (torch.rand(n, b, generator=g) < 0.03)).to(device)
    hyper = dict(beta=(torch.rand(b, generator=g) * 0.5).to(device),
                 theta=(torch.rand(b, generator=g) * 0.8 + 0.1).to(device))
    eager = ActivationDynamics(T=3, inhibition_schedule=schedule, frontier="dense")
    fused = ActivationDynamics(T=3, inhibition_schedule=schedule, frontier="dense", compile=True)
    a, pot = eager(a0, ei, w, return_potential=True, **hyper)
    a_c, pot_c = fused(a0, ei, w, return_potential=True, **hyper)
    torch.testing.assert_close(a_c, a, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(pot_c, pot, rtol=1e-5, atol=1e-6)
    # with a node mask the eager stages run (the kernel takes every row as a candidate)
    mask = torch.rand(n, 1, generator=g).to(device) < 0.8
    torch.testing.assert_close(fused(a0, ei, w, node_mask=mask, **hyper),
                               eager(a0, ei, w, node_mask=mask, **hyper))
    assert "compile=True" in repr(fused)
