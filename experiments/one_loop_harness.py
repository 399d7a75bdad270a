"""Old-vs-new bit-identity harness: python harness.py OUT.pt (PYTHONPATH picks the code).

Runs the public layer only (ActivationDynamics; at 202f8ca the same keys come from its functional
forms). Compare two outputs with: python harness.py --compare OLD.pt NEW.pt"""

import itertools
import sys

import torch

from synapse_pt.nn import ActivationDynamics, activation_adjacency

try:  # the layer takes its hyperparameters as one Hyperparams (issue 60); before, as keywords
    from synapse_pt.nn import Hyperparams
except ImportError:
    Hyperparams = None

if sys.argv[1] == "--compare":
    old, new = torch.load(sys.argv[2]), torch.load(sys.argv[3])

    def same(x, y):
        if isinstance(x, tuple):
            return len(x) == len(y) and all(same(u, v) for u, v in zip(x, y, strict=True))
        return torch.equal(x, y) and x.dtype == y.dtype

    bad = [k for k in new if not same(old[k], new[k])]
    print(f"{len(new)} entries compared, {len(bad)} differ; not in new: "
          f"{sorted(map(str, set(old) - set(new)))}")
    for k in bad[:20]:
        print("DIFFERS", k)
    sys.exit(1 if bad else 0)

PAPER = dict(S=0.8, delta=0.5, beta=0.15, gamma=5.0, theta=0.5)


def layer_of(M=7, T=3, fan=True, fire_zero=False, inhibition="every_step", frontier="auto",
             frontier_density=0.05):
    layer = ActivationDynamics(M=M, T=T, fan=fan, fire_zero=fire_zero, inhibition=inhibition,
                               frontier=frontier, frontier_density=frontier_density)
    if Hyperparams is None:
        return layer

    def call(*args, S, delta, beta, gamma, theta, **kw):
        return layer(*args, hyper=Hyperparams(S, delta, beta, gamma, theta), **kw)

    return call


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
            layer = layer_of(M=5, T=T, fire_zero=fz, frontier=mode, frontier_density=dens,
                             inhibition=sched)
            kw = dict(PAPER, S=S, theta=theta, beta=-0.1 if negb else 0.2, return_potential=pot)
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
    # what the functional forms and retired switches of 202f8ca computed, by the layer
    a = a0(n, b, anchors, n, torch.float32)
    adj = activation_adjacency(ei, w, n)
    out[(n, "spreading_activation")] = layer_of()(a, ei, w, **PAPER)
    out[(n, "activation_dynamics")] = layer_of(T=4)(a, adj, normalized=True,
                                                     return_potential=True, **PAPER)
    a1, pot1 = layer_of(T=1)(a, adj, normalized=True, return_potential=True, **PAPER)
    out[(n, "activation_step")], out[(n, "activation_step_pot")] = a1, pot1
    out[(n, "noinh")] = layer_of(M=0)(a, ei, w, return_potential=True, **PAPER)
    out[(n, "cached")] = layer_of(fan=False)(a, ei, w, **PAPER)
    out[(n, "T0")] = layer_of(T=0)(a, ei, w, return_potential=True, **PAPER)
    # autograd
    S_g = torch.tensor(0.8, requires_grad=True)
    r = layer_of(T=2)(a.double(), ei, w.double(), **dict(PAPER, S=S_g))
    r.sum().backward()
    out[(n, "grad")] = (r.detach(), S_g.grad)
torch.save(out, sys.argv[1])
print(cases, "cases", len(out), "entries")
