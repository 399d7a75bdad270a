"""Tune SYNAPSE's retrieval hyperparameters on some conversations, score them on the others.

    python scripts/tune_heldout.py --out multirun/heldout \
        --folds kfold5 conv-44,conv-47,conv-48,conv-49,conv-50 -- experiment=paper_main

The memory is built once from the run config (``configs/run.yaml`` plus overrides; default
``experiment=paper_main``). Candidates (random combinations of the SPEC §1.5 readings and of the
discrete settings, each with random continuous hyperparameters; the paper's values first) are
evaluated on every question in batched sweeps; then, per fold, the candidate with the best
recall@10 over the *other* conversations' answerable questions is read on the fold's questions,
and tau_gate is calibrated on the other conversations for ``--target-fr`` false rejection
(:mod:`synapse_pt.eval.heldout`). Writes ``OUT/heldout.md`` (held-out table, folds, chosen
configs), ``OUT/folds.json``, ``OUT/per_question_<scheme>.parquet``,
``OUT/candidates.parquet`` (in-sample recall of every candidate, labelled as such) and
``OUT/chosen_on_all.json`` (the configuration the same procedure picks on all conversations:
``experiment=synapse_tuned``). The last line is the first scheme's held-out recall@10 over
categories 1-4.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import torch
from omegaconf import OmegaConf

from synapse_pt.build import composed_config, ingested_memory, run_category_names
from synapse_pt.eval.heldout import HeldoutStudy, candidates, fold_table, sweep_matrix
from synapse_pt.eval.outputs import git_commit
from synapse_pt.eval.pipeline import blind
from synapse_pt.eval.tables import to_markdown
from synapse_pt.memory.synapse import SynapseMemory


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--folds", nargs="+", default=["kfold5"],
                        help="fold schemes, each 'kfold<n>' over the conversations or a "
                             "comma-separated list of test conversations (a fixed split); all "
                             "are read from one sweep")
    parser.add_argument("--combinations", type=int, default=24,
                        help="random combinations of the discrete settings")
    parser.add_argument("--per-combination", type=int, default=32,
                        help="continuous draws per combination")
    parser.add_argument("--chunk", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target-fr", type=float, default=0.025)
    parser.add_argument("overrides", nargs="*", default=["experiment=paper_main"])
    args = parser.parse_args(argv)
    if not 0.0 <= args.target_fr < 1.0:
        parser.error(f"--target-fr must lie in [0, 1), got {args.target_fr}")
    cfg = composed_config([*(args.overrides or ["experiment=paper_main"]),
                           f"paths.output_dir={args.out}"])
    if not str(cfg.memory["_target_"]).endswith("SynapseMemory"):
        parser.error("tune_heldout tunes SYNAPSE: the overrides must select memory=synapse")
    t0 = time.perf_counter()
    memory, dataset = ingested_memory(cfg, "held-out tuning")
    assert isinstance(memory, SynapseMemory)
    ingest_s = time.perf_counter() - t0
    questions = list(dataset.questions())
    study = HeldoutStudy(questions, [c.sample_id for c in dataset], args.folds,
                         run_category_names(cfg), args.target_fr,
                         answerable=dataset.answerable, unanswerable=dataset.unanswerable)

    cands = candidates(args.combinations, args.per_combination, args.seed)
    t0 = time.perf_counter()
    with torch.no_grad():
        sweep = sweep_matrix(memory, questions, [blind(q) for q in questions], cands,
                             memory.params, chunk=args.chunk)
    sweep_s = time.perf_counter() - t0
    best_all, tau_all, in_sample = study.chosen_on_all(sweep)
    chosen_all = {"config": sweep.configs[best_all], "tau_gate": tau_all,
                  "in_sample_recall@10": in_sample}
    paper = study.in_sample(sweep, 0)

    args.out.mkdir(parents=True, exist_ok=True)
    cand = pd.DataFrame(sweep.configs)
    for k in (5, 10, 30):
        cand[f"in_sample_recall@{k}"] = torch.nanmean(
            sweep.recall[k][:, study.answerable], dim=1).numpy()
    cand.to_parquet(args.out / "candidates.parquet")
    commit = git_commit(Path(__file__).resolve().parent)
    text = ["# held-out SYNAPSE", "",
            f"{len(sweep.configs)} candidates ({args.combinations} combinations x "
            f"{args.per_combination}, seed {args.seed}), sweep {sweep_s:.0f} s, ingest "
            f"{ingest_s:.0f} s; commit {commit}", ""]
    meta = {"command": " ".join(["scripts/tune_heldout.py", *(argv or sys.argv[1:])]),
            "git_commit": commit, "dataset_sha256": dataset.sha256,
            "config": OmegaConf.to_container(cfg.memory, resolve=True),
            "candidates": len(sweep.configs), "combinations": args.combinations,
            "per_combination": args.per_combination, "seed": args.seed,
            "target_fr": args.target_fr, "ingest_s": ingest_s, "sweep_s": sweep_s,
            "paper_values": paper, "schemes": []}
    results = study.schemes(sweep)
    for r in results:
        meta["schemes"].append({"scheme": r.label, "folds": r.folds, "records": r.records,
                                "gate": r.gate, "table": r.table.to_dict()})
        fold_rows = fold_table(r.records, lambda rec: {
            "tau_gate": rec["tau_gate"],
            **{k: rec["config"][k] for k in ("rank_episodic_only", "energy", "T", "k_anchor")}})
        text += [f"## {r.label}: held-out evidence recall (fractions)", "",
                 to_markdown(r.table, floatfmt=".3f"), "",
                 "gate (tau_gate calibrated on the training conversations): " + ", ".join(
                     f"{k} {v:.3f}" for k, v in r.gate.items()), "",
                 f"### {r.label}: folds", "", to_markdown(fold_rows, floatfmt=".3f"), ""]
    text += [f"paper values (candidate 0), all questions: {paper}", "",
             f"chosen on all conversations (in-sample {chosen_all['in_sample_recall@10']:.3f}): "
             f"{json.dumps(chosen_all['config'])}, tau_gate {chosen_all['tau_gate']:.4f}"]
    study.write(args.out, "heldout", text, meta, chosen_all, results, "heldout_recall@10")
    return 0


if __name__ == "__main__":
    sys.exit(main())
