"""Tune the fused LLM-free retriever on some conversations, score it on the others (issue 16).

    python scripts/tune_fused.py --out multirun/fused \
        --folds kfold5 conv-44,conv-47,conv-48,conv-49,conv-50

``memory=fused`` is built once (``configs/run.yaml`` plus overrides); every signal is computed for
all questions once, for each BM25 variant (``--k1`` x ``--b``). Candidates are random weight
vectors over the signals with a neighbour-propagation ``rho`` and a BM25 variant
(:mod:`synapse_pt.eval.fusion_search`); per fold the candidate with the best recall@10 over the
other conversations' answerable questions is read on the fold's questions
(:func:`synapse_pt.eval.heldout.heldout`). Fixed reference rows need no tuning (dense as asked =
``memory=vector_rag``, plain-token BM25 = ``memory=bm25``), and one held-out ablation per signal
repeats the search with that signal's weight forced to 0. Writes ``OUT/fused.md``,
``OUT/folds.json``, ``OUT/per_question_<scheme>.parquet`` and ``OUT/chosen_on_all.json`` (the
configuration the procedure picks on all ten conversations: ``configs/memory/fused.yaml``). The
last line is the first scheme's held-out recall@10 over categories 1-4.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import hydra
import pandas as pd
import torch

from synapse_pt.data import category_names
from synapse_pt.eval.fusion_search import fusion_candidates, fusion_sweep
from synapse_pt.eval.heldout import (
    KS,
    SweepMatrix,
    choose,
    fold_table,
    heldout,
    make_folds,
    summary_table,
    write_study,
)
from synapse_pt.eval.pipeline import blind
from synapse_pt.eval.study import compose_variant
from synapse_pt.eval.tables import to_markdown
from synapse_pt.memory.fused import SIGNALS
from synapse_pt.retrieval.bm25 import BM25Index
from synapse_pt.retrieval.dense import own_graph_mask
from synapse_pt.retrieval.fusion import minmax_normalise
from synapse_pt.retrieval.tokenize import tokenize
from synapse_pt.run import build_dataset, build_memory, git_commit, text_cache

VARIANT_SIGNALS = ("bm25", "bm25_window")


def variant_name(k1: float, b: float) -> str:
    return f"k1={k1:g},b={b:g}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--folds", nargs="+", default=["kfold5"])
    parser.add_argument("--candidates", type=int, default=400)
    parser.add_argument("--ablation-candidates", type=int, default=150)
    parser.add_argument("--k1", type=float, nargs="+", default=[0.9, 1.5, 2.0])
    parser.add_argument("--b", type=float, nargs="+", default=[0.3, 0.75])
    parser.add_argument("--chunk", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sigma-max", type=float, default=None,
                        help="also search session propagation, sigma in U(0, SIGMA_MAX) "
                             "(default: off, the candidates of searches 1-3)")
    parser.add_argument("overrides", nargs="*", default=[])
    args = parser.parse_args(argv)
    cfg = compose_variant(["memory=fused", *args.overrides, f"paths.output_dir={args.out}"])
    names = category_names(cfg.dataset.categories)
    dataset = build_dataset(cfg.dataset, refuse_fallback="held-out tuning")
    encoder = hydra.utils.instantiate(cfg.embedder, _convert_="all")
    memory = build_memory(cfg.memory, encoder=encoder, text_cache=text_cache(cfg))
    t0 = time.perf_counter()
    memory.ingest(dataset.conversations)
    ingest_s = time.perf_counter() - t0
    questions = list(dataset.questions())
    blinded = [blind(q) for q in questions]
    query_graph = memory.registry.graph_ids(blinded, memory.device)
    mask = own_graph_mask(memory.node_graph, query_graph)
    evidence = memory.evidence_index(questions)

    t0 = time.perf_counter()
    variants = [(k1, b) for k1, b in itertools.product(args.k1, args.b)]
    shared_names = [s for s in SIGNALS if s not in VARIANT_SIGNALS]
    with torch.no_grad():
        shared = memory.signals(blinded, query_graph, shared_names)
        plain = BM25Index([tokenize(memory.renderer(memory.registry.turns[k]))
                           for k in memory.keys], doc_group=memory.node_graph)
        shared["bm25_plain"] = plain.scores([tokenize(q.question) for q in blinded],
                                            query_group=query_graph).T
        shared_stack = torch.stack([minmax_normalise(shared[s].float(), mask)
                                    for s in [*shared_names, "bm25_plain"]])
        del shared
        stacks = {}
        for k1, b in variants:
            lex = memory.signals(blinded, query_graph, VARIANT_SIGNALS, bm25_k1=k1, bm25_b=b)
            stacks[variant_name(k1, b)] = torch.cat([shared_stack, torch.stack(
                [minmax_normalise(lex[s].float(), mask) for s in VARIANT_SIGNALS])])
    order = [*shared_names, "bm25_plain", *VARIANT_SIGNALS]
    signals_s = time.perf_counter() - t0
    tuned = [s for s in order if s != "bm25_plain"]  # plain BM25 is a reference row only

    def sweep(cands: list[dict]) -> SweepMatrix:
        with torch.no_grad():
            return fusion_sweep(stacks, order, mask, evidence, cands, prev=memory.prev,
                                nxt=memory.next, session=memory.session_id, chunk=args.chunk)

    ablations: dict[str, SweepMatrix] = {}

    def ablation_sweep(signal: str) -> SweepMatrix:
        """The first ``--ablation-candidates`` candidates with ``signal``'s weight 0 (once)."""
        if signal not in ablations:
            ablated = [{**c, "weights": {**c["weights"], signal: 0.0}}
                       for c in cands[:args.ablation_candidates]]
            ablations[signal] = sweep([c for c in ablated if any(c["weights"].values())])
        return ablations[signal]

    cands = fusion_candidates(tuned, list(stacks), args.candidates, args.seed,
                              sigma_max=args.sigma_max)
    t0 = time.perf_counter()
    full = sweep(cands)
    sweep_s = time.perf_counter() - t0
    default = variant_name(1.5, 0.75) if (1.5, 0.75) in variants else next(iter(stacks))
    reference = {"dense as asked (vector_rag)": {"dense_named": 1.0},
                 "BM25 plain tokens (bm25)": {"bm25_plain": 1.0},
                 "dense, names removed": {"dense": 1.0},
                 "BM25 stop words + Porter": {"bm25": 1.0}}
    ref_sweep = sweep([{"weights": w, "rho": 0.0, "bm25": default} for w in reference.values()])

    schemes = [f if f.startswith("kfold") else f.split(",") for f in args.folds]
    all_folds = [make_folds([c.sample_id for c in dataset], s) for s in schemes]
    answerable = torch.tensor([q.category < 5 for q in questions])
    everything = torch.ones(len(questions), dtype=torch.bool)
    best_all = choose(full, everything, answerable)
    chosen_all = {"candidate": cands[best_all], "in_sample_recall@10": float(
        torch.nanmean(full.recall[10][best_all][answerable]))}
    commit = git_commit(Path(__file__).resolve().parent)
    args.out.mkdir(parents=True, exist_ok=True)
    text = ["# held-out fused retriever", "",
            f"{len(cands)} candidates (seed {args.seed}) over signals {tuned}, BM25 variants "
            f"{list(stacks)}; ingest {ingest_s:.0f} s, signals {signals_s:.0f} s, sweep "
            f"{sweep_s:.0f} s; commit {commit}", ""]
    meta: dict = {"command": " ".join(["scripts/tune_fused.py", *(argv or sys.argv[1:])]),
                  "git_commit": commit, "dataset_sha256": dataset.sha256,
                  "candidates": len(cands), "seed": args.seed, "variants": list(stacks),
                  "ingest_s": ingest_s, "signals_s": signals_s, "sweep_s": sweep_s,
                  "schemes": []}
    headline = None
    for scheme, folds in zip(schemes, all_folds, strict=True):
        label = scheme if isinstance(scheme, str) else "split"
        rows, records_out = {}, {}
        per_q, records = heldout(full, questions, folds, names)
        per_q.to_parquet(args.out / f"per_question_{label}.parquet")
        table, _ = summary_table(per_q, names)
        rows["fused (held out)"] = table
        records_out["fused"] = records
        scored = per_q["c_ret"].notna().to_numpy()
        for name, _ in reference.items():  # fixed rows: nothing tuned, read on the same questions
            i = list(reference).index(name)
            single = SweepMatrix([{}], {k: ref_sweep.recall[k][i:i + 1] for k in KS},
                                 ref_sweep.c_ret[i:i + 1])
            ref_q, _ = heldout(single, questions, folds, names)
            rows[name] = summary_table(ref_q[scored], names)[0]
        for signal in tuned:  # held-out ablation: the search without this signal
            abl_q, abl_records = heldout(ablation_sweep(signal), questions, folds, names)
            rows[f"fused without {signal} (held out)"] = summary_table(abl_q, names)[0]
            records_out[f"without {signal}"] = abl_records
        summary = pd.DataFrame({name: {**{f"R@10 {c}": t.loc["recall@10", c]
                                           for c in t.columns},
                                       "R@30 1-4": t.loc["recall@30", "mean_q_1_4"],
                                       "R@5 1-4": t.loc["recall@5", "mean_q_1_4"]}
                                for name, t in rows.items()}).T
        fold_rows = fold_table(records, lambda r: {
            "rho": r["config"]["rho"], "sigma": r["config"].get("sigma", 0.0),
            "bm25": r["config"]["bm25"],
            **{f"w_{s}": r["config"]["weights"].get(s, 0.0) for s in tuned}})
        text += [f"## {label}: held-out evidence recall (fractions; R@10 per category)", "",
                 to_markdown(summary, floatfmt=".3f"), "",
                 f"### {label}: folds (the candidate each fold chose)", "",
                 to_markdown(fold_rows, floatfmt=".2f"), ""]
        meta["schemes"].append({"scheme": scheme, "folds": [list(f) for f in folds],
                                "records": records_out, "summary": summary.to_dict()})
        if headline is None:
            headline = float(table.loc["recall@10", "mean_q_1_4"])
    text += [f"chosen on all conversations (in-sample recall@10 "
             f"{chosen_all['in_sample_recall@10']:.3f}): {json.dumps(chosen_all['candidate'])}"]
    write_study(args.out, "fused", text, meta, chosen_all, "heldout_fused_recall@10", headline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
