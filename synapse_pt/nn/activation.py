r"""Module form of the SYNAPSE activation dynamics (SPEC §1.2 steps 3-5, ablations §1.3).

:class:`SpreadingActivation` is a PyG :class:`~torch_geometric.nn.conv.MessagePassing` layer (one
propagation step), :class:`LateralInhibition` and :class:`Firing` are the two point-wise stages,
and :class:`ActivationDynamics` composes :math:`T` steps with every ablation switch as a
constructor argument. The stages compute with the functions of :mod:`synapse_pt.nn.functional`
(propagation, inhibition, firing: the maths, once), and :class:`ActivationDynamics` is the one
implementation of the loop: SYNAPSE retrieval, the batched sweep and the functional forms at the
end of this module (:func:`spreading_activation`, :func:`activation_dynamics`,
:func:`activation_step`) all run it; its ``forward`` holds the only loop over the :math:`T`
steps. Where the activations live between steps (a dense ``[N, B]`` matrix, or each column's
packed sparse frontier) is the storage the layer's
:class:`~synapse_pt.nn.frontier.FrontierEngine` picks; both run the same loop.

Hyperparameters are stored as float64 buffers (exactly the Python value; cast to the activations'
dtype at use, as the functional form does) and can be overridden per call, per column, by passing
a ``[B]`` tensor to ``forward``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.utils import is_torch_sparse_tensor

from .frontier import DenseActivations, FrontierEngine, GraphInput
from .functional import (
    INHIBITION_SCHEDULES,
    Hyper,
    NodeMasks,
    StepParams,
    _clamp_nonneg,
    _column_param,
    _retain_and_spread_,
    fire,
    inhibit_and_fire,
    lateral_inhibition,
)
from .sparse import _needs_grad, activation_adjacency, normalized_edge_weight, spmm_sum

__all__ = ["ActivationDynamics", "Firing", "LateralInhibition", "SpreadingActivation",
           "activation_dynamics", "activation_step", "spreading_activation"]


def _hyper_buffer(value: Hyper) -> Tensor:
    # float64 holds the Python float exactly, so casting at use matches the functional form.
    return torch.as_tensor(value, dtype=torch.float64).clone()


class SpreadingActivation(MessagePassing):
    r"""One propagation step with decay and fan normalisation (SPEC §1.2 step 3).

    .. math::
        u_i = (1 - \delta)\, a_i + \sum_{j \in \mathcal{N}_{in}(i)}
        S \, \frac{w_{ji}}{\mathrm{fan}(j)} \, a_j,
        \qquad \mathrm{fan}(j) = \deg_{out}(j)

    The message along an edge :math:`j \to i` is :math:`\frac{w_{ji}}{\mathrm{fan}(j)} a_j`;
    with a sparse adjacency (the default, ``fused=True``) message and aggregation are one sparse
    matmul, never an ``[E, B]`` tensor.

    Args:
        S (float or Tensor): spreading factor, scalar or ``[B]``. (default: ``0.8``)
        delta (float or Tensor): decay, scalar or ``[B]``; ``0`` = ``no_decay``.
            (default: ``0.5``)
        fan (bool): divide by the source's out-degree; ``False`` = ``no_fan``.
            (default: ``True``)
        cached (bool): cache the normalised graph on first use (one fixed graph).
            (default: ``False``)
        fused (bool): use the sparse-matmul ``message_and_aggregate`` path for ``[2, E]``
            inputs; ``False`` runs ``message`` + ``aggregate`` (materialises ``[E, B]``; for
            tests). (default: ``True``)
        **kwargs (optional): additional arguments of
            :class:`torch_geometric.nn.conv.MessagePassing`.

    Shapes:
        - **input:** activations :math:`(N, B)`, edge indices :math:`(2, E)` (source, target) or
          a sparse transposed adjacency :math:`(N, N)` (row = target, raw weights as values; its
          stored entries per column are the fan), edge weights :math:`(E)` *(optional)*
        - **output:** :math:`u`, :math:`(N, B)`
    """

    S: Tensor
    delta: Tensor

    def __init__(
        self,
        S: Hyper = 0.8,
        delta: Hyper = 0.5,
        fan: bool = True,
        cached: bool = False,
        fused: bool = True,
        **kwargs,
    ) -> None:
        kwargs.setdefault("aggr", "add")
        super().__init__(**kwargs)
        self.register_buffer("S", _hyper_buffer(S))
        self.register_buffer("delta", _hyper_buffer(delta))
        self.fan = fan
        self.cached = cached
        self.fused = fused
        self._cached: tuple[Tensor, Tensor | None] | None = None

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self._cached = None

    def normalize(
        self,
        edge_index: Tensor,
        edge_weight: Tensor | None = None,
        num_nodes: int | None = None,
        dtype: torch.dtype | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        r"""The graph with :math:`w_{ji} / \mathrm{fan}(j)` weights, in the form ``forward``
        uses: ``(adj_t, None)`` with a sparse CSR ``adj_t`` (fused) or ``(edge_index, weight)``.
        Cached when ``cached=True``."""
        if self.cached and self._cached is not None:
            return self._cached
        if is_torch_sparse_tensor(edge_index):
            coo = edge_index.to_sparse_coo().coalesce()
            target, source = coo.indices()
            edge_index, edge_weight = torch.stack([source, target]), coo.values()
            num_nodes = coo.size(0)
        if num_nodes is None:
            raise ValueError("num_nodes is required with an edge_index tensor")
        if self.fused:
            out = (
                activation_adjacency(edge_index, edge_weight, num_nodes, fan=self.fan, dtype=dtype),
                None,
            )
        else:
            if dtype is not None and edge_weight is not None:
                edge_weight = edge_weight.to(dtype)
            w = normalized_edge_weight(edge_index, edge_weight, num_nodes, fan=self.fan)
            out = (edge_index, w if dtype is None else w.to(dtype))
        if self.cached:
            self._cached = out
        return out

    def forward(
        self,
        a: Tensor,
        edge_index: Tensor,
        edge_weight: Tensor | None = None,
        *,
        S: Hyper | None = None,
        delta: Hyper | None = None,
        normalized: bool = False,
    ) -> Tensor:
        r"""Compute :math:`u` from activations ``a`` ``[N, B]``.

        ``S`` / ``delta`` override the stored values for this call (scalar or ``[B]``).
        ``normalized=True`` means ``(edge_index, edge_weight)`` already come from
        :meth:`normalize`.
        """
        if not normalized:
            edge_index, edge_weight = self.normalize(edge_index, edge_weight, a.size(0), a.dtype)
        # A sparse adj_t (edge_weight None) takes the fused message_and_aggregate path; PyG
        # builds propagate's signature from this single call, so keep it the only one.
        N = a.size(0)
        spread = self.propagate(edge_index, x=a, edge_weight=edge_weight, size=(N, N))
        B = a.size(1)
        S_t = _column_param(self.S if S is None else S, B, a, "S")
        delta_t = _column_param(self.delta if delta is None else delta, B, a, "delta")
        return _retain_and_spread_(spread, a, S_t, delta_t)

    def message(self, x_j: Tensor, edge_weight: Tensor) -> Tensor:
        return edge_weight.view(-1, 1) * x_j

    def message_and_aggregate(self, adj_t: Tensor, x: Tensor) -> Tensor:
        return spmm_sum(adj_t, x)

    def extra_repr(self) -> str:
        return f"S={self.S.tolist()}, delta={self.delta.tolist()}, fan={self.fan}"

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.extra_repr()})"


class LateralInhibition(nn.Module):
    r"""Lateral inhibition by the :math:`M` most excited nodes of each column (SPEC §1.2 step 4).

    .. math::
        \hat{u}_i = \max\Big(0,\; u_i - \beta \sum_{k \in \text{top-}M(u)}
        (u_k - u_i)\, [u_k > u_i]\Big)

    Args:
        M (int): inhibiting nodes per column, clipped to :math:`N`. (default: ``7``)
        beta (float or Tensor): strength, scalar or ``[B]``; ``0`` disables inhibition
            (``beta0``: :math:`\hat{u} = \max(0, u)`). (default: ``0.15``)
        inplace (bool): overwrite the input with :math:`\hat{u}` (saves an ``[N, B]`` buffer;
            ignored under autograd). (default: ``False``)

    Shapes:
        - **input:** :math:`u`, :math:`(N, B)`; node mask :math:`(N, B)` or :math:`(N, 1)`
          *(optional)*
        - **output:** :math:`\hat{u}`, :math:`(N, B)`
    """

    beta: Tensor

    def __init__(self, M: int = 7, beta: Hyper = 0.15, inplace: bool = False) -> None:
        super().__init__()
        self.M = int(M)
        self.inplace = inplace
        self.register_buffer("beta", _hyper_buffer(beta))

    def forward(
        self, u: Tensor, *, beta: Hyper | None = None, node_mask: Tensor | None = None,
        zero_outside: bool = False,
    ) -> Tensor:
        """``zero_outside``: ``u`` is 0 at the rows outside ``node_mask`` (see
        :func:`~synapse_pt.nn.functional.lateral_inhibition`)."""
        return lateral_inhibition(
            u,
            self.M,
            self.beta if beta is None else beta,
            node_mask=node_mask,
            inplace=self.inplace,
            zero_outside=zero_outside,
        )

    def extra_repr(self) -> str:
        return f"M={self.M}, beta={self.beta.tolist()}"


class Firing(nn.Module):
    r"""Sigmoid firing (SPEC §1.2 step 5).

    .. math::
        a_i = \sigma\big(\gamma (\hat{u}_i - \theta)\big) \cdot [\hat{u}_i > 0]

    Args:
        gamma (float or Tensor): gain, scalar or ``[B]``. (default: ``5.0``)
        theta (float or Tensor): threshold, scalar or ``[B]``. (default: ``0.5``)
        fire_zero (bool): drop the indicator (literal reading: silent nodes fire
            :math:`\sigma(-\gamma\theta)`). (default: ``False``)
        inplace (bool): overwrite the input (ignored under autograd). (default: ``False``)

    Shapes:
        - **input:** :math:`\hat{u}`, :math:`(N, B)`
        - **output:** :math:`a`, :math:`(N, B)`
    """

    gamma: Tensor
    theta: Tensor

    def __init__(
        self,
        gamma: Hyper = 5.0,
        theta: Hyper = 0.5,
        fire_zero: bool = False,
        inplace: bool = False,
    ) -> None:
        super().__init__()
        self.inplace = inplace
        self.register_buffer("gamma", _hyper_buffer(gamma))
        self.register_buffer("theta", _hyper_buffer(theta))
        self.fire_zero = fire_zero

    def forward(
        self, uhat: Tensor, *, gamma: Hyper | None = None, theta: Hyper | None = None
    ) -> Tensor:
        return fire(
            uhat,
            self.gamma if gamma is None else gamma,
            self.theta if theta is None else theta,
            self.fire_zero,
            inplace=self.inplace,
        )

    def extra_repr(self) -> str:
        return (
            f"gamma={self.gamma.tolist()}, theta={self.theta.tolist()}, fire_zero={self.fire_zero}"
        )


class ActivationDynamics(nn.Module):
    r"""The full SYNAPSE dynamics: :math:`T` steps of spreading, inhibition and firing.

    .. math::
        \mathbf{a}(t+1) = \mathrm{Fire}_{\gamma,\theta}\Big(\mathrm{Inhibit}_{M,\beta}\big(
        (1 - \delta)\,\mathbf{a}(t) + S\,\mathbf{P}\,\mathbf{a}(t)\big)\Big),
        \qquad P_{ij} = \frac{w_{ji}}{\mathrm{fan}(j)}

    returning :math:`\mathbf{a}(T)`. This is the one implementation of the loop: retrieval, the
    batched sweep and :func:`~synapse_pt.nn.activation.spreading_activation` /
    :func:`~synapse_pt.nn.activation.activation_dynamics` all run it, so a researcher who
    subclasses it or swaps a stage (``spreading``, ``lateral_inhibition``, ``firing``) changes
    every one of them. Each stage computes with the functions of :mod:`synapse_pt.nn.functional`
    (the maths lives there once).

    Ablation switches (SPEC §1.3): ``fan=False`` (``no_fan``), ``delta=0`` (``no_decay``),
    ``beta=0`` (``beta0``), ``inhibition=False`` (skip the stage: :math:`\hat{u} = \max(0, u)`),
    ``T`` (``T=0`` returns :math:`\mathbf{a}(0)`, no activation). Readings of SPEC §1.5:
    ``inhibition_schedule`` (``"every_step"``, or ``"last_step"``: steps :math:`1 \dots T-1`
    propagate and fire without inhibition) and, per call, ``inhibitor_mask`` (the nodes that may
    be among a column's top-:math:`M` inhibitors).

    Args:
        S (float or Tensor): spreading factor. (default: ``0.8``)
        delta (float or Tensor): decay. (default: ``0.5``)
        fan (bool): fan normalisation. (default: ``True``)
        M (int): inhibiting top nodes per column. (default: ``7``)
        beta (float or Tensor): inhibition strength. (default: ``0.15``)
        inhibition (bool): run lateral inhibition at all. (default: ``True``)
        gamma (float or Tensor): firing gain. (default: ``5.0``)
        theta (float or Tensor): firing threshold. (default: ``0.5``)
        fire_zero (bool): literal firing of silent nodes. (default: ``False``)
        T (int): steps. (default: ``3``)
        cached (bool): cache the normalised graph (one fixed graph). (default: ``False``)
        fused (bool): sparse-matmul propagation. (default: ``True``)
        inhibition_schedule (str): ``"every_step"`` or ``"last_step"``.
            (default: ``"every_step"``)
        frontier (str): ``"auto"``: propagate only each column's active frontier (its nodes
            with non-zero activation and their out-neighbours) while it holds at most
            ``frontier_density`` of the ``N x B`` cells, then densely; ``"sparse"``: always the
            frontier; ``"dense"``: never (:class:`~synapse_pt.nn.frontier.FrontierEngine`). The
            frontier path is exact (same result up to float summation order) when silent nodes
            stay silent: ``fire_zero=False``, :math:`\beta \ge 0`, no autograd. Where only
            firing or inhibition reaches every node (``fire_zero=True``, :math:`\beta < 0`),
            ``"auto"`` propagates the first step on :math:`\mathbf{a}(0)`'s frontier and runs
            the rest densely; with autograd or a swapped spreading stage, every step is dense.
            (default: ``"auto"``)
        frontier_density (float): the largest frontier, as a fraction of the :math:`N \times B`
            cells, that ``"auto"`` propagates sparsely. (default: ``0.05``)
        engine (FrontierEngine, optional): what picks the activations' storage, in place of
            ``frontier`` and ``frontier_density``. (default: ``None``)
        compile (bool): run a dense step's inhibition and firing as one compiled kernel
            (:meth:`respond_compiled`: :func:`~synapse_pt.nn.functional.inhibit_and_fire`,
            ``torch.compile``; the stage :meth:`response_stage` picks per call) where
            every node is a candidate inhibitor (no node or inhibitor mask), the stages are
            the stock ones and no autograd runs; elsewhere the eager stages run. Same result;
            the first call compiles (seconds). (default: ``False``)

    Shapes:
        - **input:** :math:`\mathbf{a}(0)` :math:`(N, B)`, edge indices :math:`(2, E)` or sparse
          :math:`(N, N)` adjacency (see :class:`SpreadingActivation`; with ``normalized=True`` the
          fan-normalised ``adj_t`` of :func:`~synapse_pt.nn.sparse.activation_adjacency`,
          cached with the graph), edge weights :math:`(E)` *(optional)*, node and inhibitor
          masks :math:`(N, B)` or :math:`(N, 1)` *(optional)*
        - **output:** :math:`\mathbf{a}(T)`, :math:`(N, B)` (with ``return_potential``, also
          :math:`\hat{u}(T)`, the last step's pre-sigmoid potential)
    """

    def __init__(
        self,
        S: Hyper = 0.8,
        delta: Hyper = 0.5,
        fan: bool = True,
        M: int = 7,
        beta: Hyper = 0.15,
        inhibition: bool = True,
        gamma: Hyper = 5.0,
        theta: Hyper = 0.5,
        fire_zero: bool = False,
        T: int = 3,
        cached: bool = False,
        fused: bool = True,
        inhibition_schedule: str = "every_step",
        frontier: str = "auto",
        frontier_density: float = 0.05,
        compile: bool = False,
        engine: FrontierEngine | None = None,
    ) -> None:
        super().__init__()
        if T < 0:
            raise ValueError(f"T must be >= 0, got {T}")
        if inhibition_schedule not in INHIBITION_SCHEDULES:
            raise ValueError(f"inhibition must be one of {INHIBITION_SCHEDULES}, got "
                             f"{inhibition_schedule!r}")
        self.engine = engine if engine is not None else FrontierEngine(frontier, frontier_density)
        self.spreading = SpreadingActivation(S, delta, fan=fan, cached=cached, fused=fused)
        # u is a fresh tensor every step: inhibition and firing may overwrite it.
        self.lateral_inhibition = LateralInhibition(M, beta, inplace=True) if inhibition else None
        self.firing = Firing(gamma, theta, fire_zero=fire_zero, inplace=True)
        self.T = int(T)
        self.inhibition_schedule = inhibition_schedule
        self.compile = bool(compile)

    def reset_parameters(self) -> None:
        self.spreading.reset_parameters()

    def forward(
        self,
        a0: Tensor,
        edge_index: Tensor,
        edge_weight: Tensor | None = None,
        *,
        node_mask: Tensor | None = None,
        inhibitor_mask: Tensor | None = None,
        S: Hyper | None = None,
        delta: Hyper | None = None,
        beta: Hyper | None = None,
        gamma: Hyper | None = None,
        theta: Hyper | None = None,
        normalized: bool = False,
        return_potential: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        r"""Run the dynamics from ``a0`` ``[N, B]``, :math:`T` times

        .. math::
            \mathbf{u} = (1 - \delta)\,\mathbf{a} + S\,\mathbf{P}\,\mathbf{a}, \qquad
            \hat{\mathbf{u}} = \mathrm{Inhibit}_{M,\beta}(\mathbf{u}), \qquad
            \mathbf{a} \leftarrow \mathrm{Fire}_{\gamma,\theta}(\hat{\mathbf{u}})

        with every node outside ``node_mask`` kept at 0 (in :math:`\mathbf{u}` and
        :math:`\mathbf{a}`; it never inhibits, see :func:`spreading_activation`). Keyword
        hyperparameters override the stored ones for this call (scalar or ``[B]``, one value per
        column). ``normalized=True``: the graph is already the normalised sparse ``adj_t``
        (built once per graph, reused by every batch of queries). The engine stores the
        activations (dense, or each column's sparse frontier: SynapseMemory's LoCoMo blocks are
        dense, 10^6-node graphs frontier); ``return_potential`` also returns the last
        :math:`\hat{\mathbf{u}}`."""
        if self.T == 0:
            return (a0, a0) if return_potential else a0
        a = self._activations(a0, edge_index, normalized)
        masks = NodeMasks.of(a, node_mask, inhibitor_mask)
        p = self.step_params(a, S=S, delta=delta, beta=beta, gamma=gamma, theta=theta)
        x = self.engine.store(self, a, GraphInput(edge_index, edge_weight, normalized), masks, p)
        respond = self.response_stage(a, p)  # Fire(Inhibit(u)): eager stages or one kernel
        potential = None
        for t in range(self.T):
            last = t == self.T - 1
            keep = return_potential and last
            u = x.mask(x.spread(p))  # u = (1 - delta) a + S P a, 0 outside the node mask
            a, uhat = respond(u, x, p, last, keep)  # a = Fire(Inhibit(u)); a copy of uhat if keep
            if keep:
                potential = x.dense(uhat)
            x.fire(a)  # stored, 0 outside the node mask
        return (x.dense(), potential) if return_potential else x.dense()

    def respond(self, u: Tensor, x: DenseActivations, p: StepParams, last: bool,
                keep: bool = False) -> tuple[Tensor, Tensor | None]:
        r"""One step's :math:`\mathbf{a} = \mathrm{Fire}(\hat{\mathbf{u}})`,
        :math:`\hat{\mathbf{u}} = \mathrm{Inhibit}(\mathbf{u})` by the layer's stages (or
        :math:`\max(0, u)` where the schedule skips inhibition), the inhibitors drawn from the
        storage ``x``'s candidates; with ``keep``, also a copy of :math:`\hat{\mathbf{u}}`."""
        if self.inhibits(last):
            uhat = self.lateral_inhibition(u, beta=p.beta, node_mask=x.candidates,
                                           zero_outside=x.masks.zero_outside)
        else:
            uhat = _clamp_nonneg(u, inplace=True)
        kept = uhat.clone() if keep else None
        return self.firing(uhat, gamma=p.gamma, theta=p.theta), kept

    def respond_compiled(self, u: Tensor, x: DenseActivations, p: StepParams, last: bool,
                         keep: bool = False) -> tuple[Tensor, Tensor | None]:
        """:meth:`respond` as one compiled kernel
        (:func:`~synapse_pt.nn.functional.inhibit_and_fire`) where it computes the same: every
        node a candidate inhibitor (no mask), a step that inhibits, no potential kept; elsewhere
        :meth:`respond`."""
        if x.candidates is not None or not self.inhibits(last) or keep:
            return self.respond(u, x, p, last, keep)
        return inhibit_and_fire(u, self.lateral_inhibition.M, p.beta, p.gamma, p.theta,
                                self.firing.fire_zero), None

    def response_stage(self, a: Tensor, p: StepParams) -> Callable[..., tuple[Tensor,
                                                                              Tensor | None]]:
        """This call's inhibition-and-firing stage: :meth:`respond_compiled` with ``compile``,
        the stock stages and no autograd, else :meth:`respond`."""
        if self.compile and self._stock_stages() and not (_needs_grad(a) or p.needs_grad()):
            return self.respond_compiled
        return self.respond

    def step_params(self, a: Tensor, *, S: Hyper | None = None, delta: Hyper | None = None,
                    beta: Hyper | None = None, gamma: Hyper | None = None,
                    theta: Hyper | None = None) -> StepParams:
        """The call's hyperparameters as tensors on ``a`` (no Python constants in the loop): the
        stored ones where not given; ``beta`` ``None`` without inhibition."""
        B = a.size(1)
        sp, inhibit, firing = self.spreading, self.lateral_inhibition, self.firing
        return StepParams(
            S=_column_param(sp.S if S is None else S, B, a, "S"),
            delta=_column_param(sp.delta if delta is None else delta, B, a, "delta"),
            beta=None if inhibit is None else _column_param(
                inhibit.beta if beta is None else beta, B, a, "beta"),
            gamma=_column_param(firing.gamma if gamma is None else gamma, B, a, "gamma"),
            theta=_column_param(firing.theta if theta is None else theta, B, a, "theta"))

    @staticmethod
    def _activations(a0: Tensor, edge_index: Tensor, normalized: bool) -> Tensor:
        """``a0`` checked (``[N, B]``, ``N`` the normalised adjacency's) and floating."""
        if a0.dim() != 2:
            raise ValueError(f"a0 must have shape [N, B], got {tuple(a0.shape)}")
        if normalized and is_torch_sparse_tensor(edge_index) and edge_index.size(0) != a0.size(0):
            raise ValueError(f"a0 must have shape [N, B] with N = {edge_index.size(0)}, got "
                             f"{tuple(a0.shape)}")
        return a0 if a0.is_floating_point() else a0.float()

    def inhibits(self, last: bool) -> bool:
        """Whether this step runs lateral inhibition (the schedule: every step, or the last)."""
        return self.lateral_inhibition is not None and (
            last or self.inhibition_schedule == "every_step")

    def stock_spreading(self) -> bool:
        """Whether the spreading stage is the stock class (the frontier computes its maths)."""
        return type(self.spreading) is SpreadingActivation

    def _stock_stages(self) -> bool:
        """Whether the stages are the stock classes (a fused kernel computes their maths)."""
        return (self.stock_spreading()
                and type(self.lateral_inhibition) is LateralInhibition
                and type(self.firing) is Firing)

    @property
    def frontier(self) -> str:
        """The engine's mode (``"auto"``, ``"sparse"``, ``"dense"``)."""
        return self.engine.mode

    @property
    def frontier_density(self) -> float:
        return self.engine.density

    def extra_repr(self) -> str:
        return (f"T={self.T}, inhibition={self.lateral_inhibition is not None}, "
                f"schedule={self.inhibition_schedule}, compile={self.compile}, "
                f"engine={self.engine!r}")


# --- functional forms: the layer above, built for one call -----------------------------------


def activation_step(
    adj_t: Tensor,
    a: Tensor,
    *,
    S: Hyper = 0.8,
    delta: Hyper = 0.5,
    beta: Hyper = 0.15,
    M: int = 7,
    gamma: Hyper = 5.0,
    theta: Hyper = 0.5,
    fire_zero: bool = False,
    node_mask: Tensor | None = None,
    inhibitor_mask: Tensor | None = None,
    potential: list[Tensor] | None = None,
) -> Tensor:
    r"""One step :math:`a(t) \to a(t+1)`: :func:`propagate`, :func:`lateral_inhibition`,
    :func:`fire`, with nodes outside ``node_mask`` set to 0 before inhibition and after firing
    (the layer :class:`~synapse_pt.nn.ActivationDynamics` with ``T = 1``: one implementation).

    ``node_mask`` (and ``inhibitor_mask``) must already be bool ``[N, B]`` or ``[N, 1]`` tensors
    on ``a``'s device. ``inhibitor_mask`` further restricts which nodes may be among the top-M
    inhibitors (the "anchors' neighbourhood" reading, SPEC §1.5); ``M = 0`` skips inhibition.
    When ``potential`` is a list, the step appends a copy of :math:`\hat{u}` (the pre-sigmoid
    potential) to it. Returns a new tensor (``a`` is not modified).
    """
    layer = ActivationDynamics(M=M, fire_zero=fire_zero, T=1)
    out = layer(a, adj_t, normalized=True, node_mask=node_mask, inhibitor_mask=inhibitor_mask,
                S=S, delta=delta, beta=beta, gamma=gamma, theta=theta,
                return_potential=potential is not None)
    if potential is None:
        return out
    a_next, uhat = out
    potential.append(uhat)
    return a_next


def activation_dynamics(
    adj_t: Tensor,
    a0: Tensor,
    *,
    S: Hyper = 0.8,
    delta: Hyper = 0.5,
    beta: Hyper = 0.15,
    M: int = 7,
    gamma: Hyper = 5.0,
    theta: Hyper = 0.5,
    T: int = 3,
    fire_zero: bool = False,
    node_mask: Tensor | None = None,
    inhibition: str = "every_step",
    inhibitor_mask: Tensor | None = None,
    return_potential: bool = False,
    compile: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    r""":math:`T` steps of the dynamics from a cached :func:`activation_adjacency`, run by the
    layer :class:`~synapse_pt.nn.ActivationDynamics` (the one implementation of the loop; each
    step is :func:`activation_step`'s maths).

    Same arguments and result as :func:`spreading_activation`, with ``adj_t`` in place of
    ``(edge_index, edge_weight, num_nodes, fan)``, plus the readings of SPEC §1.5:

    Args:
        inhibition (str): ``"every_step"`` (default, the literal reading: inhibit after every
            propagation) or ``"last_step"`` (steps :math:`1 \dots T-1` propagate and fire
            without inhibition; only the last one inhibits).
        inhibitor_mask (BoolTensor, optional): ``[N, B]``: the nodes that may be among a column's
            top-:math:`M` inhibitors (default: every node of the query's graph).
        return_potential (bool): also return :math:`\hat{u}` of the last step, the pre-sigmoid
            potential (``a0`` itself when ``T = 0``).
        compile (bool): inhibition and firing as one compiled kernel where no mask restricts
            the inhibitors (:class:`~synapse_pt.nn.ActivationDynamics` ``compile``).

    Returns:
        Tensor ``[N, B]``: :math:`a(T)`; with ``return_potential`` the pair
        ``(a(T), uhat(T))``.
    """
    if T < 0:
        raise ValueError(f"T must be >= 0, got {T}")
    squeeze = a0.dim() == 1
    a = a0.unsqueeze(1) if squeeze else a0
    if a.dim() != 2 or a.size(0) != adj_t.size(0):
        raise ValueError(
            f"a0 must have shape [N, B] with N = {adj_t.size(0)}, got {tuple(a0.shape)}"
        )
    if T == 0:
        return (a0, a0) if return_potential else a0
    layer = ActivationDynamics(M=M, fire_zero=fire_zero, T=T, inhibition_schedule=inhibition,
                               compile=compile)
    out = layer(a, adj_t, node_mask=node_mask, inhibitor_mask=inhibitor_mask, S=S, delta=delta,
                beta=beta, gamma=gamma, theta=theta, normalized=True,
                return_potential=return_potential)
    if not squeeze:
        return out
    if return_potential:
        return out[0].squeeze(1), out[1].squeeze(1)
    return out.squeeze(1)


def spreading_activation(
    edge_index: Tensor,
    edge_weight: Tensor | None,
    a0: Tensor,
    *,
    num_nodes: int,
    S: Hyper = 0.8,
    delta: Hyper = 0.5,
    beta: Hyper = 0.15,
    M: int = 7,
    gamma: Hyper = 5.0,
    theta: Hyper = 0.5,
    T: int = 3,
    fan: bool = True,
    fire_zero: bool = False,
    node_mask: Tensor | None = None,
    compile: bool = False,
) -> Tensor:
    r"""SYNAPSE spreading activation with lateral inhibition and firing (SPEC §1.2 steps 3-5).

    Runs :math:`T` steps of

    .. math::
        u_i &= (1 - \delta)\, a_i + \sum_{j \in \mathcal{N}_{in}(i)}
               S \, \frac{w_{ji}}{\mathrm{fan}(j)} \, a_j

        \hat{u}_i &= \max\Big(0,\; u_i - \beta \sum_{k \in \text{top-}M(u)}
                     (u_k - u_i)\, [u_k > u_i]\Big)

        a_i &= \sigma\big(\gamma (\hat{u}_i - \theta)\big)\,[\hat{u}_i > 0]

    for all :math:`B` columns at once (sparse matmul; no ``[E, B]`` tensor).

    Args:
        edge_index (LongTensor): ``[2, E]``, source :math:`j` -> target :math:`i`.
        edge_weight (Tensor, optional): ``[E]`` weights :math:`w_{ji}` (``None`` = all 1).
        a0 (Tensor): initial activations ``[N, B]`` (a ``[N]`` vector is one column).
        num_nodes (int): :math:`N`.
        S (float or Tensor): spreading factor, scalar or ``[B]``. (default: ``0.8``)
        delta (float or Tensor): decay; ``0`` = ``no_decay``. (default: ``0.5``)
        beta (float or Tensor): inhibition strength; ``0`` = ``beta0``. (default: ``0.15``)
        M (int): inhibiting top nodes per column, clipped to :math:`N`. (default: ``7``)
        gamma (float or Tensor): firing gain. (default: ``5.0``)
        theta (float or Tensor): firing threshold. (default: ``0.5``)
        T (int): number of steps; ``0`` returns ``a0`` itself. (default: ``3``)
        fan (bool): divide by the source's out-degree; ``False`` = ``no_fan``.
            (default: ``True``)
        fire_zero (bool): literal firing, nodes with :math:`\hat{u}_i = 0` fire
            :math:`\sigma(-\gamma\theta)`. (default: ``False``)
        node_mask (BoolTensor, optional): ``[N, B]`` or ``[N, 1]``: the nodes of each query's
            own graph. Outside it :math:`u` and :math:`a` are kept at 0 after every step and
            nodes do not take part in inhibition (needed with ``fire_zero=True`` when many
            conversations are batched in one graph). ``a0`` is used as given.
        compile (bool): inhibition and firing as one compiled kernel where no node mask is
            given (:class:`~synapse_pt.nn.ActivationDynamics` ``compile``; the first call
            compiles). (default: ``False``)

    Returns:
        Tensor ``[N, B]``: :math:`a(T)`.
    """
    if T == 0:
        return a0
    squeeze = a0.dim() == 1
    a = a0.unsqueeze(1) if squeeze else a0
    if a.dim() != 2 or a.size(0) != num_nodes:
        raise ValueError(f"a0 must have shape [N, B] with N = {num_nodes}, got "
                         f"{tuple(a0.shape)}")
    # The layer builds the sparse adjacency only if it propagates densely: on a sparse frontier
    # it reads the edge list directly.
    layer = ActivationDynamics(M=M, T=T, fan=fan, fire_zero=fire_zero, compile=compile)
    out = layer(a, edge_index, edge_weight, node_mask=node_mask, S=S, delta=delta, beta=beta,
                gamma=gamma, theta=theta)
    return out.squeeze(1) if squeeze else out
