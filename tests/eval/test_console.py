"""The end-of-run table: headline metrics in percent per category, gate figures, and a title that
says which data was loaded, flagging the shipped sample (issue 10 item 1, issue 12 item 1)."""

from __future__ import annotations

from synapse_pt.data.source import SAMPLE_FALLBACK_NOTE
from synapse_pt.eval.reports.console import SAMPLE_WARNING, render_summary

NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def metrics(name: str, mode: str = "retrieval", notes: tuple[str, ...] = ()) -> dict:
    per_cat = {"multi-hop": 0.25, "temporal": 0.5, "open-domain": None, "single-hop": 0.125,
               "adversarial": None, "mean_cat_1_4": 0.3, "mean_q_1_4": 0.2, "overall": 0.2}
    out = {"identity": {"dataset": {"name": name, "conversations": 10, "questions": 1986,
                                    "notes": list(notes)},
                        "memory": {"memory": "bm25"}, "eval_mode": mode, "smoke": False},
           "metrics": {"recall@10": per_cat},
           "retrieval": {"false_rejection_rate": 0.025, "true_rejection_rate": 0.5,
                         "c_ret_auc_adversarial": 0.61234}}
    if mode == "qa":
        out["metrics"]["f1_official"] = dict(per_cat, **{"multi-hop": 0.4})
    return out


def test_retrieval_summary_shows_recall_in_percent_and_the_gate() -> None:
    text = render_summary(metrics("locomo10"), NAMES, "bm25_run", "/runs/x", width=200)
    assert "bm25_run: bm25 on locomo10 (10 conversations, 1986 questions, retrieval mode)" in text
    row = next(line for line in text.splitlines() if "recall@10" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells == ["recall@10", "25.0", "50.0", "-", "12.5", "-", "30.0", "20.0", "20.0"]
    assert ("gate: false rejection (answerable) 2.5%; true rejection (unanswerable) 50.0%; "
            "C_ret ROC AUC, unanswerable vs rest 0.612") in text
    assert "/runs/x/metrics.json" in text
    assert SAMPLE_WARNING not in text


def test_qa_summary_shows_f1_not_recall() -> None:
    text = render_summary(metrics("locomo10", mode="qa"), NAMES, "qa_run", "/runs/y", width=200)
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert [r.strip("│ ").split("│")[0].strip() for r in rows] == ["f1_official"]
    assert "40.0" in rows[0]


def test_sample_data_is_flagged_in_the_title_and_below() -> None:
    for m in (metrics("sample"),
              metrics("locomo10", notes=(SAMPLE_FALLBACK_NOTE,))):
        text = render_summary(m, NAMES, "run", "/runs/z", width=300)
        assert text.count(SAMPLE_WARNING) == 2
