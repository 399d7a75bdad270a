"""Judge sensitivity tables (issue 53): scores, orders, Kendall tau-b and swapped pairs, on
hand-built run metrics whose orders and taus are worked out by hand; tau-b checked against
scipy.stats.kendalltau."""

from __future__ import annotations

import math

import pytest
from scipy.stats import kendalltau

from synapse_pt.eval.reports.judge_sensitivity import (
    has_judges,
    kendall_tau_b,
    run_scores,
    sensitivity_markdown,
    sensitivity_tables,
)


def run(judge_protocol: str | None = None, **micro: float | None) -> dict:
    """A run's metrics.json with ``{metric: mean over categories 1-4}``."""
    return {"identity": {"answerable_categories": [1, 2, 3, 4], "judge_protocol": judge_protocol},
            "metrics": {name: {"mean_q_1_4": v, "mean_cat_1_4": 0.0, "n": {}}
                        for name, v in micro.items()}}


@pytest.mark.parametrize(("x", "y"), [
    ([1, 2, 3, 4], [1, 3, 2, 4]),
    ([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]),
    ([1, 1, 2, 3], [1, 2, 2, 3]),          # ties on both sides
    ([0.3, 0.3, 0.1], [0.8, 0.6, 0.4]),
    ([2.0, 7.5, 7.5, 1.0, 3.3, 9.0], [1.0, 1.0, 4.0, 2.0, 8.0, 0.5]),
])
def test_kendall_tau_b_is_scipys(x: list[float], y: list[float]) -> None:
    assert kendall_tau_b(x, y) == pytest.approx(kendalltau(x, y).statistic)


def test_kendall_tau_b_undefined_cases() -> None:
    assert math.isnan(kendall_tau_b([1.0], [2.0]))
    assert math.isnan(kendall_tau_b([1.0, 1.0], [1.0, 2.0]))  # one order ties every pair
    with pytest.raises(ValueError, match="3 scores against 2"):
        kendall_tau_b([1, 2, 3], [1, 2])


RUNS = {
    "A": run(judge_mem0=0.8, judge_gaama=0.5, f1_official=0.3, judge_mem0_std=0.0),
    "B": run(judge_mem0=0.6, judge_gaama=0.7, f1_official=0.3),
    "C": run(judge_mem0=0.4, judge_gaama=0.3, f1_official=0.1),
}


def test_tables_by_hand() -> None:
    tables = sensitivity_tables(RUNS)
    scores = tables["judges_scores"]
    # judges first (in JUDGE_PROTOCOLS order), then the scorers; a judge's spread is no measure
    assert list(scores.columns) == ["judge_mem0", "judge_gaama", "f1_official"]
    assert scores.loc["B", "judge_gaama"] == pytest.approx(70.0)
    orders = tables["judges_orders"]["order (best first)"]
    assert orders["judge_mem0"] == "A > B > C"
    assert orders["judge_gaama"] == "B > A > C"
    assert orders["f1_official"] == "A = B > C"
    tau = tables["judges_tau"]
    # mem0 vs gaama: A-B discordant, A-C and B-C concordant: (2 - 1) / 3
    assert tau.loc["judge_mem0", "judge_gaama"] == pytest.approx(1 / 3)
    assert tau.loc["judge_gaama", "judge_mem0"] == pytest.approx(1 / 3)
    # mem0 vs f1: A-B tied in f1 (n2 = 1), two concordant: 2 / sqrt(3 * 2)
    assert tau.loc["judge_mem0", "f1_official"] == pytest.approx(2 / math.sqrt(6))
    assert tau.loc["f1_official", "f1_official"] == 1.0
    tied = sensitivity_tables({"A": run(judge_mem0=0.2, bleu1=0.1),
                               "B": run(judge_mem0=0.3, bleu1=0.1)})
    assert math.isnan(tied["judges_tau"].loc["bleu1", "bleu1"])  # ties every pair: undefined
    assert tied["judges_orders"].loc["bleu1", "order (best first)"] == "A = B"
    swaps = tables["judges_swaps"]
    assert len(swaps) == 1  # a tie is no swap
    assert list(swaps.index) == [1]
    row = swaps.iloc[0]
    assert (row["measure A"], row["measure B"], row["swaps"]) == ("judge_mem0", "judge_gaama", 1)
    assert row["pairs (above in A / above in B)"] == "A / B"
    assert row["tau"] == pytest.approx(1 / 3)
    text = sensitivity_markdown(RUNS, "judge sensitivity: hand")
    assert text.startswith("# judge sensitivity: hand")
    assert "| judge_mem0 | judge_gaama | 0.33 | 1 | A / B |" in text


def test_a_single_judge_run_is_named_by_its_protocol_and_missing_values_are_left_out() -> None:
    assert run_scores(run("gaama", judge=0.5, judge_std=0.1, bleu1=0.2, **{"recall@10": None})) \
        == {"judge_gaama": pytest.approx(50.0), "bleu1": pytest.approx(20.0)}
    runs = {"A": run("mem0", judge=0.9), "B": run(judge_mem0=0.7, judge_realtalk=0.2),
            "C": run(judge_mem0=0.8, judge_realtalk=0.4)}
    tables = sensitivity_tables(runs)
    assert math.isnan(tables["judges_scores"].loc["A", "judge_realtalk"])
    assert tables["judges_orders"].loc["judge_mem0", "order (best first)"] == "A > C > B"
    # tau over the systems both measures score (B, C): they agree
    assert tables["judges_tau"].loc["judge_mem0", "judge_realtalk"] == pytest.approx(1.0)
    assert has_judges(runs) and not has_judges({"A": runs["A"]})
    assert not has_judges({"A": run(f1_official=0.2), "B": run(f1_official=0.3)})
