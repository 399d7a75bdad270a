"""Batched SYNAPSE retrieval over all LoCoMo questions against a per-question numpy loop.

    python scripts/bench_retrieval.py [--repeats 3] [--device cuda] [--profile] [overrides...]

Builds the memory of ``python -m synapse_pt.run`` (paper_main by default; any Hydra overrides)
over LoCoMo-10 with the cached embeddings, then times, on the same query embeddings and BM25
scores (after one untimed warm-up call):

* batched: :meth:`SynapseMemory.rank` for every question at once (one ``[N_g, B_g]`` block per
  conversation, the activation layer over the cached adjacency);
* loop: the same maths as a careful user would write it without the framework, one question at a
  time in numpy (float64): anchors, initial energy, ``T`` steps of propagation with decay and fan,
  lateral inhibition by the top-M, firing, the triple score and a stable top-k; each
  conversation's fan-normalised adjacency built once (dense; the largest has about 1,000 nodes).

It prints both times, how many questions get the identical top-k list (the loop runs in float64,
the batch in float32: a near-tie may swap two neighbours), and as its last line the ratio. With
``--profile`` it also profiles one more batched call and prints its largest operators and the
ratio the top-k, sparse products and cosine matmul alone would allow. With ``--frontier
auto,dense,sparse`` the batched side runs once per activation storage
(``memory.engine.frontier``), the storages in turn within each repeat, and each storage's
rankings are compared with the first's; ``--cpu-time`` times by the process's CPU time (with
``--threads 1`` on a shared machine).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import torch


def build(overrides: list[str], device: str = "cpu"):
    from synapse_pt.commands.build import composed_memory

    memory, dataset = composed_memory(["experiment=paper_main", f"device={device}", *overrides],
                                      "the retrieval benchmark")
    return memory, list(dataset.questions())


def loop_retrieve(memory, query_graph, query_emb, bm25, params) -> list[list[int]]:
    """One question at a time, numpy float64, global node ids of each top-k."""
    g = memory.batch  # the loop is numpy, on the host, whatever the memory's device
    x = g.x.double().cpu().numpy()
    active = g.active.cpu().numpy()
    pr = memory.pagerank(params.pagerank_scale).double().cpu().numpy()
    src, dst = g.edge_index.cpu().numpy()
    w = g.edge_weight.double().cpu().numpy()
    ptr, eptr = g.ptr.tolist(), g.edge_ptr.tolist()
    adjacency = {}
    for c in range(len(ptr) - 1):  # once per conversation
        n0, n1, e0, e1 = ptr[c], ptr[c + 1], eptr[c], eptr[c + 1]
        s, d, ww = src[e0:e1] - n0, dst[e0:e1] - n0, w[e0:e1]
        fan = np.bincount(s, minlength=n1 - n0).astype(np.float64) if params.fan else None
        P = np.zeros((n1 - n0, n1 - n0))
        np.add.at(P, (d, s), ww / (fan[s] if fan is not None else 1.0))
        adjacency[c] = P
    qg, qe, bm = (query_graph.cpu().numpy(), query_emb.double().cpu().numpy(),
                  bm25.double().cpu().numpy())
    S, delta, beta, gamma, theta = (float(params.S), float(params.delta), float(params.beta),
                                    float(params.gamma), float(params.theta))
    out = []
    for b in range(len(qg)):
        c = int(qg[b])
        n0, n1 = ptr[c], ptr[c + 1]
        mask = active[n0:n1]
        cos = x[n0:n1] @ qe[b]
        scores_bm = bm[n0:n1, b]
        a = np.zeros(n1 - n0)
        dense = [i for i in np.argsort(-np.where(mask, cos, -np.inf), kind="stable")
                 [:params.k_anchor] if mask[i]]
        a[dense] = np.maximum(cos[dense], 0.0)
        if params.bm25_trigger:
            best = max(float(np.max(np.where(mask, scores_bm, 0.0))), 1e-12)
            lexical = [i for i in np.argsort(-np.where(mask, scores_bm, -np.inf), kind="stable")
                       [:params.k_anchor] if mask[i] and scores_bm[i] > 0]
            for i in lexical:
                if i not in dense:
                    a[i] = max(scores_bm[i] / best, 0.0)
        P = adjacency[c]
        for _ in range(params.T):
            u = (1 - delta) * a + S * (P @ a)
            u[~mask] = 0.0
            top = np.sort(u[mask])[::-1][:params.M]
            inhibition = np.maximum(top[None, :] - u[:, None], 0.0).sum(axis=1)
            uhat = np.maximum(u - beta * inhibition, 0.0)
            a = 1.0 / (1.0 + np.exp(-gamma * (uhat - theta)))
            if not params.fire_zero:
                a = a * (uhat > 0)
            a[~mask] = 0.0
        score = params.lambda1 * cos + params.lambda2 * a + params.lambda3 * pr[n0:n1]
        order = np.argsort(-np.where(mask, score, -np.inf), kind="stable")[:params.k]
        out.append([n0 + int(i) for i in order if mask[i]])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed calls of each (best kept)")
    parser.add_argument("--device", default="cpu", help="where the batched side runs (the "
                        "loop is numpy on the host)")
    parser.add_argument("--profile", action="store_true",
                        help="also profile one batched call and print where its time goes")
    parser.add_argument("--frontier", default=None,
                        help="activation storages to time in turn, comma-separated (auto, "
                             "dense, sparse; default: the memory's)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time by the process's CPU time (use with --threads 1)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the memory")
    args = parser.parse_args(argv)
    torch.set_grad_enabled(False)
    if args.threads:
        torch.set_num_threads(args.threads)
    memory, questions = build(args.overrides, args.device)
    cuda = args.device.startswith("cuda")
    params = memory.params
    query_graph, query_emb, bm25 = memory.query_inputs(questions)
    modes = (args.frontier or memory.engine["frontier"]).split(",")
    clock = time.process_time if args.cpu_time else time.perf_counter
    results, seconds = {}, {m: [] for m in modes}
    for m in modes:  # warm-up
        memory.engine["frontier"] = m
        results[m] = memory.rank(query_graph, query_emb, bm25, params)
    for r in range(args.repeats):
        for m in (modes if r % 2 == 0 else modes[::-1]):
            memory.engine["frontier"] = m
            t = clock()
            memory.rank(query_graph, query_emb, bm25, params)
            if cuda:
                torch.cuda.synchronize()
            seconds[m].append(clock() - t)
    memory.engine["frontier"] = modes[0]
    ranked, batched_s, loop_s = results[modes[0]], seconds[modes[0]], []
    for m in modes[1:]:
        same = (torch.equal(results[m].index, ranked.index)
                and torch.equal(results[m].valid, ranked.valid))
        print(f"frontier={m}: best {min(seconds[m]):.3f} s, median "
              f"{statistics.median(seconds[m]):.3f} s of {len(seconds[m])}; the same rankings "
              f"as frontier={modes[0]}: {same}")
    for _ in range(max(1, args.repeats // 3)):
        t = time.perf_counter()
        looped = loop_retrieve(memory, query_graph, query_emb, bm25, params)
        loop_s.append(time.perf_counter() - t)
    batched = [[int(i) for i, ok in zip(row, valid, strict=True) if ok]
               for row, valid in zip(ranked.index.tolist(), ranked.valid.tolist(), strict=True)]
    same = sum(a == b for a, b in zip(batched, looped, strict=True))
    same_set = sum(set(a) == set(b) for a, b in zip(batched, looped, strict=True))
    print(f"questions: {len(questions)} over {memory.batch.num_graphs} conversations, "
          f"{memory.batch.x.shape[0]} nodes, k = {params.k}, T = {params.T}")
    print(f"batched (SynapseMemory.rank, {args.device}, frontier={modes[0]}): best "
          f"{min(batched_s):.3f} s, median {statistics.median(batched_s):.3f} s of "
          f"{len(batched_s)}{' (CPU time)' if args.cpu_time else ''}")
    print(f"per-question numpy loop:      best {min(loop_s):.3f} s of {len(loop_s)}")
    print(f"identical top-k lists: {same} / {len(questions)}; identical top-k sets: "
          f"{same_set} / {len(questions)}")
    if args.profile:
        from synapse_pt.eval.reports.profile import op_breakdown, primitive_seconds

        table, total = op_breakdown(lambda: memory.rank(query_graph, query_emb, bm25, params),
                                    cuda=cuda)
        bound = primitive_seconds(table)
        print(f"profile of one batched call: {total:.3f} s of operator self time; the largest:")
        print(table.head(8).to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        floor = sum(bound.values())
        print("; ".join(f"{k} {v:.3f} s" for k, v in bound.items())
              + f" = {floor / total:.0%}: were everything else free, the ratio would be "
              f"{min(loop_s) / floor:.0f} x")
    print(f"batched_speedup: {min(loop_s) / min(batched_s):.1f} x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
