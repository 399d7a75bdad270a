"""The LoCoMo-Plus table of a study's runs (issue 59): cue recall, any-hit, rank, per relation type.

    python experiments/locomo_plus_table.py multirun/study_locomo_plus [more run folders...]

Reads each run folder (``metrics.json``, ``predictions.parquet``, ``timing.json``,
``config.yaml``) under the given folders and prints, per run (``<dataset.variant>/<label>``, the
label a study gave it), over the 401 items and per relation type:

* ``R@5``, ``R@10``, ``R@30``: evidence recall (the share of the cue's turns among the first k
  retrieved units, as ``metrics.json`` records it);
* ``any@10``: a cue turn among the first 10 *turns* the retrieved units cover
  (``peer_rules.any@10``);
* ``rank``: the mean rank, among the turns the ranking covers (in the order it first covers them,
  so that a system whose units hold several turns compares), of the best-placed cue turn, over
  the items whose cue the ranking reaches at all, and ``found``: the share it reaches. A study
  variant ``<label>.deep`` (the same system ranking every node) gives its rank and found to the
  row ``<label>`` (found 1.0: every item's rank is known); without one, they are the standard
  run's, over the items whose cue its first units cover;
* ``look-alike@10``: the share of the first 10 turns that are cue turns of *other* items (the
  packed variant's distractors; 0 in the faithful variant by construction);
* ``build s`` / ``retrieve s``: the run's ingest and retrieval seconds (``timing.json``).

The any@10 and rank columns are computed here from ``retrieved_turns`` and ``evidence`` and
checked against ``metrics.json`` where it has them (any@10). A ``<variant>/random`` row gives
what a uniformly random ranking of each memory's turns scores in expectation.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from synapse_pt.data.locomo_plus import CATEGORIES, CUE_SESSION
from synapse_pt.eval.reports.tables import to_markdown


def is_cue(turn: str) -> bool:
    return turn.startswith("D") and int(turn[1:].split(":")[0]) >= CUE_SESSION


def per_item(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per item: any@10, the best cue turn's 1-based rank among covered turns (NaN: not reached)
    and the look-alike share of the first 10 turns."""
    rows = []
    for _, row in predictions.iterrows():
        turns = list(row["retrieved_turns"])
        gold = set(row["evidence"])
        ranks = [i + 1 for i, t in enumerate(turns) if t in gold]
        top = turns[:10]
        rows.append({"category": int(row["category"]),
                     "any@10": float(any(t in gold for t in top)),
                     "rank": float(ranks[0]) if ranks else math.nan,
                     "lookalike@10": (sum(1 for t in top if is_cue(t) and t not in gold)
                                      / max(1, len(top)))})
    return pd.DataFrame(rows)


def run_rows(folder: Path) -> dict[str, float | str]:
    metrics = json.loads((folder / "metrics.json").read_text())
    timing = json.loads((folder / "timing.json").read_text())
    items = per_item(pd.read_parquet(folder / "predictions.parquet"))
    recorded = metrics["peer_rules"]["any@10"]["mean_q_1_4"]
    if abs(recorded - items["any@10"].mean()) > 1e-9:
        raise ValueError(f"{folder}: any@10 {items['any@10'].mean()} here, {recorded} recorded")
    identity = metrics["identity"]
    row: dict[str, float | str] = {
        "memories": identity["dataset"]["conversations"],
        **{f"R@{k}": metrics["metrics"][f"recall@{k}"]["mean_q_1_4"] for k in (5, 10, 30)},
        "any@10": items["any@10"].mean(),
        **{f"any@10 {name}": items.loc[items["category"] == c, "any@10"].mean()
           for c, name in CATEGORIES.items()},
        "rank": items["rank"].mean(), "found": items["rank"].notna().mean(),
        "look-alike@10": items["lookalike@10"].mean(),
        "build s": (math.nan if timing.get("ingest_reused") else timing.get("ingest_seconds")),
        "retrieve s": timing.get("retrieve_seconds"),
    }
    return row


def random_row(variant: str) -> dict[str, float]:
    """What a uniformly random ranking of each memory's turns gives, per item, in expectation:
    any@10 :math:`= 1 - \binom{N-m}{10} / \binom{N}{10}` and the best cue turn's rank
    :math:`(N + 1) / (m + 1)` (``N`` turns in the item's memory, ``m`` cue turns)."""
    from synapse_pt.commands.build import composed_config
    from synapse_pt.data.resolve import build_dataset

    dataset = build_dataset(composed_config(["dataset=locomo_plus",
                                             f"dataset.variant={variant}"]).dataset)
    hits, ranks, cats = [], [], []
    for conv in dataset:
        n = conv.num_turns
        for q in conv.questions:
            m = len(q.evidence)
            hits.append(1.0 - math.comb(n - m, 10) / math.comb(n, 10))
            ranks.append((n + 1) / (m + 1))
            cats.append(q.category)
    items = pd.DataFrame({"any@10": hits, "rank": ranks, "category": cats})
    return {"memories": len(dataset), "any@10": items["any@10"].mean(),
            **{f"any@10 {name}": items.loc[items["category"] == c, "any@10"].mean()
               for c, name in CATEGORIES.items()},
            "rank": items["rank"].mean(), "found": 1.0}


#: the suffix of a study variant that ranks every node (its rank column fills its standard row's)
DEEP = ".deep"


def variant_label(folder: Path) -> str:
    """A study run folder ``<i>_<label>`` as ``<label>``; any other folder by its name."""
    head, _, rest = folder.name.partition("_")
    return rest if head.isdigit() and rest else folder.name


def run_folders(paths: list[Path]) -> list[Path]:
    found = []
    for p in paths:
        if (p / "metrics.json").is_file():
            found.append(p)
        else:
            found += sorted((q.parent for q in p.glob("*/metrics.json")),
                            key=lambda f: (int(f.name.split("_")[0])
                                           if f.name.split("_")[0].isdigit() else 0, f.name))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args(argv)
    rows = {}
    for folder in run_folders(args.folders):
        metrics = json.loads((folder / "metrics.json").read_text())
        if metrics["identity"]["dataset"]["name"] != "locomo_plus":
            continue
        variant = OmegaConf.load(folder / "config.yaml").dataset.variant
        rows[f"{variant}/{variant_label(folder)}"] = run_rows(folder)
    for label in [lb for lb in rows if lb.endswith(DEEP)]:  # its rank goes to its standard row
        deep = rows.pop(label)
        base = rows.get(label.removesuffix(DEEP))
        if base is not None:
            base["rank"], base["found"] = deep["rank"], deep["found"]
    for variant in sorted({label.split("/")[0] for label in rows}):
        rows[f"{variant}/random"] = random_row(variant)
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "run"
    print(to_markdown(table, floatfmt=".3f"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
