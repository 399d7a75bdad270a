"""Activation layers of SYNAPSE (SPEC §1.2 steps 3-5), their functional forms and the sparse
kernels under them.

- :mod:`synapse_pt.nn.sparse`: the fan-normalised adjacency, sparse products, frontier edge
  lists, column top-k (also used by the graph and retrieval layers);
- :mod:`synapse_pt.nn.functional`: one step's maths, stage by stage (propagation, lateral
  inhibition, firing), and a call's ``StepParams`` and ``NodeMasks``;
- :mod:`synapse_pt.nn.activation`: the PyTorch Geometric layers and :class:`ActivationDynamics`,
  the one loop, with its functional forms (:func:`spreading_activation`,
  :func:`activation_dynamics`, :func:`activation_step`);
- :mod:`synapse_pt.nn.frontier`: where the loop's activations live between steps, dense ``[N, B]``
  or each column's packed sparse frontier (``FrontierEngine`` picks; both offer ``spread``,
  ``mask``, ``fire``, ``dense``).

The layers (and the functional forms that build them) import PyTorch Geometric on first use; the
kernels and the step maths need only torch.
"""

from importlib import import_module
from typing import Any

from synapse_pt.nn import functional, sparse
from synapse_pt.nn.functional import fire, lateral_inhibition, propagate
from synapse_pt.nn.sparse import activation_adjacency, fan_out, normalized_edge_weight

__all__ = [
    "ActivationDynamics",
    "Firing",
    "FrontierEngine",
    "LateralInhibition",
    "SpreadingActivation",
    "activation_adjacency",
    "activation_dynamics",
    "activation_step",
    "fan_out",
    "fire",
    "functional",
    "lateral_inhibition",
    "normalized_edge_weight",
    "propagate",
    "sparse",
    "spreading_activation",
]

_LAZY = {"ActivationDynamics": "activation", "Firing": "activation",
         "LateralInhibition": "activation", "SpreadingActivation": "activation",
         "activation_dynamics": "activation", "activation_step": "activation",
         "spreading_activation": "activation", "FrontierEngine": "frontier"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"synapse_pt.nn.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
