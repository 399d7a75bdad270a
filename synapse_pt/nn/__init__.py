"""Activation layers of SYNAPSE (SPEC §1.2 steps 3-5) and their functional forms.

``synapse_pt.nn.functional.spreading_activation`` is the batched functional form;
:class:`ActivationDynamics` is the same computation as a module with the ablation switches of
SPEC §1.3 as constructor arguments.
"""

from synapse_pt.nn import functional
from synapse_pt.nn.activation import (
    ActivationDynamics,
    Firing,
    LateralInhibition,
    SpreadingActivation,
)
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
