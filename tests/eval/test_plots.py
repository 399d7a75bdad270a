"""Plotting code (synapse_pt/eval/reports/plots.py) and scripts/make_figures.py on small inputs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from synapse_pt.eval.reports.plots import budget_frame, budget_plot, roc_plot

pytest.importorskip("matplotlib")


def metrics(r10: float, budgets: dict[int, float]) -> dict:
    m = {"recall@10": {"multi-hop": r10, "mean_q_1_4": r10, "n": {}}}
    m |= {f"recall@{t}tok": {"mean_q_1_4": v} for t, v in budgets.items()}
    return {"identity": {"category_names": {"1": "multi-hop"}, "experiment": "x"}, "metrics": m}


def test_budget_frame_reads_recall_at_each_budget() -> None:
    runs = {"a": metrics(0.5, {1000: 0.6, 500: 0.4}), "b": metrics(0.2, {500: 0.1, 1000: 0.3})}
    frame = budget_frame(runs)
    assert list(frame.columns) == [500, 1000]
    assert frame.loc["a", 500] == 0.4 and frame.loc["b", 1000] == 0.3


def test_roc_and_budget_plots_write_png_and_svg(tmp_path: Path) -> None:
    roc = pd.DataFrame({"gate": ["g1"] * 3 + ["g2"] * 3, "threshold": [1, 0, -1] * 2,
                        "false_rejection": [0, 0.5, 1] * 2,
                        "true_rejection": [0, 0.8, 1, 0, 0.4, 1]})
    out = roc_plot(roc, tmp_path / "roc", points={"g1": (0.025, 0.3)})
    assert [p.suffix for p in out] == [".png", ".svg"] and all(p.stat().st_size > 0 for p in out)
    svg = out[1].read_text()
    assert "g1" in svg and "g2" in svg and "2.5% false rejection" in svg
    frame = budget_frame({"a": metrics(0.5, {500: 0.4, 1000: 0.6})})
    assert all(p.stat().st_size > 0 for p in budget_plot(frame, tmp_path / "budget"))


def test_make_figures_script_on_run_folders(tmp_path: Path, capsys) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import make_figures

    for name, r10 in (("run_a", 0.5), ("run_b", 0.3)):
        folder = tmp_path / "runs" / name
        folder.mkdir(parents=True)
        m = metrics(r10, {500: r10 - 0.1, 1000: r10})
        m["identity"]["experiment"] = name
        (folder / "metrics.json").write_text(json.dumps(m))
    assert make_figures.main([str(tmp_path / "runs"), "--out", str(tmp_path / "fig")]) == 0
    assert capsys.readouterr().out.strip().endswith("figures_written: 3")
    assert (tmp_path / "fig" / "runs_budget.svg").is_file()
    with pytest.raises(FileNotFoundError, match="no metrics.json under"):
        make_figures.main([str(tmp_path / "fig"), "--out", str(tmp_path / "fig2")])


def test_ablation_deltas_by_hand(tmp_path: Path) -> None:
    from synapse_pt.eval.reports.plots import ablation_delta_plot, delta_frame, paper_deltas

    runs = {"paper_main": metrics(0.50, {}), "no_fan": metrics(0.45, {}),
            "no_decay": metrics(0.52, {})}
    deltas = delta_frame(runs, "paper_main", "recall@10")
    assert list(deltas.index) == ["no_fan", "no_decay"]
    assert deltas.loc["no_fan", "mean_q_1_4"] == pytest.approx(-0.05)
    assert deltas.loc["no_decay", "multi-hop"] == pytest.approx(0.02)
    paper = paper_deltas()
    # the paper: fan(j) = 1 takes open-domain F1 from 25.9 to 16.8; delta = 0 temporal 50.1 -> 14.2
    assert paper.loc["no_fan", "open-domain"] == pytest.approx(16.8 - 25.9)
    assert paper.loc["no_decay", "temporal"] == pytest.approx(14.2 - 50.1)
    assert "vectors_only" not in paper.index  # no full value reported: no change to show
    out = ablation_delta_plot(deltas, tmp_path / "d", metric="recall@10", baseline="paper_main",
                              paper=paper)
    svg = out[1].read_text()
    assert "no_fan (open-domain)" in svg and "SYNAPSE paper: F1" in svg
    with pytest.raises(KeyError, match="no run labelled"):
        delta_frame(runs, "full", "recall@10")


def test_paper_comparison_frame_and_plot(tmp_path: Path) -> None:
    from synapse_pt.eval.reports.plots import paper_comparison_frame, paper_comparison_plot

    names = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop",
             "5": "adversarial"}
    run = {"identity": {"category_names": names, "experiment": "mine"},
           "metrics": {"f1_official": {"multi-hop": 0.1, "temporal": 0.2, "open-domain": 0.3,
                                       "single-hop": 0.4, "adversarial": 0.5, "n": {}}}}
    frame = paper_comparison_frame({"mine": run})
    assert list(frame.columns) == ["multi-hop", "temporal", "open-domain", "single-hop",
                                   "adversarial"]
    assert frame.loc["mine", "single-hop"] == pytest.approx(0.4)
    # the paper's Table 1: SYNAPSE single-hop 48.9, MemoryOS gives no adversarial score
    assert frame.loc["paper: SYNAPSE", "single-hop"] == pytest.approx(0.489)
    assert pd.isna(frame.loc["paper: MemoryOS", "adversarial"])
    out = paper_comparison_plot(frame, tmp_path / "f1")
    assert "paper: SYNAPSE" in out[1].read_text()
    with pytest.raises(ValueError, match="official F1"):
        paper_comparison_frame({"mine": run}, metric="f1_amem")


def test_sweep_influence_by_hand_and_landscape(tmp_path):
    import pandas as pd

    from synapse_pt.eval.reports.plots import sweep_influence, sweep_landscape_plot

    # y is a step function of a (eta^2 = 1); b's two halves hold four 0s and four 1s each (0);
    # c's halves: six 0s + two 1s against two 0s + six 1s: bin means 0.25 / 0.75 -> 0.25 / 0.25
    y = [0.0] * 8 + [1.0] * 8
    table = pd.DataFrame({
        "a": range(16),
        # rows 0-3 and 8-11 hold b's lower half (values 0-7)
        "b": [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15],
        "c": [0, 1, 2, 3, 4, 5, 8, 9, 6, 7, 10, 11, 12, 13, 14, 15],
        "recall@10": y,
    })
    got = sweep_influence(table, ["a", "b", "c"], "recall@10", bins=2)
    assert got.to_dict() == {"a": 1.0, "c": 0.25, "b": 0.0}
    assert list(got.index) == ["a", "c", "b"]
    png, svg = sweep_landscape_plot(table, ["a", "b", "c"], "recall@10", tmp_path / "land",
                                    bins=2)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and svg.is_file()


def test_make_figures_on_a_gate_study_a_benchmark_and_a_sweep_table(tmp_path: Path,
                                                                     capsys) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import make_figures

    from synapse_pt.eval.tuning.gate_fit import roc_frame

    study = tmp_path / "gate"
    study.mkdir()
    per_q = pd.DataFrame({"category": [1, 2, 5, 5, 4, 5], "c_ret": [0.5, 0.3, 0.1, 0.2, 0.05, 0.0],
                          "other": [0.1, 0.9, 0.2, 0.4, 0.3, 0.6]})
    per_q["c_ret:gated"] = per_q["c_ret"] < 0.15
    per_q["other:gated"] = per_q["other"] < 0.25
    per_q.to_parquet(study / "per_question.parquet")
    roc_frame(per_q, ["c_ret", "other"]).to_csv(study / "roc.csv", index=False)
    (study / "folds.json").write_text("{}")
    bench = {"retrieval": [{"N": 100, "E": 400, "B": b, "auto": {"s": 0.01 * b},
                            "dense": {"s": 0.02 * b}} for b in (1, 4)],
             "ingestion": [{"turns": t, "s": t / 100, "s_per_1000_turns": 10.0}
                           for t in (100, 1000)],
             "exponents": {"retrieval_auto_vs_ExB": 1.0, "ingestion_total_vs_turns": 1.0}}
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    pd.DataFrame({"S": [0.1, 0.5, 0.9, 0.3], "theta": [0.2, 0.4, 0.1, 0.8],
                  "recall@10": [0.3, 0.5, 0.4, 0.2]}).to_parquet(tmp_path / "sweep.parquet")
    out = tmp_path / "fig"
    assert make_figures.main([str(study), str(tmp_path / "bench.json"),
                              str(tmp_path / "sweep.parquet"), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip().endswith("figures_written: 8")
    for stem in ("gate_roc", "gate_signals", "bench", "sweep_landscape"):
        assert (out / f"{stem}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
