"""Fusion and priors (synapse_pt/retrieval/combine.py): hand-worked values and a plain loop."""

from __future__ import annotations

import pytest
import torch

from synapse_pt.retrieval.combine import (
    fuse,
    fuse_many,
    minmax_normalise,
    neighbour_propagation,
    session_maximum,
    speaker_prior,
)


def stack(signals: dict, names: str, mask: torch.Tensor) -> torch.Tensor:
    """``fuse_many``'s input: the named signals, each min-max normalised, stacked ``[S, N, B]``."""
    return torch.stack([minmax_normalise(signals[n].float(), mask) for n in names])


def test_minmax_normalise_by_hand_per_column_and_mask() -> None:
    scores = torch.tensor([[1.0, 5.0], [3.0, 5.0], [2.0, 9.0], [100.0, 7.0]])
    mask = torch.tensor([[True, False], [True, True], [True, False], [False, True]])
    out = minmax_normalise(scores, mask)
    # column 0 over rows 0-2: min 1, max 3; column 1 over rows 1, 3: min 5, max 7
    assert out[:, 0].tolist() == pytest.approx([0.0, 1.0, 0.5, 0.0])
    assert out[:, 1].tolist() == pytest.approx([0.0, 0.0, 0.0, 1.0])
    constant = minmax_normalise(torch.full((3, 1), 4.0), torch.ones(3, 1, dtype=torch.bool))
    assert constant[:, 0].tolist() == [0.0, 0.0, 0.0]


def test_speaker_prior_by_hand() -> None:
    prior = speaker_prior(torch.tensor([0, 1, 1, 0]), torch.tensor([1, -1, 0]))
    assert prior.T.tolist() == [[0, 1, 1, 0], [0, 0, 0, 0], [1, 0, 0, 1]]


def test_neighbour_propagation_by_hand() -> None:
    scores = torch.tensor([[0.2], [1.0], [0.4], [0.8]])
    prev = torch.tensor([-1, 0, 1, -1])  # turn 3 starts a new session
    nxt = torch.tensor([1, 2, -1, -1])
    out = neighbour_propagation(scores, prev, nxt, 0.5)
    assert out[:, 0].tolist() == pytest.approx([0.2 + 0.5 * 1.0, 1.0 + 0.5 * 0.4,
                                                0.4 + 0.5 * 1.0, 0.8])


def test_fuse_by_hand_and_validation() -> None:
    mask = torch.ones(3, 1, dtype=torch.bool)
    signals = {"a": torch.tensor([[0.0], [1.0], [2.0]]), "b": torch.tensor([[3.0], [1.0], [1.0]])}
    out = fuse(signals, {"a": 2.0, "b": 1.0}, mask)
    assert out[:, 0].tolist() == pytest.approx([0 + 1.0, 2 * 0.5 + 0.0, 2 * 1.0 + 0.0])
    with pytest.raises(KeyError, match="unknown signals"):
        fuse(signals, {"c": 1.0}, mask)
    with pytest.raises(ValueError, match=">= 0"):
        fuse(signals, {"a": -1.0}, mask)
    with pytest.raises(ValueError, match="prev/next"):
        fuse(signals, {"a": 1.0}, mask, rho=0.2)


def test_fuse_many_equals_fuse_per_weight_vector() -> None:
    g = torch.Generator().manual_seed(0)
    n, b = 9, 4
    signals = {s: torch.randn(n, b, generator=g) for s in ("x", "y", "z")}
    mask = torch.rand(n, b, generator=g) < 0.7
    prev = torch.tensor([-1, 0, 1, 2, -1, 4, 5, -1, 7])
    nxt = torch.tensor([1, 2, 3, -1, 5, 6, -1, 8, -1])
    weights = torch.rand(5, 3, generator=g)
    rho = torch.tensor([0.0, 0.3, 0.1, 0.0, 0.45])
    many = fuse_many(stack(signals, "xyz", mask), weights, mask, prev=prev,
                     nxt=nxt, rho=rho)
    for c in range(5):
        one = fuse(signals, dict(zip("xyz", weights[c].tolist(), strict=True)), mask, prev=prev,
                   nxt=nxt, rho=float(rho[c]))
        torch.testing.assert_close(many[c], one)


def test_session_maximum_and_session_propagation_by_hand() -> None:
    scores = torch.tensor([[0.2, 0.0], [1.0, 0.3], [0.4, 0.9], [0.8, 0.1]])
    session = torch.tensor([0, 0, 1, 1])
    assert torch.equal(session_maximum(scores, session),
                       torch.tensor([[1.0, 0.3], [1.0, 0.3], [0.8, 0.9], [0.8, 0.9]]))
    mask = torch.ones(4, 2, dtype=torch.bool)
    # one signal already in [0, 1] per column: fusion leaves it, then f + sigma * session max
    signals = {"a": torch.tensor([[0.0, 0.0], [1.0, 0.25], [0.5, 1.0], [0.75, 0.5]])}
    out = fuse(signals, {"a": 1.0}, mask, session=session, sigma=0.5)
    assert out[:, 0].tolist() == pytest.approx([0.5, 1.5, 0.875, 1.125])
    assert out[:, 1].tolist() == pytest.approx([0.125, 0.375, 1.5, 1.0])
    with pytest.raises(ValueError, match="session of every turn"):
        fuse(signals, {"a": 1.0}, mask, sigma=0.5)


def test_fuse_many_with_sessions_equals_a_plain_loop() -> None:
    g = torch.Generator().manual_seed(1)
    n, b = 9, 3
    signals = {s: torch.randn(n, b, generator=g) for s in ("x", "y")}
    mask = torch.ones(n, b, dtype=torch.bool)
    prev = torch.tensor([-1, 0, 1, 2, -1, 4, 5, -1, 7])
    nxt = torch.tensor([1, 2, 3, -1, 5, 6, -1, 8, -1])
    session = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2, 2])
    weights = torch.rand(4, 2, generator=g)
    rho = torch.tensor([0.0, 0.3, 0.1, 0.2])
    sigma = torch.tensor([0.4, 0.0, 0.25, 0.1])
    many = fuse_many(stack(signals, "xy", mask), weights, mask, prev=prev, nxt=nxt,
                     rho=rho, session=session, sigma=sigma)
    for c in range(4):
        base = [sum(float(weights[c, k]) * float(minmax_normalise(signals[s], mask)[i, q])
                    for k, s in enumerate("xy")) for i in range(n) for q in range(b)]
        f = torch.tensor(base).view(n, b)
        for i in range(n):
            for q in range(b):
                near = max(float(f[j, q]) if j >= 0 else 0.0 for j in (int(prev[i]),
                                                                         int(nxt[i])))
                best = max(float(f[j, q]) for j in range(n) if session[j] == session[i])
                expected = float(f[i, q]) + float(rho[c]) * near + float(sigma[c]) * best
                assert float(many[c, i, q]) == pytest.approx(expected, abs=1e-5)
