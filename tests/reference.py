"""Plain-Python references written straight from SPEC §1.2, shared by the tests: loops over
nodes, edges and queries, no tensors and no code of the package, so a test that compares the
package with them has an expectation independent of the code under test."""

from __future__ import annotations

import math


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def reference_dynamics(edges, num_nodes, a0_cols, params, *, M, T, fan, fire_zero, masks=None,
                       last_step_only=False, inhibitors=None, potentials=None):
    """edges: list of (j, i, w); a0_cols: list of B lists of N floats; params: list of B dicts
    with S, delta, beta, gamma, theta; masks: list of B sets of allowed nodes (or None).
    SPEC §1.5 readings: ``last_step_only`` inhibits at the last step only; ``inhibitors``: list of
    B sets of nodes that may be top-M inhibitors; ``potentials``: a list that receives each
    column's last-step uhat."""
    fan_count = [0] * num_nodes
    for j, _, _ in edges:
        fan_count[j] += 1
    out = []
    for b, a0 in enumerate(a0_cols):
        p = params[b]
        allowed = set(range(num_nodes)) if masks is None else masks[b]
        a = list(a0)
        may_inhibit = allowed if inhibitors is None else allowed & inhibitors[b]
        for step in range(T):
            m = M if (not last_step_only or step == T - 1) else 0
            u = [(1 - p["delta"]) * a[i] for i in range(num_nodes)]
            for j, i, w in edges:
                u[i] += p["S"] * w * a[j] / (fan_count[j] if fan else 1)
            u = [u[i] if i in allowed else 0.0 for i in range(num_nodes)]
            top = sorted((u[i] for i in may_inhibit), reverse=True)[:m]
            uhat = []
            for i in range(num_nodes):
                inhibition = sum(uk - u[i] for uk in top if uk > u[i])
                uhat.append(max(0.0, u[i] - p["beta"] * inhibition))
            if potentials is not None and step == T - 1:
                potentials.append(uhat)
            a = []
            for i in range(num_nodes):
                if i not in allowed or (uhat[i] == 0 and not fire_zero):
                    a.append(0.0)
                else:
                    a.append(sigmoid(p["gamma"] * (uhat[i] - p["theta"])))
        out.append(a)
    return out


def top_k(values: dict[int, float], k: int) -> list[int]:
    """Keys of the ``k`` largest values (ties: the smaller key first)."""
    return sorted(values, key=lambda i: (-values[i], i))[:k]


def reference_retrieve(x, node_graph, edges, pagerank_unit, query_emb, query_graph, bm25, p):
    """SYNAPSE retrieval (SPEC §1.2 steps 1-7, default readings) for each query in turn.

    ``x``: N lists (unit embeddings); ``node_graph``: N ints; ``edges``: (j, i, w) triples;
    ``pagerank_unit``: N floats; ``query_emb``: B lists; ``query_graph``: B ints; ``bm25``: N lists
    of B floats; ``p``: a dict of hyperparameters. Returns, per query, the top-k node ids, the
    activation of the top node (C_ret) and whether the gate rejects."""
    n = len(x)
    out = []
    for b, q in enumerate(query_emb):
        own = {i for i in range(n) if node_graph[i] == query_graph[b]}
        cos = {i: sum(a * c for a, c in zip(x[i], q, strict=True)) for i in range(n)}
        dense = set(top_k({i: cos[i] for i in own}, p["k_anchor"]))
        lexical = {i for i in top_k({i: bm25[i][b] for i in own}, p["k_anchor"])
                   if bm25[i][b] > 0}
        best = max([bm25[i][b] for i in own] + [1e-12])
        a0 = [0.0] * n
        for i in own:
            if i in dense:
                a0[i] = max(cos[i], 0.0)
            elif i in lexical:
                a0[i] = max(bm25[i][b] / best, 0.0)
        params = [{k: p[k] for k in ("S", "delta", "beta", "gamma", "theta")}]
        (act,) = reference_dynamics(edges, n, [a0], params, M=p["M"], T=p["T"], fan=p["fan"],
                                    fire_zero=p["fire_zero"], masks=[own])
        score = {i: p["lambda1"] * cos[i] + p["lambda2"] * act[i] + p["lambda3"] * pagerank_unit[i]
                 for i in own}
        top = top_k(score, p["k"])
        c_ret = act[top[0]]
        out.append((top, c_ret, c_ret < p["tau_gate"]))
    return out
