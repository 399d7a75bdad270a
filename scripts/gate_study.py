"""Rejection gates held out (issue 14): every signal of :mod:`synapse_pt.memory.gate` and fitted
combinations, on all LoCoMo questions, thresholds and weights chosen on other conversations.

    python scripts/gate_study.py --out multirun/gate [--folds kfold5] [--target-fr 0.025] \
        [-- experiment=synapse_tuned ...]

The memory of the overrides (default ``experiment=synapse_tuned``) is built once and retrieves
for every question (its ``C_ret``); a :class:`~synapse_pt.memory.gate.RejectionGate` over the same
turns computes the turn signals. Per fold (:func:`synapse_pt.eval.tuning.gate_fit.heldout_gates`)
each
plain signal gets the threshold giving ``--target-fr`` false rejection on the other
conversations, and each combination is a logistic regression fitted there. The signals were
designed looking at the first five conversations only (``--design``); the table is also given for
the other five. Writes ``OUT/gate.md``, ``OUT/roc.csv`` (held-out ROC curves),
``OUT/per_question.parquet``, ``OUT/folds.json`` and ``OUT/chosen_on_all.json`` (thresholds and
weights the procedure picks on all ten conversations, what ``configs/memory/gate/`` ships). The
last line is the best gate's held-out AUC.
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

from synapse_pt.commands.build import composed_config, ingested_memory, run_category_names
from synapse_pt.eval.qa.pipeline import blind
from synapse_pt.eval.records.outputs import git_commit
from synapse_pt.eval.reports.tables import to_markdown
from synapse_pt.eval.tuning.gate_fit import fit_combination, gate_table, heldout_gates, roc_frame
from synapse_pt.eval.tuning.heldout import calibrate_tau, make_folds
from synapse_pt.memory.gate import TURN_SIGNALS, RejectionGate
from synapse_pt.retrieval.gate_signals import logistic_combination
from synapse_pt.retrieval.text import named_speaker

COMBINATIONS = {"combined": TURN_SIGNALS, "combined + c_ret": (*TURN_SIGNALS, "c_ret")}
DESIGN = "conv-26,conv-30,conv-41,conv-42,conv-43"


ADVERSARIAL_KINDS = ("other speaker's", "named speaker's", "no one named")


def adversarial_kinds(dataset) -> pd.Series:
    """Per question (dataset order): the kind of adversarial question, from its gold evidence
    (analysis only; ``""`` for answerable ones and adversarial ones without resolved evidence)."""
    kinds = []
    for conv in dataset.conversations:
        speakers = [conv.speaker_a, conv.speaker_b]
        spoken = {t.dia_id: t.speaker for t in conv.turns()}
        for q in conv.questions:
            who = {spoken[e] for e in q.evidence if e in spoken}
            n = named_speaker(q.question, speakers)
            if q.category != 5 or not who:
                kinds.append("")
            elif n < 0:
                kinds.append("no one named")
            else:
                kinds.append("named speaker's" if speakers[n] in who else "other speaker's")
    return pd.Series(kinds)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--folds", default="kfold5")
    parser.add_argument("--target-fr", type=float, default=0.025)
    parser.add_argument("--k", type=int, default=3, help="memory.gate.k of the turn signals")
    parser.add_argument("--design", default=DESIGN,
                        help="conversations the signals were designed on (reported apart)")
    parser.add_argument("overrides", nargs="*", default=["experiment=synapse_tuned"])
    args = parser.parse_args(argv)
    start = time.perf_counter()
    cfg = composed_config([*args.overrides, f"paths.output_dir={args.out}"])
    memory, dataset = ingested_memory(cfg, "a gate study")
    encoder = memory.encoder
    questions = [blind(q) for q in dataset.questions()]
    category = torch.tensor([q.category for q in dataset.questions()])
    with torch.no_grad():
        result = memory.retrieve(questions)
        gate = RejectionGate(encoder, memory.renderer, k=args.k, device=memory.device)
        gate.ingest(dataset.conversations)
        signals = {k: v.cpu() for k, v in gate.signals(questions, result.c_ret).items()}
    names = run_category_names(cfg)
    sample_ids = [q.sample_id for q in questions]
    folds = make_folds([c.sample_id for c in dataset.conversations], args.folds)
    per_q, records = heldout_gates(signals, COMBINATIONS, category, sample_ids, folds,
                                   args.target_fr)
    gates = [*signals, *COMBINATIONS]
    table = gate_table(per_q, gates, args.target_fr, names, records)
    design = set(args.design.split(","))
    rest = ~per_q["sample_id"].isin(design)
    table_rest = gate_table(per_q[rest].reset_index(drop=True), gates, args.target_fr, names,
                            records)
    kinds = adversarial_kinds(dataset)
    by_kind = pd.DataFrame({kind: per_q.loc[kinds == kind, [f"{g}:gated" for g in gates]].mean()
                            .set_axis(gates) for kind in ADVERSARIAL_KINDS})
    by_kind.index.name = "gate"
    counts = {kind: int((kinds == kind).sum()) for kind in ADVERSARIAL_KINDS}

    answerable = category != 5
    everything = torch.ones_like(answerable)
    chosen: dict = {"target_fr": args.target_fr, "k": args.k, "gates": {}}
    for name, used in COMBINATIONS.items():
        weights, intercept = fit_combination(signals, used, answerable, everything)
        signals_all = {**signals, name: logistic_combination(signals, weights, intercept)}
        chosen["gates"][name] = {"weights": weights, "intercept": intercept,
                                 "tau": calibrate_tau(signals_all[name][answerable],
                                                      args.target_fr)}
    for name in signals:
        chosen["gates"][name] = {"tau": calibrate_tau(signals[name][answerable], args.target_fr)}

    commit = git_commit(Path(__file__).resolve().parent)
    args.out.mkdir(parents=True, exist_ok=True)
    per_q.to_parquet(args.out / "per_question.parquet")
    roc_frame(per_q, gates).to_csv(args.out / "roc.csv", index=False)
    (args.out / "folds.json").write_text(json.dumps(
        {"command": " ".join(["scripts/gate_study.py", *(argv or sys.argv[1:])]),
         "git_commit": commit, "dataset_sha256": dataset.sha256, "folds": folds,
         "records": records, "memory": memory.describe()}, indent=1, default=str))
    (args.out / "chosen_on_all.json").write_text(json.dumps(chosen, indent=1))
    seconds = time.perf_counter() - start
    pct = f"{100 * args.target_fr:g}%"
    text = [f"# rejection gates held out ({args.folds}, target {pct} false rejection)", "",
            f"memory: `{' '.join(args.overrides)}`; commit `{commit}`; {len(questions)} "
            f"questions ({int((~answerable).sum())} adversarial); {seconds:.0f} s", "",
            "## all ten conversations (held out)", "", to_markdown(table, floatfmt=".3f"), "",
            f"## the {len(set(sample_ids) - design)} conversations the signals were not "
            "designed on", "", to_markdown(table_rest, floatfmt=".3f"), "",
            "## true rejection at the held-out threshold, by kind of adversarial question", "",
            "The kind is read from the gold evidence, for this analysis only: *other speaker's* "
            "= the question names one speaker and the other spoke every evidence turn (the "
            "wrong-person questions the turn signals aim at); *named speaker's* = the named "
            "speaker spoke an evidence turn (a wrong detail of their own life); *no one named*. "
            f"Counts: {counts}.", "", to_markdown(by_kind, floatfmt=".3f"), "",
            "## chosen on all ten (what the configs ship)", "", "```json",
            json.dumps(chosen, indent=1), "```"]
    (args.out / "gate.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))
    print(f"heldout_gate_auc: {float(table['AUC'].max()):.4f}")
    return 0


if __name__ == "__main__":
    from synapse_pt.commands.hydra_app import USER_FACING_ERRORS, report_failures

    sys.exit(report_failures(main, errors=USER_FACING_ERRORS,
                             kept=lambda: "what finished before is kept; the caches keep what was "
                                          "computed (the same command resumes from them)"))
