"""Activation layers of SYNAPSE (SPEC §1.2 steps 3-5) and their functional forms.

``synapse_pt.nn.functional.spreading_activation`` is the batched functional form;
:class:`ActivationDynamics` is the same computation as a module with the ablation switches of
SPEC §1.3 as constructor arguments. The layers (PyTorch Geometric ``MessagePassing`` modules)
are imported on first use; the functional forms need only torch.
"""

from importlib import import_module
from typing import Any

from synapse_pt.nn import functional
from synapse_pt.nn.functional import (
    activation_adjacency,
    activation_dynamics,
    activation_step,
    fan_out,
    fire,
    lateral_inhibition,
    normalized_edge_weight,
    propagate,
    spreading_activation,
)

__all__ = [
    "ActivationDynamics",
    "Firing",
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
    "spreading_activation",
]

_LAYERS = ("ActivationDynamics", "Firing", "LateralInhibition", "SpreadingActivation")


def __getattr__(name: str) -> Any:
    if name in _LAYERS:
        return getattr(import_module("synapse_pt.nn.activation"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
