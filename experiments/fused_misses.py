"""Why the fused retriever misses the evidence it misses (issue 16's recall goals).

    python experiments/fused_misses.py [--k 30] [overrides...]

Builds ``memory=fused`` (``configs/memory/fused.yaml`` plus overrides), ranks every turn of each
answerable question's conversation by the fused score and by each signal alone, and classifies
every evidence turn outside the fused top-k:

* ``no shared stem``: the turn's text (without its speaker) and the question (without the
  speakers' names) share no content word after stop-word removal and Porter stemming: BM25 cannot
  see it, only the dense signals can;
* ``some signal ranks it in the top-k``: at least one signal alone ranks it within k, so the
  fusion weights (not the signals) lose it;
* the median fused rank of the missed turns.

Prints one row per category and the total; the last line is the share of missed evidence turns
that no signal ranks within k. On LoCoMo-10 the fused configuration is chosen in-sample (its
held-out recall is within 0.003 of the in-sample one): the breakdown describes the misses, it
tunes nothing.
"""

from __future__ import annotations

import argparse

import pandas as pd
import torch

from synapse_pt.commands.build import composed_memory
from synapse_pt.data import category_names
from synapse_pt.eval.qa.pipeline import blind
from synapse_pt.eval.reports.tables import to_markdown
from synapse_pt.memory.baselines import descending_rank
from synapse_pt.memory.fused import FusedMemory
from synapse_pt.retrieval.dense import own_graph_mask
from synapse_pt.retrieval.text import neutralise_speakers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the memory")
    parser.add_argument("--k", type=int, default=30)
    args = parser.parse_args()

    memory, dataset = composed_memory(["memory=fused", *args.overrides], "the miss analysis")
    if not isinstance(memory, FusedMemory):
        raise ValueError(f"the analysis needs memory=fused, got {type(memory).__name__}")
    questions = [q for q in dataset.questions() if q.category < 5]
    blinded = [blind(q) for q in questions]
    query_graph = memory.registry.graph_ids(blinded, memory.device)
    mask = own_graph_mask(memory.node_graph, query_graph)
    used = [n for n, w in memory.weights.items() if w > 0]
    with torch.no_grad():
        signals = memory.signals(blinded, query_graph, used)
        fused_rank = descending_rank(memory.score(blinded, mask, query_graph), mask)  # [N, B]
        best_signal_rank = torch.stack([descending_rank(signals[n].float(), mask)
                                        for n in used]).amin(dim=0)
    row = memory.row_of()
    names = category_names("official")  # the preset of configs/dataset/locomo10.yaml
    records = []
    for b, q in enumerate(questions):
        speakers = memory.registry.speakers(q.sample_id)
        q_stems = set(memory.analyzer(neutralise_speakers(q.question, speakers)))
        for e in q.evidence:
            i = row.get((q.sample_id, e))
            if i is None:
                continue
            turn = memory.registry.turns[(q.sample_id, e)]
            records.append({
                "category": names.get(q.category, str(q.category)),
                "fused_rank": int(fused_rank[i, b]),
                "best_signal_rank": int(best_signal_rank[i, b]),
                "shares_stem": bool(q_stems & set(memory.analyzer(turn.content)))})
    frame = pd.DataFrame(records)
    frame["missed"] = frame["fused_rank"] > args.k

    def summary(part: pd.DataFrame) -> dict[str, float]:
        missed = part[part["missed"]]
        return {"evidence turns": len(part), f"missed (rank > {args.k})": len(missed),
                "missed share": len(missed) / max(1, len(part)),
                "of missed: no shared stem": float((~missed["shares_stem"]).mean()),
                f"of missed: some signal ranks <= {args.k}": float(
                    (missed["best_signal_rank"] <= args.k).mean()),
                "of missed: median fused rank": float(missed["fused_rank"].median()),
                "of found: no shared stem": float((~part[~part["missed"]]["shares_stem"]).mean())}

    table = pd.DataFrame({c: summary(p) for c, p in frame.groupby("category")}
                         | {"all 1-4": summary(frame)}).T
    print(f"evidence turns outside the fused top-{args.k} (answerable questions, "
          f"{len(questions)} questions; weights {memory.weights}, rho {memory.rho})")
    print(to_markdown(table, floatfmt=".3f"))
    missed = frame[frame["missed"]]
    print(f"missed_beyond_every_signal: {float((missed['best_signal_rank'] > args.k).mean()):.3f} "
          "share")


if __name__ == "__main__":
    main()
