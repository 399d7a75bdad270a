"""Held-out fitting and calibration of gates (synapse_pt/eval/tuning/gate_fit.py) against
scikit-learn
and by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from synapse_pt.eval.tuning.gate_fit import fit_combination, gate_table, heldout_gates, roc_frame
from synapse_pt.retrieval.gate_signals import logistic_combination

NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


@pytest.fixture()
def toy():
    g = torch.Generator().manual_seed(1)
    n = 400
    category = torch.randint(1, 6, (n,), generator=g)
    adversarial = (category == 5).double()
    signals = {"a": torch.randn(n, generator=g, dtype=torch.float64) - adversarial,
               "b": torch.randn(n, generator=g, dtype=torch.float64) * 3 - 2 * adversarial,
               "c": torch.randn(n, generator=g, dtype=torch.float64)}
    sample_ids = [f"conv-{i % 4}" for i in range(n)]
    return signals, category, sample_ids


def test_fit_combination_equals_a_scikit_learn_pipeline(toy) -> None:
    signals, category, _ = toy
    rows = torch.arange(len(category)) % 3 != 0
    answerable = category != 5
    weights, intercept = fit_combination(signals, ["a", "b"], answerable, rows)
    ours = logistic_combination(signals, weights, intercept)
    x = torch.stack([signals["a"], signals["b"]], 1).numpy()
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    pipe.fit(x[rows.numpy()], answerable.numpy()[rows.numpy()].astype(int))
    assert ours.numpy() == pytest.approx(pipe.predict_proba(x)[:, 1], abs=1e-6)


def test_heldout_thresholds_come_from_the_training_conversations_only(toy) -> None:
    signals, category, ids = toy
    folds = [["conv-0", "conv-1"], ["conv-2", "conv-3"]]
    per_q, records = heldout_gates(signals, {"ab": ["a", "b"]}, category, ids, folds, 0.1)
    test0 = np.isin(ids, folds[0])
    train0 = torch.from_numpy(~test0) & (category != 5)
    assert records[0]["tau"]["a"] == pytest.approx(float(torch.quantile(signals["a"][train0],
                                                                        0.1)))
    # changing the test fold's signals changes neither its threshold nor its fitted weights
    moved = {k: v.clone() for k, v in signals.items()}
    moved["a"][torch.from_numpy(test0)] += 5.0
    per_q2, records2 = heldout_gates(moved, {"ab": ["a", "b"]}, category, ids, folds, 0.1)
    assert records2[0]["tau"] == records[0]["tau"]
    assert records2[0]["weights"] == records[0]["weights"]
    assert per_q2.loc[test0, "a"].to_numpy() == pytest.approx(per_q.loc[test0, "a"] + 5.0)
    assert per_q.loc[test0, "a:gated"].tolist() == (signals["a"][torch.from_numpy(test0)]
                                                    < records[0]["tau"]["a"]).tolist()


def test_gate_table_by_hand() -> None:
    import pandas as pd

    per_q = pd.DataFrame({"category": [1, 1, 2, 4, 5, 5],
                          "s": [0.9, 0.2, 0.8, 0.7, 0.1, 0.5],
                          "s:gated": [False, True, False, False, True, False]})
    row = gate_table(per_q, ["s"], 0.25, NAMES, [{"tau": {"s": 0.3}}, {"tau": {"s": 0.5}}]).loc["s"]
    y = [0, 0, 0, 0, 1, 1]
    assert row["AUC"] == pytest.approx(roc_auc_score(y, [-v for v in per_q["s"]]))
    # answerable scores 0.2, 0.7, 0.8, 0.9: their 25% quantile is 0.575; adversarial 0.1 and 0.5
    assert row["TR at 25% FR"] == 1.0
    assert row["held-out tau (mean)"] == pytest.approx(0.4)
    assert row["FR at held-out tau (1-4)"] == 0.25 and row["TR at held-out tau (5)"] == 0.5
    assert row["FR multi-hop"] == 0.5 and row["FR temporal"] == 0.0


def test_roc_frame_matches_the_auc(toy) -> None:
    import pandas as pd

    signals, category, _ = toy
    per_q = pd.DataFrame({"category": category.numpy(), "a": signals["a"].numpy()})
    roc = roc_frame(per_q, ["a"])
    auc = np.trapezoid(roc["true_rejection"], roc["false_rejection"])
    assert auc == pytest.approx(roc_auc_score(category.numpy() == 5, -signals["a"].numpy()))
