"""Assemble result tables from run folders: ``metrics.json`` in, Markdown and LaTeX out.

    python scripts/make_tables.py multirun/run/2026-01-01_12-00-00 --out experiments/tables
    python scripts/make_tables.py outputs/paper_main/... outputs/no_gate/... --out /tmp/t \\
        --baseline paper_main

Each argument is a run folder or any folder above run folders (a Hydra multirun folder): every
``metrics.json`` below it is read. Rows are labelled by the run's experiment name (``experiment=``;
else its ``task_name``), in folder order (a multirun's job number), the baseline first. Writes, as
``<name>.md`` and ``<name>.tex`` plus everything in one ``tables.md``:

- ``main_<metric>``: rows = runs, columns = categories and both means, for every metric all runs
  share (F1 under both protocols in qa mode, evidence recall@k); the SYNAPSE paper's Table 1 rows
  are added under the official F1, the only metric the paper's numbers match;
- ``ablation_<metric>``: the same per config, with each ablation's reported number beside it where
  the metric matches (official F1);
- ``delta_<metric>``: each config's ablation row minus the baseline's;
- ``rejection``: gated share of category 5 (true rejection), of categories 1-4 (false rejection),
  ROC AUC of C_ret for category 5 against the rest, mean context tokens;
- ``paper_ablations``: the paper's reported ablation effects (F1, gpt-4o-mini), for reference;
- ``runs``: which folder, commit, dataset and settings made each row.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from synapse_pt.eval.collect import build_tables, find_runs, load_runs, write


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", help="run folders or folders above them")
    parser.add_argument("--out", required=True, type=Path, help="folder for the tables")
    parser.add_argument("--baseline", default="paper_main",
                        help="label of the full-system row of the ablation tables")
    args = parser.parse_args(argv)
    runs, where = load_runs(find_runs(args.run_dirs), baseline=args.baseline)
    baseline = args.baseline if args.baseline in runs else None
    if baseline is None:
        print(f"[make_tables] no run labelled {args.baseline!r}: no ablation tables",
              file=sys.stderr)
    written = write(build_tables(runs, where, baseline), args.out)
    print(f"[make_tables] {len(runs)} runs ({', '.join(runs)}) -> {len(written)} files in "
          f"{args.out.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
