"""Retrieval-level metrics: recall@k, rejection rates, ROC AUC (checked against scikit-learn)."""

from __future__ import annotations

import math

import pytest
import torch
from sklearn.metrics import roc_auc_score

from synapse_pt.eval.qa.scorers.retrieval import (
    evidence_recall_at_k,
    rejection_auc,
    rejection_metrics,
    roc_auc,
)


def test_recall_at_k_hand_example() -> None:
    retrieved = [
        ["D1:1", "D1:2", "S:mark", "D1:3", "D2:1"],  # evidence D1:3 at rank 4, D2:1 at rank 5
        ["D3:3", "D3:3", "D3:4"],  # duplicate retrieval counts once; shorter than k
        ["D1:1"],  # question without evidence
        [],  # nothing retrieved
    ]
    evidence = [["D1:3", "D2:1"], ["D3:3", "D3:3", "D9:9"], [], ["D1:1"]]
    out = evidence_recall_at_k(retrieved, evidence, ks=(1, 3, 4, 5, 30))
    nan = math.nan
    expected = {
        1: [0.0, 0.5, nan, 0.0],  # q2: evidence {D3:3, D9:9} (duplicate once), D3:3 at rank 1
        3: [0.0, 0.5, nan, 0.0],
        4: [0.5, 0.5, nan, 0.0],
        5: [1.0, 0.5, nan, 0.0],
        30: [1.0, 0.5, nan, 0.0],
    }
    for k, values in expected.items():
        torch.testing.assert_close(out[k], torch.tensor(values, dtype=torch.float64),
                                   equal_nan=True)


def test_recall_is_monotone_in_k_and_order_invariant() -> None:
    gen = torch.Generator().manual_seed(0)
    ids = [f"D1:{i}" for i in range(40)]
    retrieved = [[ids[j] for j in torch.randperm(40, generator=gen)[:30].tolist()]
                 for _ in range(16)]
    evidence = [[ids[j] for j in torch.randperm(40, generator=gen)[:3].tolist()]
                for _ in range(16)]
    out = evidence_recall_at_k(retrieved, evidence, ks=(5, 10, 30))
    assert torch.all(out[5] <= out[10]) and torch.all(out[10] <= out[30])
    perm = torch.randperm(16, generator=gen).tolist()
    out_p = evidence_recall_at_k([retrieved[i] for i in perm], [evidence[i] for i in perm],
                                 ks=(5, 10, 30))
    for k in (5, 10, 30):
        torch.testing.assert_close(out_p[k], out[k][perm])


def test_recall_errors() -> None:
    with pytest.raises(ValueError, match="retrieval lists"):
        evidence_recall_at_k([["a"]], [])
    with pytest.raises(ValueError, match=">= 1"):
        evidence_recall_at_k([["a"]], [["a"]], ks=(0,))


def test_rejection_metrics() -> None:
    gated = torch.tensor([True, True, False, False, True, False])
    category = torch.tensor([5, 5, 5, 1, 2, 4])
    out = rejection_metrics(gated, category)
    assert out["true_rejection_rate"] == pytest.approx(2 / 3)  # 2 of 3 adversarial gated
    assert out["false_rejection_rate"] == pytest.approx(1 / 3)  # 1 of 3 answerable gated
    assert out["gated_rate"] == pytest.approx(3 / 6)
    assert out["n_adversarial"] == 3 and out["n_answerable"] == 3
    assert out["false_rejection_rate_cat1"] == 0.0
    assert out["false_rejection_rate_cat2"] == 1.0
    assert math.isnan(out["false_rejection_rate_cat3"])  # no category-3 question
    empty = rejection_metrics(torch.tensor([False]), torch.tensor([1]))
    assert math.isnan(empty["true_rejection_rate"])


@pytest.mark.parametrize("seed", range(5))
def test_roc_auc_matches_sklearn_with_ties(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    labels = torch.rand(200, generator=gen) < 0.3
    # few distinct values -> many ties; shifted so the classes overlap but differ
    scores = torch.randint(0, 6, (200,), generator=gen).to(torch.float64) + labels.double()
    assert roc_auc(scores, labels) == pytest.approx(roc_auc_score(labels.numpy(), scores.numpy()))


def test_roc_auc_edge_cases() -> None:
    labels = torch.tensor([0, 0, 1, 1])
    assert roc_auc(torch.tensor([0.1, 0.2, 0.8, 0.9]), labels) == 1.0
    assert roc_auc(torch.tensor([0.9, 0.8, 0.2, 0.1]), labels) == 0.0
    assert roc_auc(torch.tensor([0.5, 0.5, 0.5, 0.5]), labels) == 0.5
    assert math.isnan(roc_auc(torch.tensor([0.1, 0.2]), torch.tensor([1, 1])))
    with pytest.raises(ValueError, match="NaN"):
        roc_auc(torch.tensor([0.1, math.nan]), torch.tensor([0, 1]))


def test_rejection_auc_orientation() -> None:
    # adversarial questions have the LOW confidences -> perfect separation = 1.0
    c_ret = torch.tensor([0.05, 0.10, 0.60, 0.90, 0.40])
    category = torch.tensor([5, 5, 1, 4, 2])
    assert rejection_auc(c_ret, category) == 1.0
    assert rejection_auc(-c_ret, category) == 0.0
    # one adversarial item (0.5) above one answerable (0.4): 5 of 6 pairs ordered -> 5/6
    c_ret = torch.tensor([0.1, 0.5, 0.4, 0.9, 0.8])
    category = torch.tensor([5, 5, 2, 1, 3])
    assert rejection_auc(c_ret, category) == pytest.approx(5 / 6)
    is_adv = (category == 5).numpy()
    assert rejection_auc(c_ret, category) == pytest.approx(roc_auc_score(is_adv, -c_ret.numpy()))


def test_survivor_cases_single_evidence_single_positive_and_padding() -> None:
    """Survivors of the mutation run (experiments/hardening.md): a question with one evidence
    turn, an AUC with exactly one positive, and padding slots next to evidence node ids 2."""
    from synapse_pt.eval.qa.scorers.retrieval import evidence_recall_from_index

    rec = evidence_recall_at_k([["D1:1", "D1:2"], ["D1:3"]], [["D1:2"], ["D1:9"]], ks=(1, 2))
    assert rec[1].tolist() == [0.0, 0.0] and rec[2].tolist() == [1.0, 0.0]
    scores = torch.tensor([0.9, 0.1, 0.4, 0.3])
    labels = torch.tensor([False, True, False, False])
    assert roc_auc(scores, labels) == pytest.approx(roc_auc_score(labels.numpy(),
                                                                  scores.numpy()))
    assert roc_auc(scores, labels) == pytest.approx(0.0)
    assert math.isnan(roc_auc(scores, torch.zeros(4, dtype=torch.bool)))
    # padding slots (valid False) must never count as a hit, whatever id they hold
    top = torch.tensor([[5, 2, 2]])
    valid = torch.tensor([[True, False, False]])
    out = evidence_recall_from_index(top, valid, torch.tensor([[2, -1]]), ks=(1, 3))
    assert out[1].tolist() == [0.0] and out[3].tolist() == [0.0]
    out = evidence_recall_from_index(torch.tensor([[7, 0]]), torch.tensor([[True, False]]),
                                     torch.tensor([[-2, 7]]), ks=(2,))
    assert out[2].tolist() == [1.0]


def test_unit_recall_by_hand() -> None:
    from synapse_pt.eval.qa.scorers.retrieval import unit_recall

    units = [[("D1:1", "D1:2"), (), ("D2:5",)],  # a box of two turns, a concept, a turn
             [("D3:1",)]]
    evidence = [["D1:2", "D2:5", "D9:9"], []]
    by_rank = unit_recall(units, evidence, [1, 2, 3])
    assert by_rank[1].tolist()[0] == pytest.approx(1 / 3)
    assert by_rank[2].tolist()[0] == pytest.approx(1 / 3)  # the concept covers nothing
    assert by_rank[3].tolist()[0] == pytest.approx(2 / 3)
    assert math.isnan(by_rank[3][1].item())
    tokens = [[40, 5, 10], [3]]
    by_budget = unit_recall(units, evidence, [39, 40, 54, 55], unit_tokens=tokens)
    # the box ends at 40 tokens, the concept at 45, the turn at 55 (a unit counts only whole)
    assert [by_budget[t][0].item() for t in (39, 40, 54, 55)] == pytest.approx(
        [0, 1 / 3, 1 / 3, 2 / 3])


def test_unit_recall_of_single_turns_is_recall_at_k() -> None:
    from synapse_pt.eval.qa.scorers.retrieval import unit_recall

    retrieved = [["D1:1", "S:3", "D1:2", "D1:1"], ["D2:2"], []]
    evidence = [["D1:2", "D1:1"], ["D2:1", "D2:2"], ["D3:3"]]
    units = [[(r,) if r.startswith("D") else () for r in row] for row in retrieved]
    want = evidence_recall_at_k(retrieved, evidence, ks=(1, 2, 3, 4))
    got = unit_recall(units, evidence, (1, 2, 3, 4))
    for k in (1, 2, 3, 4):
        assert torch.equal(want[k], got[float(k)])
    with pytest.raises(ValueError, match="token counts"):
        unit_recall(units, evidence, [10], unit_tokens=[[1], [1], []])
