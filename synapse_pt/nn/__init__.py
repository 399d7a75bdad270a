"""The SYNAPSE activation dynamics (SPEC §1.2 steps 3-5) and the sparse kernels under them.

- :mod:`synapse_pt.nn.activation`: :class:`ActivationDynamics`, the layer: the maths in its
  module docstring, the loop over the :math:`T` steps with the step written out;
- :mod:`synapse_pt.nn.frontier`: where the activations live between steps (dense ``[N, B]``, or
  each column's packed active frontier) behind one small interface;
- :mod:`synapse_pt.nn.sparse`: the fan-normalised adjacency, sparse products, frontier edge lists,
  column top-k and CPU row blocks (also used by the graph and retrieval layers).
"""

from synapse_pt.nn.activation import (
    INHIBITION_SCHEDULES,
    ActivationDynamics,
    Hyperparams,
    fire,
    lateral_inhibition,
)
from synapse_pt.nn.frontier import FRONTIER_MODES
from synapse_pt.nn.sparse import activation_adjacency, fan_out, normalized_edge_weight

__all__ = [
    "FRONTIER_MODES",
    "INHIBITION_SCHEDULES",
    "ActivationDynamics",
    "Hyperparams",
    "activation_adjacency",
    "fan_out",
    "fire",
    "lateral_inhibition",
    "normalized_edge_weight",
]
