"""The tables of a study run under both golds (``studies/golds.yaml``): each system's recall
under the official and the audited gold (with the ranks), the gate on the audit's groups, and
each system under the retrieval rules peers publish.

    python experiments/peer_tables.py multirun/study_golds [--out FILE.md]

Reads every run folder's ``metrics.json`` below the study folder. The last line is the largest
change of recall@10 (categories 1-4) between the golds, ``max_gold_shift: <value> recall``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from synapse_pt.eval.records.collect import find_runs, load_runs
from synapse_pt.eval.reports.tables import to_markdown

#: (rule@k, the published figure it is set beside)
PEER_COLUMNS = (("session_hit@5", "Engram R@5"), ("session_hit@10", "Engram R@10"),
                ("session_hit_turns@10", "mc-eval R@10"), ("session_recall@10", "MemPalace sess"),
                ("turn_recall_raw@10", "MemPalace dialog"), ("raw_strict@10", "infolang strict"),
                ("any@10", "any@10"), ("strict@10", "strict@10"))


def gold_table(runs: dict) -> pd.DataFrame:
    rows = {}
    for label, m in runs.items():
        off, aud = m["metrics"], m.get("metrics_audited", {})
        row = {}
        for metric in ("recall@10", "recall@30", "recall@1000tok"):
            a = off.get(metric, {}).get("mean_q_1_4")
            b = aud.get(metric, {}).get("mean_q_1_4")
            row[f"{metric} official"] = a
            row[f"{metric} audited"] = b
            row[f"{metric} change"] = None if a is None or b is None else b - a
        ret = m.get("retrieval", {})
        row["gated: unanswerable as asked"] = ret.get("audit_gated_rate_unanswerable_as_asked")
        row["gated: attribution errors"] = ret.get("audit_gated_rate_attribution_error")
        row["FR: the rest (1-4)"] = ret.get("audit_false_rejection_rest")
        rows[label] = row
    table = pd.DataFrame.from_dict(rows, orient="index").astype("float64")
    for gold in ("official", "audited"):
        table[f"rank {gold}"] = table[f"recall@10 {gold}"].rank(ascending=False, method="min")
    table.index.name = "system"
    return table


def peer_table(runs: dict, section: str) -> pd.DataFrame:
    rows = {label: {name: 100 * m[section][rule]["overall"]
                    for rule, name in PEER_COLUMNS if m.get(section, {}).get(rule)}
            for label, m in runs.items()}
    table = pd.DataFrame.from_dict(rows, orient="index").astype("float64")
    table.index.name = "system"
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    runs, _ = load_runs(find_runs([args.study]))
    golds = gold_table(runs)
    text = ["## Recall over categories 1-4 under each gold (fractions)", "",
            to_markdown(golds, floatfmt=".3f"), "",
            "## The peers' rules, official gold (percent; all five categories)", "",
            to_markdown(peer_table(runs, "peer_rules")), "",
            "## The peers' rules, audited gold (percent)", "",
            to_markdown(peer_table(runs, "peer_rules_audited")), ""]
    print("\n".join(text))
    if args.out:
        args.out.write_text("\n".join(text))
    shift = golds["recall@10 change"].abs().max()
    print(f"max_gold_shift: {shift:.4f} recall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
