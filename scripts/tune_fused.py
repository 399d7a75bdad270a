"""Tune the fused LLM-free retriever on some conversations, score it on the others (issue 16).

    python scripts/tune_fused.py --out multirun/fused \
        --folds kfold5 conv-44,conv-47,conv-48,conv-49,conv-50

``memory=fused`` is built once (``configs/run.yaml`` plus overrides); every signal is computed for
all questions once, for each BM25 variant (``--k1`` x ``--b``). Candidates are random weight
vectors over the signals with a neighbour-propagation ``rho`` and a BM25 variant
(:mod:`synapse_pt.eval.tuning.fusion_search`); per fold the candidate with the best recall@10 over
the
other conversations' answerable questions is read on the fold's questions
(:func:`synapse_pt.eval.tuning.heldout.heldout`). Fixed reference rows need no tuning (dense as
asked =
``memory=vector_rag``, plain-token BM25 = ``memory=bm25``), and one held-out ablation per signal
repeats the search with that signal's weight forced to 0. Writes ``OUT/fused.md``,
``OUT/folds.json``, ``OUT/per_question_<scheme>.parquet`` and ``OUT/chosen_on_all.json`` (the
configuration the procedure picks on all ten conversations: ``configs/memory/fused.yaml``). The
last line is the first scheme's held-out recall@10 over categories 1-4.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import torch

from synapse_pt.commands.build import composed_config, ingested_memory, run_category_names
from synapse_pt.eval.qa.pipeline import blind
from synapse_pt.eval.records.outputs import git_commit
from synapse_pt.eval.reports.tables import to_markdown
from synapse_pt.eval.tuning.fusion_search import fusion_candidates, fusion_sweep
from synapse_pt.eval.tuning.heldout import KS, HeldoutStudy, SweepMatrix, fold_table, summary_table
from synapse_pt.memory.fused import FusedMemory, bm25_variant_name


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--folds", nargs="+", default=["kfold5"])
    parser.add_argument("--candidates", type=int, default=400)
    parser.add_argument("--ablation-candidates", type=int, default=150)
    parser.add_argument("--k1", type=float, nargs="+", default=[0.9, 1.5, 2.0])
    parser.add_argument("--b", type=float, nargs="+", default=[0.3, 0.75])
    parser.add_argument("--chunk", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sigma-max", type=float, default=None,
                        help="also search session propagation, sigma in U(0, SIGMA_MAX) "
                             "(default: off, the candidates of searches 1-3)")
    parser.add_argument("overrides", nargs="*", default=[])
    args = parser.parse_args(argv)
    cfg = composed_config(["memory=fused", *args.overrides, f"paths.output_dir={args.out}"])
    t0 = time.perf_counter()
    memory, dataset = ingested_memory(cfg, "held-out tuning")
    assert isinstance(memory, FusedMemory)
    ingest_s = time.perf_counter() - t0
    questions = list(dataset.questions())
    study = HeldoutStudy(questions, [c.sample_id for c in dataset], args.folds,
                         run_category_names(cfg), answerable=dataset.answerable,
                         unanswerable=dataset.unanswerable)

    t0 = time.perf_counter()
    variants = list(itertools.product(args.k1, args.b))
    with torch.no_grad():
        inputs = memory.search_inputs([blind(q) for q in questions], variants)
    evidence = memory.evidence_index(questions)  # the gold, for scoring only
    signals_s = time.perf_counter() - t0
    tuned = [s for s in inputs.names if s != "bm25_plain"]  # plain BM25 is a reference row only

    def sweep(cands: list[dict]) -> SweepMatrix:
        with torch.no_grad():
            return fusion_sweep(inputs.stacks, inputs.names, inputs.mask, evidence, cands,
                                prev=inputs.prev, nxt=inputs.next, session=inputs.session,
                                chunk=args.chunk)

    ablations: dict[str, SweepMatrix] = {}

    def ablation_sweep(signal: str) -> SweepMatrix:
        """The first ``--ablation-candidates`` candidates with ``signal``'s weight 0 (once)."""
        if signal not in ablations:
            ablated = [{**c, "weights": {**c["weights"], signal: 0.0}}
                       for c in cands[:args.ablation_candidates]]
            ablations[signal] = sweep([c for c in ablated if any(c["weights"].values())])
        return ablations[signal]

    cands = fusion_candidates(tuned, list(inputs.stacks), args.candidates, args.seed,
                              sigma_max=args.sigma_max)
    t0 = time.perf_counter()
    full = sweep(cands)
    sweep_s = time.perf_counter() - t0
    default = (bm25_variant_name(1.5, 0.75) if (1.5, 0.75) in variants
               else next(iter(inputs.stacks)))
    reference = {"dense as asked (vector_rag)": {"dense_named": 1.0},
                 "BM25 plain tokens (bm25)": {"bm25_plain": 1.0},
                 "dense, names removed": {"dense": 1.0},
                 "BM25 stop words + Porter": {"bm25": 1.0}}
    ref_sweep = sweep([{"weights": w, "rho": 0.0, "bm25": default} for w in reference.values()])

    best_all, _, in_sample = study.chosen_on_all(full)
    chosen_all = {"candidate": cands[best_all], "in_sample_recall@10": in_sample}
    commit = git_commit(Path(__file__).resolve().parent)
    text = ["# held-out fused retriever", "",
            f"{len(cands)} candidates (seed {args.seed}) over signals {tuned}, BM25 variants "
            f"{list(inputs.stacks)}; ingest {ingest_s:.0f} s, signals {signals_s:.0f} s, sweep "
            f"{sweep_s:.0f} s; commit {commit}", ""]
    meta: dict = {"command": " ".join(["scripts/tune_fused.py", *(argv or sys.argv[1:])]),
                  "git_commit": commit, "dataset_sha256": dataset.sha256,
                  "candidates": len(cands), "seed": args.seed, "variants": list(inputs.stacks),
                  "ingest_s": ingest_s, "signals_s": signals_s, "sweep_s": sweep_s,
                  "schemes": []}
    results = study.schemes(full)
    for r in results:
        rows = {"fused (held out)": r.table}
        records_out = {"fused": r.records}
        scored = r.per_q["c_ret"].notna().to_numpy()
        for i, name in enumerate(reference):  # fixed rows: nothing tuned, the same questions
            single = SweepMatrix([{}], {k: ref_sweep.recall[k][i:i + 1] for k in KS},
                                 ref_sweep.c_ret[i:i + 1])
            rows[name] = summary_table(study.scheme(single, r.folds).per_q[scored],
                                       study.names, *study.categories)[0]
        for signal in tuned:  # held-out ablation: the search without this signal
            abl = study.scheme(ablation_sweep(signal), r.folds)
            rows[f"fused without {signal} (held out)"] = abl.table
            records_out[f"without {signal}"] = abl.records
        summary = pd.DataFrame({name: {**{f"R@10 {c}": t.loc["recall@10", c]
                                           for c in t.columns},
                                       "R@30 1-4": t.loc["recall@30", "mean_q_1_4"],
                                       "R@5 1-4": t.loc["recall@5", "mean_q_1_4"]}
                                for name, t in rows.items()}).T
        fold_rows = fold_table(r.records, lambda rec: {
            "rho": rec["config"]["rho"], "sigma": rec["config"].get("sigma", 0.0),
            "bm25": rec["config"]["bm25"],
            **{f"w_{s}": rec["config"]["weights"].get(s, 0.0) for s in tuned}})
        text += [f"## {r.label}: held-out evidence recall (fractions; R@10 per category)", "",
                 to_markdown(summary, floatfmt=".3f"), "",
                 f"### {r.label}: folds (the candidate each fold chose)", "",
                 to_markdown(fold_rows, floatfmt=".2f"), ""]
        meta["schemes"].append({"scheme": r.label, "folds": r.folds, "records": records_out,
                                "summary": summary.to_dict()})
    text += [f"chosen on all conversations (in-sample recall@10 "
             f"{chosen_all['in_sample_recall@10']:.3f}): {json.dumps(chosen_all['candidate'])}"]
    study.write(args.out, "fused", text, meta, chosen_all, results, "heldout_fused_recall@10")
    return 0


if __name__ == "__main__":
    from synapse_pt.commands.hydra_app import USER_FACING_ERRORS, report_failures

    sys.exit(report_failures(main, errors=USER_FACING_ERRORS,
                             kept=lambda: "what finished before is kept; the caches keep what was "
                                          "computed (the same command resumes from them)"))
