"""Tune a memory's retrieval settings on some conversations, score them on the others.

    python scripts/tune_heldout.py --out multirun/heldout \
        --folds kfold5 conv-44,conv-47,conv-48,conv-49,conv-50 -- experiment=paper_main
    python scripts/tune_heldout.py --out multirun/heldout_gaama -- memory=gaama

The memory is built once from the run config (``configs/run.yaml`` plus overrides; default
``experiment=paper_main``). Candidates come from the memory's declared search space
(``search_space``, synapse_pt/memory/declare.py; SYNAPSE: the SPEC §1.5 readings, discrete
settings and continuous hyperparameters): its reference values first (the paper's or the public
code's), then random combinations of the discrete settings, each with ``--per-combination``
draws of the continuous ones; every setting the space does not vary keeps the run's value.
Every candidate is evaluated on every question (SYNAPSE in batched sweeps, any other memory
reconfigured and retrieved per candidate); then, per fold, the candidate with the best
recall@10 over the *other* conversations' answerable questions is read on the fold's questions,
and tau_gate is calibrated on the other conversations for ``--target-fr`` false rejection
(:mod:`synapse_pt.eval.tuning.heldout`).
Writes ``OUT/heldout.md`` (held-out table, folds, chosen configs), ``OUT/folds.json``,
``OUT/per_question_<scheme>.parquet``, ``OUT/candidates.parquet`` (in-sample recall of every
candidate, labelled as such) and ``OUT/chosen_on_all.json`` (the configuration the same
procedure picks on all conversations, as memory-config keys; for SYNAPSE on LoCoMo-10:
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
from hydra.utils import get_class
from omegaconf import OmegaConf

from synapse_pt.commands.build import composed_config, ingested_memory, run_category_names
from synapse_pt.eval.qa.pipeline import blind
from synapse_pt.eval.records.outputs import git_commit
from synapse_pt.eval.reports.tables import to_markdown
from synapse_pt.eval.tuning.heldout import (
    HeldoutStudy,
    candidates,
    fold_table,
    search_matrix,
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--folds", nargs="+", default=["kfold5"],
                        help="fold schemes, each 'kfold<n>' over the conversations or a "
                             "comma-separated list of test conversations (a fixed split); all "
                             "are read from one sweep")
    parser.add_argument("--combinations", type=int, default=24,
                        help="combinations of the discrete settings (the reference's first)")
    parser.add_argument("--per-combination", type=int, default=32,
                        help="continuous draws per combination (one where the memory's search "
                             "space has no continuous settings)")
    parser.add_argument("--chunk", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target-fr", type=float, default=0.025)
    parser.add_argument("overrides", nargs="*", default=["experiment=paper_main"])
    args = parser.parse_args(argv)
    if not 0.0 <= args.target_fr < 1.0:
        parser.error(f"--target-fr must lie in [0, 1), got {args.target_fr}")
    if args.combinations < 1 or args.per_combination < 1:
        parser.error("--combinations and --per-combination must be >= 1")
    cfg = composed_config([*(args.overrides or ["experiment=paper_main"]),
                           f"paths.output_dir={args.out}"])
    space = get_class(str(cfg.memory["_target_"])).declared_search_space()
    memory_cfg = OmegaConf.to_container(cfg.memory, resolve=True)
    t0 = time.perf_counter()
    memory, dataset = ingested_memory(cfg, "held-out tuning")
    ingest_s = time.perf_counter() - t0
    questions = list(dataset.questions())
    study = HeldoutStudy(questions, [c.sample_id for c in dataset], args.folds,
                         run_category_names(cfg), args.target_fr,
                         answerable=dataset.answerable, unanswerable=dataset.unanswerable)

    cands = candidates(space, args.combinations, args.per_combination, args.seed)
    t0 = time.perf_counter()
    with torch.no_grad():
        sweep = search_matrix(memory, memory_cfg, space, questions,
                              [blind(q) for q in questions], cands, chunk=args.chunk)
    sweep_s = time.perf_counter() - t0
    best_all, tau_all, in_sample = study.chosen_on_all(sweep)
    chosen_all = {"config": sweep.configs[best_all], "tau_gate": tau_all,
                  "in_sample_recall@10": in_sample}
    reference = study.in_sample(sweep, 0)
    # the fold table shows the discrete choices, and the continuous ones when few
    shown = [*space.discrete, *(space.continuous if len(space.continuous) <= 4 else ())]

    args.out.mkdir(parents=True, exist_ok=True)
    cand = pd.DataFrame(sweep.configs)
    for k in (5, 10, 30):
        cand[f"in_sample_recall@{k}"] = torch.nanmean(
            sweep.recall[k][:, study.answerable], dim=1).numpy()
    cand.to_parquet(args.out / "candidates.parquet")
    commit = git_commit(Path(__file__).resolve().parent)
    text = [f"# held-out {memory.name}", "",
            f"{len(sweep.configs)} candidates ({len(cands)} combinations of "
            f"{list(space.discrete)} x draws of {list(space.continuous)}, seed {args.seed}), "
            f"search {sweep_s:.0f} s, ingest {ingest_s:.0f} s; commit {commit}", ""]
    meta = {"command": " ".join(["scripts/tune_heldout.py", *(argv or sys.argv[1:])]),
            "git_commit": commit, "dataset_sha256": dataset.sha256,
            "config": OmegaConf.to_container(cfg.memory, resolve=True),
            "candidates": len(sweep.configs), "combinations": args.combinations,
            "per_combination": args.per_combination, "seed": args.seed,
            "target_fr": args.target_fr, "ingest_s": ingest_s, "sweep_s": sweep_s,
            "search_space": {"discrete": {k: list(v) for k, v in space.discrete.items()},
                             "continuous": {k: list(v) for k, v in space.continuous.items()}},
            "reference": reference, "schemes": []}
    results = study.schemes(sweep)
    for r in results:
        meta["schemes"].append({"scheme": r.label, "folds": r.folds, "records": r.records,
                                "gate": r.gate, "table": r.table.to_dict()})
        fold_rows = fold_table(r.records, lambda rec: {
            "tau_gate": rec["tau_gate"], **{k: rec["config"][k] for k in shown}})
        text += [f"## {r.label}: held-out evidence recall (fractions)", "",
                 to_markdown(r.table, floatfmt=".3f"), "",
                 "gate (tau_gate calibrated on the training conversations): " + ", ".join(
                     f"{k} {v:.3f}" for k, v in r.gate.items()), "",
                 f"### {r.label}: folds", "", to_markdown(fold_rows, floatfmt=".3f"), ""]
    text += [f"reference values (candidate 0), all questions: {reference}", "",
             f"chosen on all conversations (in-sample {chosen_all['in_sample_recall@10']:.3f}): "
             f"{json.dumps(chosen_all['config'])}, tau_gate {chosen_all['tau_gate']:.4f}"]
    study.write(args.out, "heldout", text, meta, chosen_all, results, "heldout_recall@10")
    return 0


if __name__ == "__main__":
    from synapse_pt.commands.hydra_app import USER_FACING_ERRORS, report_failures

    sys.exit(report_failures(main, errors=USER_FACING_ERRORS,
                             kept=lambda: "what finished before is kept; the caches keep what was "
                                          "computed (the same command resumes from them)"))
