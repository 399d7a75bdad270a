"""Which of one run's missed evidence turns another run finds (issue 34's misses study).

    python experiments/misses_found.py BASE_RUN OTHER_RUN [--k 30]

Reads both runs' ``predictions.parquet`` (the same questions, e.g. ``memory=fused`` with MiniLM
and with all-mpnet-base-v2) and, over the answerable questions (categories 1-4) that carry
evidence, counts per category:

* ``base missed``: evidence turns outside BASE's first ``k`` retrieved turns;
* ``other finds``: how many of those OTHER's first ``k`` retrieved turns hold;
* ``other missed``: evidence turns outside OTHER's first ``k``, and ``base finds`` of those.

Retrieved turns are the ``retrieved_turns`` column: the turns the ranked units cover, in rank
order (for turn-unit memories such as ``memory=fused``, the ranking itself). The last line is
the share of BASE's missed evidence turns that OTHER finds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from synapse_pt.data import category_names
from synapse_pt.eval.reports.tables import to_markdown

KEY = ["sample_id", "qa_index"]


def missed_turns(frame: pd.DataFrame, k: int) -> list[set[str]]:
    """Per question (in the frame's row order), its evidence turns outside the first ``k``
    retrieved turns, as a set."""
    return [set(ev) - set(list(ret)[:k])
            for ev, ret in zip(frame["evidence"], frame["retrieved_turns"], strict=True)]


def misses_found(base: pd.DataFrame, other: pd.DataFrame, k: int) -> pd.DataFrame:
    """One row per category (and ``all``): evidence turns missed by ``base`` at ``k``, how many
    of them ``other`` finds, and the reverse. Questions: categories 1-4 with evidence."""
    def answerable(f: pd.DataFrame) -> pd.DataFrame:
        keep = (f["category"].astype(int) < 5) & (f["evidence"].map(len) > 0)
        return f[keep].sort_values(KEY).reset_index(drop=True)

    base, other = answerable(base), answerable(other)
    if base[KEY].astype(str).values.tolist() != other[KEY].astype(str).values.tolist():
        raise ValueError("misses_found: the two runs do not hold the same answerable questions "
                         f"({len(base)} vs {len(other)} rows, or different sample_id/qa_index)")
    miss_b, miss_o = missed_turns(base, k), missed_turns(other, k)
    rows = pd.DataFrame({
        "category": base["category"].astype(int).to_numpy(),
        "base missed": [len(m) for m in miss_b],
        "other finds": [len(mb - mo) for mb, mo in zip(miss_b, miss_o, strict=True)],
        "other missed": [len(m) for m in miss_o],
        "base finds": [len(mo - mb) for mb, mo in zip(miss_b, miss_o, strict=True)],
    })
    table = rows.groupby("category").sum()
    table.loc["all"] = table.sum()
    table["share found"] = table["other finds"] / table["base missed"]
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", type=Path, help="run folder whose misses are counted")
    parser.add_argument("other", type=Path, help="run folder checked for finding them")
    parser.add_argument("--k", type=int, default=30)
    args = parser.parse_args()
    frames = [pd.read_parquet(p / "predictions.parquet") for p in (args.base, args.other)]
    table = misses_found(*frames, args.k)
    names = category_names("official")
    table.index = pd.Index([names.get(c, str(c)) if c != "all" else "all" for c in table.index],
                           name="category")
    print(to_markdown(table, floatfmt=".3f"))
    print(f"share_of_base_misses_found_at_{args.k}: {table.loc['all', 'share found']:.3f}")


if __name__ == "__main__":
    main()
