"""Fusion and priors (synapse_pt/retrieval/fusion.py): hand-worked values and a plain loop."""

from __future__ import annotations

import pytest
import torch

from synapse_pt.retrieval.fusion import (
    fuse,
    fuse_many,
    minmax_normalise,
    neighbour_propagation,
    signal_stack,
    speaker_prior,
)


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
    many = fuse_many(signal_stack(signals, ["x", "y", "z"], mask), weights, mask, prev=prev,
                     nxt=nxt, rho=rho)
    for c in range(5):
        one = fuse(signals, dict(zip("xyz", weights[c].tolist(), strict=True)), mask, prev=prev,
                   nxt=nxt, rho=float(rho[c]))
        torch.testing.assert_close(many[c], one)
