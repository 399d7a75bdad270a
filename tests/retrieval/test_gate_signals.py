"""Candidate gate signals (synapse_pt/retrieval/gate_signals.py) by hand."""

from __future__ import annotations

import math

import pytest
import torch

from synapse_pt.retrieval.gate_signals import speaker_share, swap_contrast
from synapse_pt.retrieval.text import swap_speakers


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
