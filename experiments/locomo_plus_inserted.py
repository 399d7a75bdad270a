"""Is an inserted LoCoMo-Plus session favoured for being inserted? (issue 59)

    python experiments/locomo_plus_inserted.py [overrides...]    # default: packed, paper_main

Builds SYNAPSE's memory (``experiment=paper_main`` unless overridden) on LoCoMo-Plus and compares,
conversation by conversation, the cue turns (sessions 1000+: the stitched ones) with the ordinary
turns of the same graph on what the triple score reads besides similarity and activation:

* the cached PageRank, as the score reads it (``pagerank_scale``, minmax by default) times
  ``lambda3``, and its percentile among the graph's turns (0.5: no favour);
* in-degree and out-degree, by edge type (temporal, abstraction), and the weighted in-strength;
* how many concepts a cue turn is joined to, and how many of those concepts are shared with
  ordinary turns (a cue's concepts are its bridge to the conversation).

It also ranks every turn by the raw similarity the score starts from, for each question, and
reports how often an inserted turn of *another* item is among a question's 10 best turns
(inserted turns look alike: written by the same generators, in the same register).

Prints Markdown tables (means over cue turns and over ordinary turns; percentiles are the share
of ordinary turns of the same graph below the cue turn).
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd
import torch

from synapse_pt.commands.build import composed_memory
from synapse_pt.data.locomo_plus import CUE_SESSION
from synapse_pt.eval.reports.tables import to_markdown
from synapse_pt.graph.pagerank import rescale_pagerank
from synapse_pt.graph.types import ABSTRACTION, EPISODIC, TEMPORAL
from synapse_pt.memory.synapse import SynapseMemory


def is_cue(key: str) -> bool:
    """``D<session>:<turn>`` with session >= 1000 (a stitched cue)."""
    return key.startswith("D") and int(key[1:].split(":")[0]) >= CUE_SESSION


def turn_table(memory: SynapseMemory) -> pd.DataFrame:
    """One row per episodic node: its graph, whether it is a cue turn, its PageRank (raw, as
    scored, percentile among its graph's ordinary turns), degrees and concept links."""
    params = memory.params
    rows = []
    for g in memory.graphs:
        n = g.num_nodes
        scaled = rescale_pagerank(g.pagerank, mode=params.pagerank_scale)
        ei, et, ew = g.edge_index, g.edge_type, g.edge_weight
        src, dst = ei[0], ei[1]
        degree = {}
        for name, kind in (("temporal", TEMPORAL), ("abstraction", ABSTRACTION)):
            mask = et == kind
            degree[f"in_{name}"] = torch.bincount(dst[mask], minlength=n)
            degree[f"out_{name}"] = torch.bincount(src[mask], minlength=n)
        strength = torch.zeros(n).index_add_(0, dst, ew.float())
        episodic = (g.node_type == EPISODIC) & g.active
        cue = torch.tensor([is_cue(k) for k in g.node_keys], dtype=torch.bool)
        # concepts of each turn (abstraction edges turn -> concept) and whether an ordinary turn
        # shares the concept
        abstraction = et == ABSTRACTION
        turn_to_concept = abstraction & episodic[src]
        concept_has_ordinary = torch.zeros(n, dtype=torch.bool)
        concept_has_ordinary[dst[turn_to_concept & ~cue[src]]] = True
        shared = torch.zeros(n).index_add_(
            0, src[turn_to_concept], concept_has_ordinary[dst[turn_to_concept]].float())
        ordinary_pr = scaled[episodic & ~cue].sort().values
        for i in episodic.nonzero().flatten().tolist():
            pr = float(scaled[i])
            rows.append({
                "graph": g.sample_id, "cue": bool(cue[i]), "pagerank_raw": float(g.pagerank[i]),
                "pagerank_scored": pr, "lambda3_term": float(params.lambda3) * pr,
                "pagerank_pct": float(torch.searchsorted(ordinary_pr, torch.tensor(pr))
                                      / max(1, ordinary_pr.numel())),
                **{k: int(v[i]) for k, v in degree.items()}, "in_strength": float(strength[i]),
                "concepts": int(degree["out_abstraction"][i]), "concepts_shared": int(shared[i]),
            })
    return pd.DataFrame(rows)


def favour_table(turns: pd.DataFrame) -> pd.DataFrame:
    """Means over cue turns and over ordinary turns, and the cue turns' mean percentile."""
    cols = ["pagerank_raw", "pagerank_scored", "lambda3_term", "in_temporal", "out_temporal",
            "in_abstraction", "concepts", "concepts_shared", "in_strength"]
    out = turns.groupby("cue")[cols].mean().rename(index={True: "cue turns",
                                                         False: "ordinary turns"})
    out["pagerank_pct"] = turns.groupby("cue")["pagerank_pct"].mean().rename(
        index={True: "cue turns", False: "ordinary turns"})
    out["turns"] = turns.groupby("cue").size().rename(index={True: "cue turns",
                                                              False: "ordinary turns"})
    return out.loc[["cue turns", "ordinary turns"]]


def lookalikes(memory: SynapseMemory, dataset) -> dict[str, float]:
    """Over the questions: the share of the 10 turns most similar to the question (cosine, the
    score's first term) that are inserted turns of another item, of its own item, and the share
    of inserted turns among all turns of the memory."""
    from synapse_pt.eval.qa.pipeline import blind

    questions = [blind(q) for q in dataset.questions()]
    gold = {(q.sample_id, q.qa_index): set(q.evidence) for q in dataset.questions()}
    emb = memory.encoder.encode([q.question for q in questions])
    g = memory.batch
    keys = g.node_keys
    episodic = g.node_type == EPISODIC
    other = own = 0.0
    for q, e in zip(questions, emb, strict=True):
        block = memory.registry.graph_ids([q], memory.device).item()
        lo, hi = int(g.ptr[block]), int(g.ptr[block + 1])
        sims = g.x[lo:hi] @ e
        sims[~episodic[lo:hi]] = float("-inf")
        top = sims.topk(min(10, hi - lo)).indices.tolist()
        found = [keys[lo + i] for i in top]
        mine = gold[(q.sample_id, q.qa_index)]
        own += sum(1 for k in found if k in mine) / len(found)
        other += sum(1 for k in found if is_cue(k) and k not in mine) / len(found)
    cue_share = sum(1 for k, ep in zip(keys, episodic.tolist(), strict=True) if ep and is_cue(k))
    return {"other items' cue turns in the cosine top-10": other / len(questions),
            "own cue turns in the cosine top-10": own / len(questions),
            "inserted turns among all turns": cue_share / int(episodic.sum())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*",
                        default=["dataset=locomo_plus_packed", "experiment=paper_main"])
    args = parser.parse_args(argv)
    memory, dataset = composed_memory(args.overrides, "the inserted-session check")
    if not isinstance(memory, SynapseMemory):
        raise SystemExit(f"needs a SYNAPSE memory, got {type(memory).__name__}")
    turns = turn_table(memory)
    print(f"overrides: {' '.join(args.overrides)}\n")
    print(to_markdown(favour_table(turns), floatfmt=".4g"))
    print()
    for k, v in lookalikes(memory, dataset).items():
        print(f"- {k}: {v:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
