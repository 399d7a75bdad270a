"""Recall beside the context it was measured at, and summaries named by what they cover (issue
42, items 6 and 7).

Item 6: every end-of-run table (the console summary, a run's ``tables/``) shows the mean context
tokens a question beside recall, and a study names its best system at an equal context budget
(recall within the first 1,000 context tokens), never by recall@10 at whatever context a system
shows: Membox-Trace's recall@10 0.92 at ~14,900 tokens a question is not best over the fused
retriever's 0.855 at ~700.

Item 7: the means over the answerable categories are named by them: LoCoMo's ``mean_q_1_4``,
REALTALK's ``mean_q_1_3`` (its categories 1-3), BEAM's ``mean_q_2_10`` (abilities 2-10).
"""

from __future__ import annotations

import pandas as pd
import pytest

from synapse_pt.commands.build import composed_config
from synapse_pt.data.categories import BEAM, OFFICIAL, REALTALK
from synapse_pt.eval.qa import aggregate
from synapse_pt.eval.qa.aggregate import summarize
from synapse_pt.eval.records.record import build_tables
from synapse_pt.eval.reports.console import render_summary
from synapse_pt.eval.tuning import variants
from synapse_pt.eval.tuning.variants import study_table


def _run(label: str, r10: float, r1000: float, tokens: float) -> dict:
    """A LoCoMo retrieval run: recall@10 and recall@1000tok over categories 1-4 (every category
    the same), ``tokens`` context tokens a question."""
    def entry(v: float) -> dict:
        return {**{n: v for n in OFFICIAL.values()}, "mean_cat_1_4": v, "mean_q_1_4": v,
                "overall": v, "n": {"mean_q_1_4": 4, "overall": 5}}

    return {"identity": {"experiment": label, "eval_mode": "retrieval",
                         "category_names": {str(k): v for k, v in OFFICIAL.items()},
                         "answerable_categories": [1, 2, 3, 4], "unanswerable_category": 5,
                         "dataset": {"name": "locomo10", "conversations": 10, "questions": 1986},
                         "memory": {"memory": label}, "context_tokenizer": "minilm"},
            "metrics": {"recall@10": entry(r10), "recall@1000tok": entry(r1000)},
            "retrieval": {"context_tokens_mean": tokens}}


# the two systems of the issue (figures of its probe, rounded)
MEMBOX = _run("membox_trace", 0.92, 0.60, 14_900.0)
FUSED = _run("fused", 0.855, 0.80, 700.0)


def test_a_study_names_its_best_at_an_equal_context_budget():
    table = study_table({"membox_trace": MEMBOX, "fused": FUSED})
    assert list(table.columns[:1]) == ["context tokens"]  # first: what recall was measured at
    assert table.loc["membox_trace", "context tokens"] == 14_900.0
    lines = variants.best_lines(table)
    assert lines[0].startswith("study_best_at_1000_tokens: 0.8000 (fused;")
    assert "700 context tokens a question" in lines[0]
    assert lines[1] == ("highest R@10 (1-4), at any context size: 0.9200 (membox_trace, 14,900 "
                        "context tokens a question)")
    assert not any(line.startswith("study_best") and "membox_trace" in line for line in lines)


def test_a_study_without_a_budget_names_no_best():
    run = _run("x", 0.5, 0.4, 100.0)
    del run["metrics"]["recall@1000tok"]
    lines = variants.best_lines(study_table({"x": run}))
    assert lines[0].startswith("study_best_at_1000_tokens: none named")


def test_end_of_run_tables_show_context_tokens_beside_recall():
    table = build_tables(MEMBOX, OFFICIAL, "membox_trace")["main_recall@10"]
    assert table.loc["membox_trace", "context tokens/question"] == 14_900.0
    assert table.loc["membox_trace", "mean_q_1_4"] == pytest.approx(92.0)
    text = render_summary(MEMBOX, OFFICIAL, "membox_trace", "/runs/x", width=200)
    assert "context: 14,900 tokens a question (mean, minilm tokens)" in text


@pytest.mark.parametrize(("names", "answerable", "macro", "micro"), [
    (OFFICIAL, (1, 2, 3, 4), "mean_cat_1_4", "mean_q_1_4"),
    (REALTALK, (1, 2, 3), "mean_cat_1_3", "mean_q_1_3"),
    (BEAM, tuple(range(2, 11)), "mean_cat_2_10", "mean_q_2_10"),
])
def test_summaries_are_named_by_the_categories_they_cover(names, answerable, macro, micro):
    assert aggregate.summary_names(answerable) == (macro, micro)
    cats = sorted(names)
    df = pd.DataFrame({"category": cats, "recall@10": [1.0] + [0.5] * (len(cats) - 1)})
    summary = summarize(df, ["recall@10"], names, answerable=answerable)["recall@10"]
    # the mean over the answerable questions, worked by hand from the frame above
    expected = sum(1.0 if c == cats[0] else 0.5 for c in answerable) / len(answerable)
    assert summary[micro] == pytest.approx(expected) and summary[macro] == pytest.approx(expected)
    if answerable != (1, 2, 3, 4):
        assert "mean_cat_1_4" not in summary and "mean_q_1_4" not in summary


def test_a_beam_run_table_and_summary_name_abilities_2_10():
    df = pd.DataFrame({"category": sorted(BEAM), "recall@10": [float("nan")] + [0.5] * 9})
    answerable = tuple(range(2, 11))
    metrics = {"identity": {"eval_mode": "retrieval", "answerable_categories": list(answerable),
                            "unanswerable_category": 1,
                            "category_names": {str(k): v for k, v in BEAM.items()},
                            "dataset": {"name": "beam_100k"}, "memory": {"memory": "bm25"}},
               "metrics": summarize(df, ["recall@10"], BEAM, answerable=answerable),
               "retrieval": {"context_tokens_mean": 300.0}}
    table = build_tables(metrics, BEAM, "bm25")["main_recall@10"]
    assert "mean_q_2_10" in table.columns and "mean_cat_1_4" not in table.columns
    text = render_summary(metrics, BEAM, "bm25", "/runs/x", width=200)
    assert "mean_q_2_10" in text and "mean_cat_1_4" not in text and "mean_q_1_4" not in text


@pytest.mark.parametrize(("dataset", "objective"), [("beam_100k", "recall@10.mean_q_2_10"),
                                                    ("beam_500k", "recall@10.mean_q_2_10"),
                                                    ("realtalk", "recall@10.mean_q_1_3"),
                                                    ("locomo10", "recall@10.mean_q_1_4")])
def test_each_dataset_objective_names_its_own_summary(dataset, objective):
    assert composed_config([f"dataset={dataset}"]).objective == objective
    sweep = composed_config([f"dataset={dataset}", "hparams_search=synapse_optuna"])
    assert sweep.objective == objective
