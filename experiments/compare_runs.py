"""Compare the run folders of two trees of outputs, column by column: is the behaviour unchanged?

    python experiments/compare_runs.py BEFORE AFTER

Every sub-folder of BEFORE holding a ``predictions.parquet`` is compared with the folder of the
same name in AFTER: the columns (every value as its string, so NaN equals NaN and a float that
changes in its last bit differs) and ``metrics.json``'s ``metrics``; a sub-folder holding a
``sweep.parquet`` is compared with ``DataFrame.equals``. Columns AFTER adds are listed, not counted
as differences. The last line is ``identical_runs: <n> of <m>``; the exit status is 1 when any
differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd


def compare(before: Path, after: Path) -> tuple[bool, str]:
    if (before / "sweep.parquet").is_file():
        x, y = pd.read_parquet(before / "sweep.parquet"), pd.read_parquet(after / "sweep.parquet")
        same = x.equals(y)
        differ = [] if same else [c for c in x.columns if c not in y or not x[c].equals(y[c])]
        return same, f"{x.shape[0]} configurations; differing columns: {differ or 'none'}"
    x = pd.read_parquet(before / "predictions.parquet")
    y = pd.read_parquet(after / "predictions.parquet")
    missing = [c for c in x.columns if c not in y.columns]
    added = [c for c in y.columns if c not in x.columns]
    differ = [c for c in x.columns
              if c in y.columns and not x[c].astype(str).equals(y[c].astype(str))]
    mx = json.loads((before / "metrics.json").read_text())["metrics"]
    my = json.loads((after / "metrics.json").read_text())["metrics"]
    same = not missing and not differ and len(x) == len(y) and mx == my
    return same, (f"{len(x)} rows; differing columns: {differ or 'none'}; missing: "
                  f"{missing or 'none'}; added: {added or 'none'}; metrics equal: {mx == my}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    runs = sorted(p.name for p in args.before.iterdir()
                  if (p / "predictions.parquet").is_file() or (p / "sweep.parquet").is_file())
    same = 0
    for run in runs:
        if not (args.after / run).is_dir():
            print(f"{run}: missing in {args.after}")
            continue
        ok, text = compare(args.before / run, args.after / run)
        same += ok
        print(f"{run}: {'identical' if ok else 'DIFFERS'}: {text}")
    print(f"identical_runs: {same} of {len(runs)}")
    return 0 if same == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
