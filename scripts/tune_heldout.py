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

import hydra
import pandas as pd
import torch
from omegaconf import OmegaConf

from synapse_pt.data import category_names
from synapse_pt.eval.heldout import (
    calibrate_tau,
    candidates,
    choose,
    fold_table,
    heldout,
    make_folds,
    summary_table,
    sweep_matrix,
    write_study,
)
from synapse_pt.eval.pipeline import blind
from synapse_pt.eval.study import compose_variant
from synapse_pt.eval.tables import to_markdown
from synapse_pt.retrieval.synapse import SynapseParams
from synapse_pt.run import (
    build_dataset,
    build_extractor,
    build_memory,
    git_commit,
    text_cache,
)


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
    cfg = compose_variant([*(args.overrides or ["experiment=paper_main"]),
                           f"paths.output_dir={args.out}"])
    if not str(cfg.memory["_target_"]).endswith("SynapseMemory"):
        parser.error("tune_heldout tunes SYNAPSE: the overrides must select memory=synapse")
    resolved = OmegaConf.to_container(cfg, resolve=True)
    names = category_names(cfg.dataset.categories)
    dataset = build_dataset(cfg.dataset, refuse_fallback="held-out tuning")
    encoder = hydra.utils.instantiate(cfg.embedder, _convert_="all")
    extractor = build_extractor(cfg.extractor, encoder, None)
    memory = build_memory(cfg.memory, encoder=encoder, extractor=extractor,
                          text_cache=text_cache(cfg))
    t0 = time.perf_counter()
    memory.ingest(dataset.conversations)
    ingest_s = time.perf_counter() - t0
    questions = list(dataset.questions())
    schemes = [f if f.startswith("kfold") else f.split(",") for f in args.folds]
    all_folds = [make_folds([c.sample_id for c in dataset], scheme) for scheme in schemes]

    cands = candidates(args.combinations, args.per_combination, args.seed)
    base = SynapseParams(**resolved["memory"]["params"])
    t0 = time.perf_counter()
    with torch.no_grad():
        sweep = sweep_matrix(memory, questions, [blind(q) for q in questions], cands, base,
                             chunk=args.chunk)
    sweep_s = time.perf_counter() - t0
    answerable = torch.tensor([q.category < 5 for q in questions])
    everything = torch.ones(len(questions), dtype=torch.bool)
    best_all = choose(sweep, everything, answerable)
    chosen_all = {"config": sweep.configs[best_all],
                  "tau_gate": calibrate_tau(sweep.c_ret[best_all][answerable], args.target_fr),
                  "in_sample_recall@10": float(torch.nanmean(
                      sweep.recall[10][best_all][answerable]))}
    paper = {k: float(torch.nanmean(sweep.recall[k][0][answerable])) for k in (5, 10, 30)}

    args.out.mkdir(parents=True, exist_ok=True)
    cand = pd.DataFrame(sweep.configs)
    for k in (5, 10, 30):
        cand[f"in_sample_recall@{k}"] = torch.nanmean(
            sweep.recall[k][:, answerable], dim=1).numpy()
    cand.to_parquet(args.out / "candidates.parquet")
    commit = git_commit(Path(__file__).resolve().parent)
    text = ["# held-out SYNAPSE", "",
            f"{len(sweep.configs)} candidates ({args.combinations} combinations x "
            f"{args.per_combination}, seed {args.seed}), sweep {sweep_s:.0f} s, ingest "
            f"{ingest_s:.0f} s; commit {commit}", ""]
    meta = {"command": " ".join(["scripts/tune_heldout.py", *(argv or sys.argv[1:])]),
            "git_commit": commit, "dataset_sha256": dataset.sha256,
            "candidates": len(sweep.configs), "combinations": args.combinations,
            "per_combination": args.per_combination, "seed": args.seed,
            "target_fr": args.target_fr, "ingest_s": ingest_s, "sweep_s": sweep_s,
            "paper_values": paper, "schemes": []}
    headline: float | None = None
    for scheme, folds in zip(schemes, all_folds, strict=True):
        name = scheme if isinstance(scheme, str) else "split"
        per_q, records = heldout(sweep, questions, folds, names, args.target_fr)
        table, gate = summary_table(per_q, names)
        per_q.to_parquet(args.out / f"per_question_{name}.parquet")
        meta["schemes"].append({"scheme": scheme, "folds": [list(f) for f in folds],
                                "records": records, "gate": gate,
                                "table": table.to_dict()})
        fold_rows = fold_table(records, lambda r: {
            "tau_gate": r["tau_gate"],
            **{k: r["config"][k] for k in ("rank_episodic_only", "energy", "T", "k_anchor")}})
        text += [f"## {name}: held-out evidence recall (fractions)", "",
                 to_markdown(table, floatfmt=".3f"), "",
                 "gate (tau_gate calibrated on the training conversations): " + ", ".join(
                     f"{k} {v:.3f}" for k, v in gate.items()), "",
                 f"### {name}: folds", "", to_markdown(fold_rows, floatfmt=".3f"), ""]
        if headline is None:  # the first scheme's figure ends the output
            headline = float(table.loc["recall@10", "mean_q_1_4"])
    text += [f"paper values (candidate 0), all questions: {paper}", "",
             f"chosen on all conversations (in-sample {chosen_all['in_sample_recall@10']:.3f}): "
             f"{json.dumps(chosen_all['config'])}, tau_gate {chosen_all['tau_gate']:.4f}"]
    write_study(args.out, "heldout", text, meta, chosen_all, "heldout_recall@10", headline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
