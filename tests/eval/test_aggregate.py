"""Aggregation: per-category means, macro (over categories) vs micro (over questions)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from synapse_pt.data.categories import OFFICIAL
from synapse_pt.eval.qa.aggregate import MACRO, MICRO, OVERALL, per_category, summarize


def frame() -> pd.DataFrame:
    # category: f1 values                 mean
    # 1: 1.0, 0.0                          0.5
    # 2: 1.0                               1.0
    # 3: 0.0, 0.0, 0.0                     0.0
    # 4: 1.0, 1.0, 0.5, 0.5                0.75
    # 5: 1.0, 0.0                          0.5
    # macro 1-4 = (0.5 + 1 + 0 + 0.75) / 4 = 0.5625
    # micro 1-4 = (1 + 0 + 1 + 0 + 0 + 0 + 1 + 1 + 0.5 + 0.5) / 10 = 0.5
    # overall (all 12 questions, the official code's figure) = (5 + 1 + 0) / 12 = 0.5
    cats = [1, 1, 2, 3, 3, 3, 4, 4, 4, 4, 5, 5]
    f1 = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.5, 1.0, 0.0]
    # recall: NaN (no evidence) is left out of means and counts
    # 1: 0.5 (n 1); 2: 1.0; 3: 0.0, 1.0 -> 0.5 (n 2); 4: 1.0 x4; 5: all NaN
    recall = [0.5, None, 1.0, 0.0, 1.0, None, 1.0, 1.0, 1.0, 1.0, None, None]
    return pd.DataFrame({"category": cats, "f1_official": f1, "recall@5": recall})


def test_per_category_means_and_counts() -> None:
    table = per_category(frame(), ["f1_official", "recall@5"], OFFICIAL)
    assert list(table.index) == ["multi-hop", "temporal", "open-domain", "single-hop",
                                 "adversarial", MACRO, MICRO, OVERALL]
    f1 = table[("f1_official", "mean")]
    assert f1.tolist()[:5] == [0.5, 1.0, 0.0, 0.75, 0.5]
    assert f1[MACRO] == pytest.approx(0.5625)
    assert f1[MICRO] == pytest.approx(0.5)
    assert f1[OVERALL] == pytest.approx(6.0 / 12)
    assert table[("f1_official", "n")].tolist() == [2, 1, 3, 4, 2, 10, 10, 12]
    rec = table[("recall@5", "mean")]
    assert rec["multi-hop"] == 0.5 and rec["open-domain"] == 0.5
    assert math.isnan(rec["adversarial"])
    assert rec[MACRO] == pytest.approx((0.5 + 1.0 + 0.5 + 1.0) / 4)
    # micro over the 8 non-NaN values in 1-4: 0.5 + 1 + 0 + 1 + 4 = 6.5 / 8
    assert rec[MICRO] == pytest.approx(6.5 / 8)
    assert rec[OVERALL] == pytest.approx(6.5 / 8)  # category 5 has no evidence: left out
    assert table[("recall@5", "n")].tolist() == [1, 1, 2, 4, 0, 8, 8, 8]


def test_overall_weighs_category_5_questions() -> None:
    df = frame()
    df.loc[df["category"] == 5, "f1_official"] = 1.0  # both refusals right: (6 + 1) / 12
    table = per_category(df, ["f1_official"], OFFICIAL)
    assert table.loc[OVERALL, ("f1_official", "mean")] == pytest.approx(7.0 / 12)
    assert table.loc[MICRO, ("f1_official", "mean")] == pytest.approx(0.5)  # 1-4 unchanged


def test_names_are_config() -> None:
    names = {1: "single-hop", 2: "multi-hop", 3: "temporal", 4: "open-domain", 5: "adversarial"}
    table = per_category(frame(), ["f1_official"], names)
    assert list(table.index)[:5] == ["single-hop", "multi-hop", "temporal", "open-domain",
                                     "adversarial"]
    assert table.loc["single-hop", ("f1_official", "mean")] == 0.5  # raw category 1


def test_macro_over_present_categories() -> None:
    df = frame()
    df = df[df["category"] != 3]
    table = per_category(df, ["f1_official"], OFFICIAL)
    assert "open-domain" not in table.index
    assert table.loc[MACRO, ("f1_official", "mean")] == pytest.approx((0.5 + 1.0 + 0.75) / 3)


def test_summarize_is_json_ready() -> None:
    out = summarize(frame(), ["f1_official", "recall@5"], OFFICIAL)
    f1 = out["f1_official"]
    assert f1["multi-hop"] == 0.5 and f1[MACRO] == pytest.approx(0.5625)
    assert f1[MICRO] == pytest.approx(0.5)
    assert f1["n"] == {"multi-hop": 2, "temporal": 1, "open-domain": 3, "single-hop": 4,
                       "adversarial": 2, MICRO: 10, OVERALL: 12}
    assert f1[OVERALL] == pytest.approx(0.5)
    assert out["recall@5"]["adversarial"] is None  # NaN -> null
    json.dumps(out, allow_nan=False)


def test_errors_name_the_problem() -> None:
    with pytest.raises(KeyError, match="bleu1"):
        per_category(frame(), ["bleu1"], OFFICIAL)
    with pytest.raises(KeyError, match=r"\[5\]"):
        per_category(frame(), ["f1_official"], {1: "a", 2: "b", 3: "c", 4: "d"})
