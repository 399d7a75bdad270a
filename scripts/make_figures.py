"""Figures of run folders and studies (PNG and SVG), from the package's plotting code.

    python scripts/make_figures.py RUN_OR_STUDY_DIR... --out experiments/figures

For every folder given: the runs under it (folders holding ``metrics.json``) get a per-category
recall@10 bar chart and, when they hold ``recall@<T>tok``, recall against the context-token budget;
runs with answers (QA mode) get their official F1 per category beside the SYNAPSE paper's Table 1;
runs that include the ``--baseline`` run (default ``paper_main``: an ablation multirun) also get
each run's recall@10 change from it beside the paper's reported F1 changes;
a gate study (a folder holding ``roc.csv`` and ``folds.json``, from ``scripts/gate_study.py``)
gets its ROC curves with each gate's held-out operating point and the paper's ``C_ret < 0.12``,
and each gate signal's distribution for category 5 against 1-4; a ``scripts/bench_scaling.py
--json`` file gets its log-log scaling curves; a ``scripts/bench_sweep.py --table`` parquet file
gets its landscape (recall@10 over the two most influential hyperparameters).
``--activation RUN_DIR`` rebuilds that SYNAPSE run's memory from its ``config.yaml`` (cached
embeddings: no model call when they are there) and draws the activated subgraph of the question
chosen by :func:`~synapse_pt.eval.reports.activation_view.pick_activation_example`'s criterion. The
last
line is the number of figures written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from synapse_pt.eval.records.collect import find_runs, load_runs
from synapse_pt.eval.reports.plots import (
    ablation_delta_plot,
    bar_chart,
    budget_frame,
    budget_plot,
    delta_frame,
    metric_frame,
    paper_comparison_frame,
    paper_comparison_plot,
    paper_deltas,
    roc_plot,
    scaling_plot,
    signal_distribution_plot,
    sweep_landscape_plot,
)

PAPER_TAU_GATE = 0.12
SWEPT = ("S", "delta", "beta", "gamma", "theta", "lambda1", "lambda2", "lambda3", "tau_gate")


def activation_figure(run_dir: Path, out: Path) -> list[Path]:
    """Rebuild the SYNAPSE memory of ``run_dir`` and draw its chosen question's subgraph."""
    from synapse_pt.commands.build import rebuild_memory
    from synapse_pt.eval.reports.activation_view import pick_activation_example
    from synapse_pt.eval.reports.plots import activation_subgraph_plot
    from synapse_pt.memory.synapse import SynapseMemory

    memory, dataset = rebuild_memory(run_dir)
    if not isinstance(memory, SynapseMemory):
        raise ValueError(f"--activation {run_dir}: memory is {type(memory).__name__}, the "
                         "activation figure needs a SYNAPSE run")
    example = pick_activation_example(memory, list(dataset.questions()))
    if example is None:
        print(f"{run_dir}: no multi-hop question whose evidence turn activation lifts into the "
              f"top-{memory.params.k} from outside it; no activation figure")
        return []
    print(f"activation example: {example.question.key} {example.question.question!r}, evidence "
          f"{example.nodes[example.target]['key']} gains {example.gain} places")
    return activation_subgraph_plot(example, out / f"{run_dir.name}_activation")


def gate_points(per_q: pd.DataFrame, gates: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Each gate's held-out (false rejection, true rejection) from ``per_question.parquet``."""
    adversarial = per_q["category"] == 5
    return {g: (float(per_q.loc[~adversarial, f"{g}:gated"].mean()),
                float(per_q.loc[adversarial, f"{g}:gated"].mean())) for g in gates}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", type=Path,
                        help="run or study folders, or bench_scaling JSON files")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--baseline", default="paper_main",
                        help="the full-system run of an ablation folder")
    parser.add_argument("--activation", type=Path, action="append", default=[],
                        help="a SYNAPSE run folder: draw its activation subgraph (repeatable)")
    args = parser.parse_args(argv)
    if not args.folders and not args.activation:
        parser.error("give run/study folders, bench_scaling JSON files or --activation RUN_DIR")
    args.out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for run_dir in args.activation:
        written += activation_figure(run_dir, args.out)
    for folder in args.folders:
        name = folder.name
        if folder.is_file() and folder.suffix == ".json":
            bench = json.loads(folder.read_text())
            written += scaling_plot(bench["retrieval"], bench["ingestion"], bench["exponents"],
                                    args.out / folder.stem)
            continue
        if folder.is_file() and folder.suffix == ".parquet":
            table = pd.read_parquet(folder)
            params = [c for c in table.columns if c in SWEPT]
            written += sweep_landscape_plot(table, params, "recall@10",
                                            args.out / f"{folder.stem}_landscape")
            continue
        roc_path = folder / "roc.csv"
        if roc_path.is_file():
            roc = pd.read_csv(roc_path)
            gates = list(dict.fromkeys(roc["gate"]))
            per_q = pd.read_parquet(folder / "per_question.parquet")
            points = gate_points(per_q, gates)
            marks = {}
            if "c_ret" in per_q:  # the paper's gate: C_ret < tau_gate = 0.12
                marks["paper: C_ret < 0.12"] = gate_points(
                    per_q.assign(**{"paper:gated": per_q["c_ret"] < PAPER_TAU_GATE}),
                    ["paper"])["paper"]
            written += roc_plot(roc, args.out / f"{name}_roc", points=points, marks=marks)
            written += signal_distribution_plot(
                per_q, gates, args.out / f"{name}_signals",
                thresholds={"c_ret": PAPER_TAU_GATE} if "c_ret" in gates else None)
            continue
        runs, _ = load_runs(find_runs([folder]))  # names the folder when it holds no runs
        path = args.out / f"{name}_recall_at_10.png"
        written.append(bar_chart(metric_frame(runs, "recall@10"), path,
                                 title=f"{name}: evidence recall@10 per category",
                                 ylabel="recall@10 (%)"))
        qa = {label: m for label, m in runs.items() if "f1_official" in m["metrics"]}
        if qa:
            written += paper_comparison_plot(paper_comparison_frame(qa),
                                             args.out / f"{name}_f1_vs_paper")
        if args.baseline in runs and len(runs) > 1:
            written += ablation_delta_plot(delta_frame(runs, args.baseline, "recall@10"),
                                           args.out / f"{name}_ablation_deltas",
                                           metric="recall@10", baseline=args.baseline,
                                           paper=paper_deltas())
        budgets = budget_frame(runs)
        if not budgets.empty and budgets.notna().any().any():
            written += budget_plot(budgets.dropna(how="all"), args.out / f"{name}_budget")
    for p in written:
        print(p)
    print(f"figures_written: {len(written)}")
    return 0


if __name__ == "__main__":
    from synapse_pt.commands.hydra_app import report_failures

    sys.exit(report_failures(main, kept=lambda: "the figures written before it are in --out"))
