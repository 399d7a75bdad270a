"""Tables: shapes, paper rows, and the Markdown / LaTeX writers."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from synapse_pt.data.categories import OFFICIAL
from synapse_pt.eval.qa.aggregate import MACRO, MICRO, OVERALL, summarize
from synapse_pt.eval.reports import paper_numbers
from synapse_pt.eval.reports.tables import (
    PAPER_AVERAGE,
    ablation_table,
    cost_per_1k_queries,
    efficiency_table,
    main_table,
    to_latex,
    to_markdown,
)

# another project's labels for the same raw numbers (an explicit mapping)
RELABELLED = {1: "single-hop", 2: "multi-hop", 3: "temporal", 4: "open-domain", 5: "adversarial"}



def result(shift: float = 0.0) -> dict:
    df = pd.DataFrame({
        "category": [1, 2, 3, 4, 4, 5],
        "f1_official": [0.3 + shift, 0.5, 0.2, 0.4, 0.6, 1.0],
        "f1_amem": [0.3, 0.5, 0.2, 0.4, 0.6, 1.0],
    })
    return summarize(df, ["f1_official", "f1_amem"], OFFICIAL)


COLUMNS = ["multi-hop", "temporal", "open-domain", "single-hop", "adversarial", MACRO, MICRO,
           OVERALL, PAPER_AVERAGE]


def test_main_table_shape_and_values() -> None:
    table = main_table({"synapse": result(), "rag": result(0.1)}, OFFICIAL)
    assert list(table.columns) == COLUMNS
    assert list(table.index) == ["synapse", "rag"] + [f"paper: {s}" for s in paper_numbers.MAIN_F1]
    assert table.loc["synapse", "multi-hop"] == pytest.approx(30.0)  # scaled to percent
    assert table.loc["rag", "multi-hop"] == pytest.approx(40.0)
    # macro (30 + 50 + 20 + 50) / 4 = 37.5; micro (30 + 50 + 20 + 40 + 60) / 5 = 40
    assert table.loc["synapse", MACRO] == pytest.approx(37.5)
    assert table.loc["synapse", MICRO] == pytest.approx(40.0)
    assert math.isnan(table.loc["synapse", PAPER_AVERAGE])
    assert table.loc["paper: SYNAPSE", "adversarial"] == 96.6
    assert table.loc["paper: SYNAPSE", PAPER_AVERAGE] == 40.5
    assert math.isnan(table.loc["paper: SYNAPSE", MACRO])
    assert math.isnan(table.loc["paper: MemoryOS", "adversarial"])
    assert table.attrs["metric"] == "f1_official"
    assert main_table({"synapse": result()}, OFFICIAL, include_paper=False).shape == (1, 9)


def test_main_table_aligns_paper_by_name() -> None:
    # under these names raw category 1 is "single-hop": the paper's 48.9 lands in that column
    res = summarize(pd.DataFrame({"category": [1, 2, 3, 4, 5], "f1_official": [0.1] * 5}),
                    ["f1_official"], RELABELLED)
    table = main_table({"x": res}, RELABELLED)
    assert list(table.columns)[:4] == ["single-hop", "multi-hop", "temporal", "open-domain"]
    assert table.loc["paper: SYNAPSE", "single-hop"] == 48.9
    with pytest.raises(KeyError, match="bleu1"):
        main_table({"x": res}, RELABELLED, metric="bleu1")


def test_ablation_table_paper_rows() -> None:
    results = {"full": result(), "no_gate": result(), "no_decay": result(), "mine": result()}
    table = ablation_table(results, OFFICIAL)
    assert list(table.index) == ["full", "paper: SYNAPSE", "no_gate", "paper: no_gate",
                                 "no_decay", "paper: no_decay", "mine"]
    assert table.loc["paper: no_gate", "adversarial"] == 67.2
    assert table.loc["paper: no_gate", PAPER_AVERAGE] == 40.3
    assert math.isnan(table.loc["paper: no_gate", "temporal"])
    assert table.loc["paper: no_decay", "temporal"] == 14.2
    assert table.loc["paper: SYNAPSE", "temporal"] == 50.1
    # the paper's F1 is only put beside the official-protocol F1 by default
    assert list(ablation_table(results, OFFICIAL, metric="f1_amem").index) == list(results)


def test_efficiency_table() -> None:
    assert cost_per_1k_queries(800, 10, 0.15, 0.60) == pytest.approx(0.126)
    table = efficiency_table({"synapse": {"tokens_per_query": 800, "latency_s": 2.0,
                                          "cost_per_1k": 0.25, "f1": 0.40}})
    assert list(table.columns) == ["tokens/query", "latency s/query", "$ per 1,000 queries", "F1",
                                   "F1 per $"]
    assert table.loc["synapse", "F1"] == pytest.approx(40.0)
    assert table.loc["synapse", "F1 per $"] == pytest.approx(160.0)
    assert table.loc["paper: SYNAPSE", "F1 per $"] == 167.3
    assert math.isnan(table.loc["paper: LangMem", "tokens/query"])
    no_cost = efficiency_table({"x": {"f1": 0.3}}, include_paper=False)
    assert math.isnan(no_cost.loc["x", "F1 per $"])


def test_to_markdown() -> None:
    df = pd.DataFrame({"F1": [12.345, math.nan], "note": ["a|b", "c"]},
                      index=pd.Index(["ours", "paper: X"], name="system"))
    md = to_markdown(df)
    assert md.splitlines() == [
        "| system | F1 | note |",
        "| --- | ---: | --- |",
        "| ours | 12.3 | a\\|b |",
        "| paper: X | - | c |",
    ]
    table = main_table({"synapse": result()}, OFFICIAL)
    lines = to_markdown(table).splitlines()
    assert len(lines) == 2 + len(table)
    assert lines[0].count("|") == len(COLUMNS) + 2


def test_to_latex() -> None:
    table = main_table({"synapse": result()}, OFFICIAL)
    tex = to_latex(table, caption="Main results", label="tab:main")
    assert "\\toprule" in tex and "\\bottomrule" in tex
    assert "mean\\_cat\\_1\\_4" in tex  # escaped
    assert "96.6" in tex and "--" in tex
    assert "\\caption{Main results}" in tex


def test_membox_overall_f1_is_the_question_weighted_mean_of_its_categories() -> None:
    """53.95 = (282*39.88 + 321*58.03 + 96*27.96 + 841*60.09) / 1540 = 53.957, by hand: the
    README row weighted by LoCoMo-10's question counts, so an overall figure, not multi-hop."""
    from types import SimpleNamespace

    from synapse_pt.memory.gaama.published import GAAMA
    from synapse_pt.memory.membox.published import MEMBOX, MEMBOX_F1

    pn = SimpleNamespace(MEMBOX=MEMBOX, MEMBOX_F1=MEMBOX_F1, GAAMA=GAAMA)

    counts = {"multi-hop": 282, "temporal": 321, "open-domain": 96, "single-hop": 841}
    weighted = sum(pn.MEMBOX_F1[c] * n for c, n in counts.items()) / sum(counts.values())
    assert weighted == pytest.approx(pn.MEMBOX["overall_f1"]["compact"], abs=0.01)
    assert pn.MEMBOX_F1["multi-hop"] != pn.MEMBOX["overall_f1"]["compact"]
    # GAAMA's mean over 1,540 questions from its per-category rewards: 78.9
    gaama = sum(pn.GAAMA["per_category"][c] * n for c, n in counts.items()) / 1540
    assert gaama == pytest.approx(pn.GAAMA["mean_reward"]["GAAMA"], abs=0.05)
