"""Old-vs-new bit-identity harness: python harness.py OUT.pt (PYTHONPATH picks the code)."""

import itertools
import sys

import torch

from synapse_pt.nn import (
    ActivationDynamics,
    activation_adjacency,
    activation_dynamics,
    activation_step,
    spreading_activation,
)

torch.manual_seed(0)
out = {}


def graph(n, deg, seed):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, deg * n), generator=g)
    w = torch.rand(deg * n, generator=g)
    return ei, w


def a0(n, b, anchors, seed, dtype):
    g = torch.Generator().manual_seed(seed + 1)
    a = torch.zeros(n, b, dtype=dtype)
    for j in range(b):
        idx = torch.randperm(n, generator=g)[:anchors]
        a[idx, j] = (torch.rand(anchors, generator=g) + 0.3).to(dtype)
    return a


cases = 0
for n, b, deg, anchors in [(60, 5, 3, 2), (3000, 16, 4, 2), (20000, 8, 3, 3), (500, 40, 6, 30)]:
    print(n, flush=True)
    ei, w = graph(n, deg, n)
    for dtype in (torch.float32, torch.float64):
        a = a0(n, b, anchors, n, dtype)
        g = torch.Generator().manual_seed(n + 5)
        S = torch.rand(b, generator=g, dtype=torch.float64) + 0.5
        theta = torch.rand(b, generator=g, dtype=torch.float64) * 0.5
        mask = (torch.rand(n, b, generator=g) < 0.8) | (a > 0)
        inh = torch.rand(n, b, generator=g) < 0.5
        adj = activation_adjacency(ei, w, n, dtype=dtype)
        combos = list(
            itertools.product(
                ["dense", "auto", "sparse"],
                [0.05, 0.5],
                ["every_step", "last_step"],
                [False, True],
                [False, True],
                [1, 3],
                [False, True],
                ["none", "node", "both", "col1"],
                ["edges", "adj", "norm"],
            )
        )
        import random

        random.Random(n).shuffle(combos)
        for mode, dens, sched, fz, negb, T, pot, msk, graphform in combos[
            : 120 if n < 10000 else 40
        ]:
            if mode == "sparse" and (fz or negb):
                continue
            if mode != "auto" and dens != 0.05:
                continue
            layer = ActivationDynamics(
                M=5,
                T=T,
                fire_zero=fz,
                frontier=mode,
                frontier_density=dens,
                inhibition_schedule=sched,
            )
            kw = dict(S=S, theta=theta, beta=-0.1 if negb else 0.2, return_potential=pot)
            if msk == "node":
                kw["node_mask"] = mask
            elif msk == "both":
                kw["node_mask"], kw["inhibitor_mask"] = mask, inh
            elif msk == "col1":
                kw["node_mask"] = mask[:, :1]
            args = {"edges": (a, ei, w), "adj": (a, adj), "norm": (a, adj)}[graphform]
            if graphform == "norm":
                kw["normalized"] = True
            r = layer(*args, **kw)
            out[(n, str(dtype), mode, dens, sched, fz, negb, T, pot, msk, graphform)] = r
            cases += 1
    # functional forms and cached / no-inhibition layers
    a = a0(n, b, anchors, n, torch.float32)
    adj = activation_adjacency(ei, w, n)
    out[(n, "spreading_activation")] = spreading_activation(ei, w, a, num_nodes=n)
    out[(n, "activation_dynamics")] = activation_dynamics(adj, a, return_potential=True, T=4)
    pl = []
    out[(n, "activation_step")] = activation_step(adj, a, potential=pl)
    out[(n, "activation_step_pot")] = pl[0]
    out[(n, "noinh")] = ActivationDynamics(inhibition=False)(a, ei, w, return_potential=True)
    out[(n, "cached")] = ActivationDynamics(cached=True, fan=False)(a, ei, w)
    out[(n, "unfused")] = ActivationDynamics(fused=False, frontier="dense")(a, ei, w)
    out[(n, "T0")] = ActivationDynamics(T=0)(a, ei, w, return_potential=True)
    if n <= 3000:
        for sched in ("every_step", "last_step"):
            out[(n, "compile", sched)] = ActivationDynamics(
                compile=True, T=3, inhibition_schedule=sched
            )(a, ei, w, return_potential=True)
            out[(n, "compile_np", sched)] = ActivationDynamics(
                compile=True, T=3, inhibition_schedule=sched, frontier="dense"
            )(a, ei, w)
    # autograd
    S_g = torch.tensor(0.8, requires_grad=True)
    r = ActivationDynamics(T=2)(a.double(), ei, w.double(), S=S_g)
    r.sum().backward()
    out[(n, "grad")] = (r.detach(), S_g.grad)
torch.save(out, sys.argv[1])
print(cases, "cases", len(out), "entries")
