"""Gate signals (synapse_pt/retrieval/gate_signals.py) by hand and against plain loops."""

from __future__ import annotations

import math

import pytest
import torch

from synapse_pt.retrieval.gate_signals import (
    logistic_combination,
    owned_share,
    ownership,
    ownership_contrast,
    speaker_share,
    swap_contrast,
)
from synapse_pt.retrieval.text import person_references, swap_speakers


def test_speaker_share_by_hand() -> None:
    node_speaker = torch.tensor([0, 1, 1, 0, 1])
    top = torch.tensor([[0, 1, 2], [3, 4, 0], [1, 2, 4]])
    valid = torch.tensor([[True, True, True], [True, True, False], [True, True, True]])
    share = speaker_share(top, valid, node_speaker, torch.tensor([1, 0, -1]))
    assert share[0].item() == pytest.approx(2 / 3)  # turns 1, 2 of speaker 1
    assert share[1].item() == pytest.approx(1 / 2)  # valid: turns 3 (speaker 0), 4
    assert math.isnan(share[2].item())


def test_swap_contrast_by_hand() -> None:
    asked = torch.tensor([[0.2, 0.9], [0.7, 0.1], [5.0, 5.0]])
    swapped = torch.tensor([[0.4, 0.3], [0.5, 0.2], [9.0, 9.0]])
    mask = torch.tensor([[True, True], [True, True], [False, False]])
    assert swap_contrast(asked, swapped, mask).tolist() == pytest.approx([0.7 - 0.5, 0.9 - 0.3])


def test_swap_speakers_by_hand() -> None:
    assert swap_speakers("Did caroline meet Melanie's kids?", ["Caroline", "Melanie"]) == \
        "Did Melanie meet Caroline's kids?"
    assert swap_speakers("No names.", ["Ann", "Bob"]) == "No names."


def test_swap_contrast_top_k_means_by_hand() -> None:
    asked = torch.tensor([[0.2], [0.7], [0.6], [9.0]])
    swapped = torch.tensor([[0.4], [0.5], [0.1], [9.0]])
    mask = torch.tensor([[True], [True], [True], [False]])
    got = swap_contrast(asked, swapped, mask, k=2)
    assert got.item() == pytest.approx((0.7 + 0.6) / 2 - (0.5 + 0.4) / 2)


def test_person_references_by_hand() -> None:
    # first person + the speaker's name; second person + the listener's name; "we" counts for none
    assert person_references("I think you're right, Mel. My mum says so", "Caroline", "Mel") == \
        (2, 2)
    assert person_references("We went to Caroline\u2019s place", "Caroline", "Mel") == (1, 0)
    assert person_references("It rained.", "A", "B") == (0, 0)


def test_ownership_by_hand() -> None:
    refs_a = torch.tensor([3.0, 0.0, 0.0])
    refs_b = torch.tensor([1.0, 2.0, 0.0])
    own = ownership(refs_a, refs_b, torch.tensor([0, 1, -1]), smoothing=0.5)
    # o_A = (r_A + 0.5) / (r_A + r_B + 1)
    assert own[:, 0].tolist() == pytest.approx([3.5 / 5, 0.5 / 3, 0.5])
    assert own[:, 1].tolist() == pytest.approx([1 - 3.5 / 5, 1 - 0.5 / 3, 0.5])
    assert own[:, 2].tolist() == [1.0, 1.0, 1.0]  # no one named: nothing to judge


def _plain_owned_share(scores, own, mask, k):
    out = []
    for b in range(scores.shape[1]):
        rows = [i for i in range(scores.shape[0]) if mask[i, b]]
        rows.sort(key=lambda i: (-float(scores[i, b]), i))
        top = rows[:k]
        out.append(sum(float(own[i, b]) for i in top) / max(1, len(top)))
    return out


def _plain_ownership_contrast(scores, own, mask):
    out = []
    for b in range(scores.shape[1]):
        rows = [i for i in range(scores.shape[0]) if mask[i, b]]
        mine = max(float(scores[i, b] * own[i, b]) for i in rows)
        theirs = max(float(scores[i, b] * (1 - own[i, b])) for i in rows)
        out.append(mine - theirs)
    return out


def test_ownership_signals_equal_plain_loops() -> None:
    g = torch.Generator().manual_seed(0)
    scores = torch.rand(12, 5, generator=g, dtype=torch.float64)
    scores[3, 1] = scores[4, 1]  # a tie: the lower row wins
    own = torch.rand(12, 5, generator=g, dtype=torch.float64)
    mask = torch.rand(12, 5, generator=g) > 0.3
    mask[0] = True
    for k in (1, 3, 20):
        assert owned_share(scores, own, mask, k).tolist() == pytest.approx(
            _plain_owned_share(scores, own, mask, k))
    assert ownership_contrast(scores, own, mask).tolist() == pytest.approx(
        _plain_ownership_contrast(scores, own, mask))


def test_logistic_combination_by_hand() -> None:
    signals = {"a": torch.tensor([0.0, 1.0]), "b": torch.tensor([2.0, -1.0])}
    got = logistic_combination(signals, {"a": 2.0, "b": 0.5}, -1.0)
    expected = [1 / (1 + math.exp(-(-1.0 + 0.0 + 1.0))), 1 / (1 + math.exp(-(-1 + 2 - 0.5)))]
    assert got.tolist() == pytest.approx(expected)
    with pytest.raises(KeyError, match="no signal"):
        logistic_combination(signals, {"c": 1.0}, 0.0)
