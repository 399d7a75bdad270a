"""Fitting and calibrating rejection gates held out (issue 14).

Folds are sets of conversations (:func:`~synapse_pt.eval.tuning.heldout.make_folds`). For each fold,
every gate is prepared on the *other* conversations only: a plain signal needs only its threshold,
the ``target_fr`` quantile of the signal over the training conversations' answerable questions
(:func:`~synapse_pt.eval.tuning.heldout.calibrate_tau`); a combination is a logistic regression
(scikit-learn's ``LogisticRegression`` on standardised signals) fitted on the training questions,
then thresholded the same way. The fold's own questions are then scored and gated. Every figure of
:func:`gate_table` thus reads thresholds and weights chosen without the questions it scores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_curve

from synapse_pt.eval.qa.scorers.retrieval import rejection_auc
from synapse_pt.eval.tuning.heldout import calibrate_tau
from synapse_pt.retrieval.gate_signals import logistic_combination

ADVERSARIAL = 5


def fit_combination(signals: Mapping[str, torch.Tensor], names: Sequence[str],
                    answerable: torch.Tensor, rows: torch.Tensor, *, C: float = 1.0,
                    ) -> tuple[dict[str, float], float]:
    """``(weights, intercept)`` of :func:`~synapse_pt.retrieval.gate_signals.logistic_combination`
    predicting ``answerable`` from the ``names`` signals on ``rows`` (bool ``[Q]``).

    The regression runs on standardised signals (mean 0, variance 1 over ``rows``); the
    standardisation is folded back, so the weights apply to the raw signals.
    """
    x = torch.stack([signals[n].double() for n in names], dim=1)[rows].numpy()
    y = answerable[rows].numpy().astype(int)
    if len(set(y.tolist())) < 2:
        raise ValueError("fit_combination: the training rows hold only one class")
    mu, sd = x.mean(axis=0), x.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    model = LogisticRegression(C=C, max_iter=1000).fit((x - mu) / sd, y)
    w = model.coef_[0] / sd
    intercept = float(model.intercept_[0] - (w * mu).sum())
    return {n: float(v) for n, v in zip(names, w, strict=True)}, intercept


def heldout_gates(signals: Mapping[str, torch.Tensor], combinations: Mapping[str, Sequence[str]],
                  category: torch.Tensor, sample_ids: Sequence[str],
                  folds: Sequence[Sequence[str]], target_fr: float
                  ) -> tuple[pd.DataFrame, list[dict]]:
    """Held-out score and decision of every gate for every question, and one record per fold.

    Args:
        signals: ``{signal: [Q]}``, higher = more answerable.
        combinations: ``{gate name: signals it combines}`` (fitted per fold).
        category: ``[Q]`` LoCoMo categories (5 = adversarial); read only to fit and calibrate on
            the training conversations and to score.
        sample_ids: each question's conversation.
        folds: test folds (lists of conversations).
        target_fr: the false-rejection rate each threshold is calibrated for.

    Returns:
        ``per_q`` with ``sample_id``, ``category`` and, per gate, ``<gate>`` (held-out score) and
        ``<gate>:gated``; the fold records (test conversations, thresholds, fitted weights).
    """
    ids = np.asarray(sample_ids, dtype=object)
    answerable = category != ADVERSARIAL
    gates = [*signals, *combinations]
    per_q = pd.DataFrame({"sample_id": ids, "category": category.numpy()})
    for g in gates:
        per_q[g] = np.nan
        per_q[f"{g}:gated"] = False
    records = []
    for f, test_ids in enumerate(folds):
        test = torch.from_numpy(np.isin(ids, list(test_ids)))
        train = ~test
        record: dict = {"fold": f, "test": list(test_ids), "tau": {}, "weights": {}}
        scores = dict(signals)
        for name, used in combinations.items():
            weights, intercept = fit_combination(signals, used, answerable, train)
            scores[name] = logistic_combination(signals, weights, intercept)
            record["weights"][name] = {"weights": weights, "intercept": intercept}
        for g in gates:
            score = scores[g].double()
            tau = calibrate_tau(score[train & answerable], target_fr)
            record["tau"][g] = tau
            rows = test.numpy()
            per_q.loc[rows, g] = score[test].numpy()
            per_q.loc[rows, f"{g}:gated"] = (score[test] < tau).numpy()
        records.append(record)
    return per_q, records


def gate_table(per_q: pd.DataFrame, gates: Sequence[str], target_fr: float,
               names: Mapping[int, str], records: Sequence[Mapping] = ()) -> pd.DataFrame:
    """One row per gate: held-out ROC AUC (category 5 against 1-4), true rejection at the
    operating point of ``target_fr`` false rejection on the pooled held-out scores, the held-out
    thresholds (mean over folds), and the false and true rejection they give, per category."""
    category = torch.tensor(per_q["category"].to_numpy())
    adversarial = (category == ADVERSARIAL).numpy()
    rows = {}
    for g in gates:
        score = torch.tensor(per_q[g].to_numpy(dtype="float64"))
        gated = per_q[f"{g}:gated"].to_numpy(dtype=bool)
        operating = calibrate_tau(score[~torch.from_numpy(adversarial)], target_fr)
        row = {"AUC": rejection_auc(score, category),
               f"TR at {100 * target_fr:g}% FR": float((score[torch.from_numpy(adversarial)]
                                                         < operating).double().mean()),
               "held-out tau (mean)": (float(np.mean([r["tau"][g] for r in records]))
                                       if records else float("nan")),
               "FR at held-out tau (1-4)": float(gated[~adversarial].mean()),
               "TR at held-out tau (5)": float(gated[adversarial].mean())}
        for c in sorted(names):
            in_c = per_q["category"].to_numpy() == c
            if c != ADVERSARIAL:
                row[f"FR {names[c]}"] = float(gated[in_c].mean()) if in_c.any() else float("nan")
        rows[g] = row
    df = pd.DataFrame.from_dict(rows, orient="index")
    df.index.name = "gate"
    return df


def roc_frame(per_q: pd.DataFrame, gates: Sequence[str]) -> pd.DataFrame:
    """ROC curve points of each gate's held-out score (scikit-learn's ``roc_curve``; positive =
    category 5, a question is rejected when its score is at or below ``threshold``): long format
    ``gate, threshold, false_rejection, true_rejection``."""
    y = per_q["category"].to_numpy() == ADVERSARIAL
    parts = []
    for g in gates:
        score = per_q[g].to_numpy(dtype="float64")
        fpr, tpr, thr = roc_curve(y, -score, drop_intermediate=True)
        parts.append(pd.DataFrame({"gate": g, "threshold": -thr, "false_rejection": fpr,
                                   "true_rejection": tpr}))
    return pd.concat(parts, ignore_index=True)
