"""Each peer's published LoCoMo retrieval figure at the peer's own retrieval depth, beside a run's
figure at the run's depth and cut at the peer's (issue 42).

    python experiments/peer_depths.py RUN_DIR [--data locomo10.json] [--out FILE.md]

Reads ``RUN_DIR/predictions.parquet`` (each question's ranked turns, ``retrieved_turns``) and the
LoCoMo file (the raw evidence strings and each conversation's turn order), applies each peer's
rule (:mod:`synapse_pt.eval.qa.scorers.peer_rules`) to the whole ranking, to its first ``depth``
turns (:func:`cut_at_depth`: as many items as the peer retrieves) and, for Hebb Mind, to those
turns with each one's two neighbours on either side (:func:`with_neighbours`). Percent over the
questions each rule counts, all five categories. The whole-ranking column is checked against the
run's own ``metrics.json`` (``peer_rules``), which computes the same rules in the run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import torch

from synapse_pt.data.locomo import load_locomo
from synapse_pt.eval.qa.scorers.peer_rules import cut_at_depth, peer_metrics, with_neighbours

#: (peer figure, published percent, rule@k, the peer's depth in its own items, what they are,
#: our cut in turns, neighbours on either side)
PEERS = (
    ("Engram R@5", "93.9", "session_hit@5", "10 items (6-turn chunks, synthetic docs)", 10, 0),
    ("Engram R@10", "95.0", "session_hit@10", "10 items (6-turn chunks, synthetic docs)", 10, 0),
    ("Hebb Mind R@10", "95.8", "session_hit_turns@10", "10 memories + 2 neighbours either side",
     10, 2),
    ("memory-core-eval R@10", "88.8", "session_hit_turns@10", "10 turns", 10, 0),
    ("MemPalace session rows @10", "60.3 / 88.9 / 92.4", "session_recall@10",
     "10 whole sessions", 10, 0),
    ("MemPalace dialog rows @10", "48.0", "turn_recall_raw@10", "10 turns", 10, 0),
    ("deja-vu hit@5", "85.7", "session_hit@5", "5 of up to 20 session transcripts", 5, 0),
)


def mean_percent(values: torch.Tensor) -> float:
    """100 x the mean over the questions the rule counts (NaN rows left out)."""
    kept = values[~torch.isnan(values)]
    return 100 * float(kept.mean()) if kept.numel() else math.nan


def depth_table(predictions: pd.DataFrame, dataset, run_metrics: dict | None = None
                ) -> pd.DataFrame:
    """One row per peer figure: ours over the whole ranking, cut at the peer's depth, and (Hebb
    Mind) cut with the neighbours; the run's depth is the longest ranking in ``predictions``."""
    questions = {(q.sample_id, q.qa_index): q for c in dataset.conversations for q in c.questions}
    order = {c.sample_id: [t.dia_id for t in c.turns()] for c in dataset.conversations}
    keys = list(zip(predictions["sample_id"], predictions["qa_index"].astype(int), strict=True))
    missing = [k for k in keys if k not in questions]
    if missing:
        raise KeyError(f"predictions: question {missing[0]} is not in the dataset")
    ranked = [list(r) for r in predictions["retrieved_turns"]]
    raw = [list(questions[k].evidence_raw) for k in keys]
    resolved = [list(questions[k].evidence) for k in keys]
    ours_depth = max(len(r) for r in ranked)
    rows = []
    for name, published, rule, their_depth, cut, radius in PEERS:
        k = int(rule.split("@")[1])
        whole = mean_percent(peer_metrics(ranked, raw, resolved, ks=(k,))[rule])
        if run_metrics is not None:
            recorded = 100 * run_metrics["peer_rules"][rule]["overall"]
            if not math.isclose(whole, recorded, abs_tol=1e-9):
                raise ValueError(f"{rule}: {whole} here, {recorded} in the run's metrics.json")
        short = cut_at_depth(ranked, cut)
        at_cut = mean_percent(peer_metrics(short, raw, resolved, ks=(k,))[rule])
        row = {"peer figure": name, "published %": published, "rule": f"`{rule}`",
               "peer's depth": their_depth, f"ours, {ours_depth} turns": whole,
               "ours cut at the peer's depth": at_cut, "cut (turns)": cut}
        if radius:
            grown = with_neighbours(short, [order[s] for s, _ in keys], radius)
            width = cut * (2 * radius + 1)
            row["ours cut, with the neighbours"] = mean_percent(
                peer_metrics(grown, raw, resolved, ks=(width,))[rule.replace(f"@{k}",
                                                                              f"@{width}")])
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--data", default=os.environ.get("SYNAPSE_DATA", "data/locomo10.json"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    predictions = pd.read_parquet(args.run / "predictions.parquet")
    metrics_file = args.run / "metrics.json"
    run_metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else None
    table = depth_table(predictions, load_locomo(args.data), run_metrics)
    text = table.to_markdown(index=False, floatfmt=".1f")
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
