"""The calls the nn tests make, written over the one layer: ``spreading_activation`` (an edge
list in), ``activation_dynamics`` (a normalised adjacency in) and ``propagate`` (one step's
:math:`u`), with the tests' own default values. The expectations stay the tests' own (hand-worked
values, the plain-Python reference of ``tests/reference.py``)."""

from __future__ import annotations

from synapse_pt.nn import ActivationDynamics, Hyperparams

#: the values the tests use where a call names none (the paper's)
VALUES = {"S": 0.8, "delta": 0.5, "beta": 0.15, "gamma": 5.0, "theta": 0.5}


def layer(M=7, T=3, fan=True, fire_zero=False, inhibition="every_step", frontier="auto",
          frontier_density=0.05):
    return ActivationDynamics(M=M, T=T, fan=fan, fire_zero=fire_zero, inhibition=inhibition,
                              frontier=frontier, frontier_density=frontier_density)


def split(kwargs):
    """``kwargs`` as (layer arguments, call arguments with the hyperparameters' default values
    filled in)."""
    structure = {k: kwargs.pop(k) for k in ("M", "T", "fan", "fire_zero", "inhibition",
                                            "frontier", "frontier_density") if k in kwargs}
    hyper = Hyperparams(**{k: kwargs.pop(k, v) for k, v in VALUES.items()})
    return structure, {"hyper": hyper, **kwargs}


def spreading_activation(edge_index, edge_weight, a0, **kwargs):
    structure, call = split(dict(kwargs))
    return layer(**structure)(a0, edge_index, edge_weight, **call)


def activation_dynamics(adj_t, a0, **kwargs):
    structure, call = split(dict(kwargs))
    return layer(**structure)(a0, adj_t, normalized=True, **call)


def propagate(adj_t, a, **kwargs):
    """:math:`u = (1 - \\delta) a + S P a` of a non-negative ``a``: the potential of one step
    without inhibition (:math:`\\max(0, u) = u` there)."""
    return activation_dynamics(adj_t, a, M=0, T=1, return_potential=True, **kwargs)[1]
