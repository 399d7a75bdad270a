"""Assemble result tables from run folders: ``metrics.json`` in, Markdown and LaTeX out.

    python scripts/make_tables.py multirun/run/2026-01-01_12-00-00 --out experiments/tables
    python scripts/make_tables.py outputs/paper_main/... outputs/no_gate/... --out /tmp/t \\
        --baseline paper_main

Each argument is a run folder or any folder above run folders (a Hydra multirun folder): every
``metrics.json`` below it is read. Rows are labelled by the run's experiment name (``experiment=``),
else by system and setting: the memory system's name and the overrides (``.hydra/overrides.yaml``)
that not every run shares, e.g. ``bm25 (memory.k=5)``; in folder order (a multirun's job number),
the baseline first. Runs scored on different questions (their number and ids:
``identity.dataset.question_set``, the sha256 of the question keys) are refused in one line naming
each run's count and set: make each set's tables apart; so are runs on the same questions scored
against different gold (``identity.dataset.gold_set``: an edited file's answers or evidence),
naming each run's gold and data file. A folder that holds no run, or a ``metrics.json`` that is
not a run's, is one line (exit status 2). Writes, as ``<name>.md`` and ``<name>.tex``
plus everything in one ``tables.md``:

- ``main_<metric>``: rows = runs, columns = categories and both means, for every metric all runs
  share (F1 under both protocols in qa mode, evidence recall@k); the SYNAPSE paper's Table 1 rows
  are added under the official F1, the only metric the paper's numbers match;
- ``ablation_<metric>``: the same per config, with each ablation's reported number beside it where
  the metric matches (official F1);
- ``delta_<metric>``: each config's ablation row minus the baseline's;
- ``rejection``: gated share of category 5 (true rejection), of categories 1-4 (false rejection),
  ROC AUC of C_ret for category 5 against the rest, mean context tokens;
- ``judges_scores``, ``judges_orders``, ``judges_tau``, ``judges_swaps`` (runs judged, two or
  more): each system under each judge (``eval.judges``) and scorer, each one's order of the
  systems, the Kendall tau-b between orders and the pairs they swap
  (``synapse_pt.eval.reports.judge_sensitivity``);
- ``paper_ablations``: the paper's reported ablation effects (F1, gpt-4o-mini), for reference;
- ``runs``: which folder, commit, dataset, questions (count and set), gold and settings made each
  row.

Every metric table names the gold its numbers were scored against (``dataset.gold``: the index
reads ``system (official gold)``); a ``dataset.gold=both`` run's audited numbers get tables of
their own, ``main_<metric>_audited``, where every run has them. Runs made under different
protocols (the strict setting or its exceptions, the strict-evidence instruction, the answer
style, the judge and its unreadable replies, the gold and its audit file, the prompt texts:
``PROTOCOL_FIELDS`` of ``synapse_pt.eval.records.collect``) are refused, naming what differs;
``--allow-mixed-protocols`` writes them anyway, with a ``protocols`` table saying how each row
was made and the difference printed, tables only under the golds every run was scored against
(an official-gold and an audited-gold run share none: refused all the same).

``--out`` is written as every folder the project writes (``synapse_pt.eval.records.commit``):
locked, the tables staged and swapped in whole; the tables an earlier call wrote there (its
manifest) that this one does not are removed, a user's files are never touched.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from synapse_pt.eval.records.collect import (
    build_tables,
    find_runs,
    load_runs,
    protocol_differences,
    write,
)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", help="run folders or folders above them")
    parser.add_argument("--out", required=True, type=Path, help="folder for the tables")
    parser.add_argument("--baseline", default="paper_main",
                        help="label of the full-system row of the ablation tables")
    parser.add_argument("--allow-mixed-protocols", action="store_true",
                        help="put runs made under different protocols in one table (said so in "
                             "a 'protocols' table)")
    args = parser.parse_args(argv)
    try:
        runs, where = load_runs(find_runs(args.run_dirs), baseline=args.baseline)
    except (OSError, ValueError) as err:  # no run folder, or one that is not a run's
        print(f"[make_tables] error: {str(err).removeprefix('make_tables: ')}", file=sys.stderr)
        return 2
    differences = protocol_differences(runs)
    if differences:
        lines = [f"  {field}: " + ", ".join(f"{label}={value}" for label, value in vals.items())
                 for field, vals in differences.items()]
        if not args.allow_mixed_protocols:
            print("[make_tables] refused: the runs were made under different protocols\n"
                  + "\n".join(lines) + "\n(--allow-mixed-protocols writes them anyway, with a "
                  "'protocols' table)", file=sys.stderr)
            return 2
        print("[make_tables] mixed protocols (see the 'protocols' table):\n" + "\n".join(lines),
              file=sys.stderr)
    baseline = args.baseline if args.baseline in runs else None
    if baseline is None:
        print(f"[make_tables] no run labelled {args.baseline!r}: no ablation tables",
              file=sys.stderr)
    try:
        tables = build_tables(runs, where, baseline)
    except ValueError as err:  # runs no table can hold together (different golds, categories)
        print(f"[make_tables] refused: {str(err).removeprefix('make_tables: ')}",
              file=sys.stderr)
        return 2
    if differences:
        frame = pd.DataFrame({f: {label: str(v) for label, v in vals.items()}
                              for f, vals in differences.items()})
        frame.index.name = "config"
        tables["protocols"] = (frame, ".1f")
    written = write(tables, args.out)
    print(f"[make_tables] {len(runs)} runs ({', '.join(runs)}) -> {len(written)} files in "
          f"{args.out.resolve()}")
    return 0


if __name__ == "__main__":
    from synapse_pt.commands.hydra_app import report_failures
    from synapse_pt.eval.records.commit import FolderLocked

    sys.exit(report_failures(main, errors=(FolderLocked,),
                             kept=lambda: "the folder of tables is left as it was"))
