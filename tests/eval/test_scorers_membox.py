"""Membox's F1 (synapse_pt/eval/qa/scorers/membox.py) by hand and against a plain reference."""

from __future__ import annotations

import random
import re

import pytest

from synapse_pt.memory.membox.score import f1_membox, membox_tokenize, score_membox


def test_tokenizer_by_hand() -> None:
    assert membox_tokenize("Rex's (2022) B-day!") == ["rex", "s", "2022", "b", "day"]
    assert membox_tokenize(None) == [] and membox_tokenize(7) == ["7"]


def test_f1_by_hand() -> None:
    # pred {the:2, cat}, gold {the, cat, sat}: overlap the + cat = 2; P 2/3, R 2/3
    assert f1_membox("The the cat", "the cat sat") == pytest.approx(2 / 3)
    assert f1_membox("", "x") == 0.0 and f1_membox("x", "") == 0.0
    assert f1_membox("in May 2023", ["June 2023", "may 2023"]) == pytest.approx(0.8)
    assert score_membox("anything", "gold", 5) is None
    assert score_membox("gold", "gold", 4) == 1.0


def reference_f1(pred: str, gold: str) -> float:
    """The code's loop, written out (gold counts decremented as prediction tokens match)."""
    p = re.sub(r"[^A-Za-z0-9]+", " ", pred.lower()).split()
    g = re.sub(r"[^A-Za-z0-9]+", " ", gold.lower()).split()
    counts: dict[str, int] = {}
    for t in g:
        counts[t] = counts.get(t, 0) + 1
    overlap = 0
    for t in p:
        if counts.get(t, 0) > 0:
            overlap += 1
            counts[t] -= 1
    if not overlap:
        return 0.0
    return 2 * (overlap / len(p)) * (overlap / len(g)) / (overlap / len(p) + overlap / len(g))


def test_f1_equals_the_codes_loop_on_random_strings() -> None:
    rng = random.Random(0)
    words = ["a", "b", "c", "d", "e's", "f-g", "2023"]
    for _ in range(300):
        pred = " ".join(rng.choices(words, k=rng.randint(0, 6)))
        gold = " ".join(rng.choices(words, k=rng.randint(1, 6)))
        assert f1_membox(pred, gold) == pytest.approx(reference_f1(pred, gold))
