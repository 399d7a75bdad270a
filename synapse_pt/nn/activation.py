r"""Module form of the SYNAPSE activation dynamics (SPEC §1.2 steps 3-5, ablations §1.3).

:class:`SpreadingActivation` is a PyG :class:`~torch_geometric.nn.conv.MessagePassing` layer (one
propagation step), :class:`LateralInhibition` and :class:`Firing` are the two point-wise stages,
and :class:`ActivationDynamics` composes :math:`T` steps with every ablation switch as a
constructor argument. The stages compute with the functions of :mod:`synapse_pt.nn.functional`
(propagation, inhibition, firing: the maths, once), and :class:`ActivationDynamics` is the one
implementation of the loop: SYNAPSE retrieval, the batched sweep,
:func:`~synapse_pt.nn.functional.spreading_activation`,
:func:`~synapse_pt.nn.functional.activation_dynamics` and
:func:`~synapse_pt.nn.functional.activation_step` all run it.

Hyperparameters are stored as float64 buffers (exactly the Python value; cast to the activations'
dtype at use, as the functional form does) and can be overridden per call, per column, by passing
a ``[B]`` tensor to ``forward``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.utils import is_torch_sparse_tensor

from synapse_pt.nn.functional import (
    INHIBITION_SCHEDULES,
    FrontierEdges,
    Hyper,
    OutEdges,
    _apply_node_mask,
    _check_edge_index,
    _check_node_mask,
    _clamp_nonneg,
    _column_param,
    _needs_grad,
    _retain_and_spread_,
    activation_adjacency,
    fire,
    frontier_edges,
    frontier_messages,
    gather_mask,
    inhibit_and_fire,
    lateral_inhibition,
    normalized_edge_weight,
    out_edges,
    spmm_sum,
)

__all__ = ["ActivationDynamics", "Firing", "LateralInhibition", "SpreadingActivation"]

#: How :class:`ActivationDynamics` propagates: ``"auto"`` (the frontier while it is sparse),
#: ``"sparse"`` (always the frontier; an error where it is not exact), ``"dense"``.
FRONTIER_MODES = ("auto", "sparse", "dense")


def _hyper_buffer(value: Hyper) -> Tensor:
    # float64 holds the Python float exactly, so casting at use matches the functional form.
    return torch.as_tensor(value, dtype=torch.float64).clone()


def _scatter_packed(x: Tensor, packed_nodes: Tensor, num_nodes: int) -> Tensor:
    """A packed ``[L, B]`` frontier matrix back to dense ``[N, B]`` (zeros elsewhere)."""
    out = x.new_zeros(num_nodes, x.size(1))
    slot, col = (packed_nodes >= 0).nonzero(as_tuple=True)
    out[packed_nodes[slot, col], col] = x[slot, col]
    return out


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


# Columns of a(0) whose frontier bound ActivationDynamics checks before listing every non-zero
# cell: in a sweep's dense LoCoMo blocks ([~1,300, ~3,000]) the first columns already overflow,
# and the index lists of the whole block (a.nonzero) cost 4 ms per block for nothing. Reading 8
# strided columns costs per cell about 8x what the full scan does (10^6 x 64: 63 ms against
# 151 ms), so blocks narrower than 64 x 8 columns, where the frontier is the likely path, are
# not probed.
_PROBE_COLUMNS, _PROBE_MIN_COLUMNS = 8, 512


def _nonzero_cells(a: Tensor) -> tuple[Tensor, Tensor]:
    """``a.nonzero(as_tuple=True)`` of a dense ``[N, B]`` matrix, the same pairs in the same
    (row-major) order, listed from the rows that hold a non-zero only.

    ``nonzero`` reads the whole matrix twice (a count, then the list) through a slow
    element-by-element path: 0.16 s for a 10^6 x 64 a(0), against 0.02 s for a vectorised row
    reduction on the same EPYC. Two reductions (``amax`` and ``amin``: a row is silent when both
    are 0; NaN propagates and counts as non-zero, as in ``nonzero``) find the rows, and
    ``nonzero`` runs on those rows alone. Where at least half of the rows hold a non-zero
    (LoCoMo's small blocks) it runs on ``a`` as it is.
    """
    if a.dim() != 2 or a.numel() == 0:
        return a.nonzero(as_tuple=True)
    rows = ((a.amax(1) != 0) | (a.amin(1) != 0)).nonzero().flatten()
    if 2 * rows.numel() >= a.size(0):
        return a.nonzero(as_tuple=True)
    r, cols = a.index_select(0, rows).nonzero(as_tuple=True)
    return rows[r], cols


def _column_bound(nodes: Tensor, cols: Tensor, selected: FrontierEdges, num_cols: int,
                  dtype: torch.dtype) -> float:
    r"""The largest packed frontier of one step, :math:`\max_b \sum_{j \in \mathcal{A}_b}
    (1 + \mathrm{fan}(j))` rows, from the active cells ``(nodes, cols)`` and their out-edges
    ``selected`` (:func:`~synapse_pt.nn.functional.frontier_edges`; 0 when none)."""
    degree = selected.degree[torch.searchsorted(selected.nodes, nodes)]
    bound = torch.bincount(cols, weights=(degree + 1).to(dtype), minlength=num_cols)
    return float(bound.max()) if bound.numel() else 0.0


def _bound_exceeds(a: Tensor, graph: OutEdges, num_cols: int, limit: float) -> bool:
    """The step's check ``bound * B > limit`` over some columns ``a`` ``[N, b]`` of the
    ``B``: the same sums and comparison, so a True here is a True there."""
    nodes, cols = a.nonzero(as_tuple=True)
    selected = frontier_edges(graph, nodes, a.size(0))
    return _column_bound(nodes, cols, selected, a.size(1), a.dtype) * num_cols > limit


class ActivationDynamics(nn.Module):
    r"""The full SYNAPSE dynamics: :math:`T` steps of spreading, inhibition and firing.

    .. math::
        \mathbf{a}(t+1) = \mathrm{Fire}_{\gamma,\theta}\Big(\mathrm{Inhibit}_{M,\beta}\big(
        (1 - \delta)\,\mathbf{a}(t) + S\,\mathbf{P}\,\mathbf{a}(t)\big)\Big),
        \qquad P_{ij} = \frac{w_{ji}}{\mathrm{fan}(j)}

    returning :math:`\mathbf{a}(T)`. This is the one implementation of the loop: retrieval, the
    batched sweep and :func:`~synapse_pt.nn.functional.spreading_activation` /
    :func:`~synapse_pt.nn.functional.activation_dynamics` all run it, so a researcher who
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
            with non-zero activation and their out-neighbours, see
            :func:`~synapse_pt.nn.functional.frontier_messages`) while it holds at most
            ``frontier_density`` of the ``N x B`` cells, then densely; ``"sparse"``: always the
            frontier; ``"dense"``: never. On a sparse adjacency a step reads only its active
            nodes' out-edges (the entries sorted by source, built on the first call and kept
            with the adjacency: :func:`~synapse_pt.nn.functional.out_edges`); on an edge list,
            one pass over the sources per step. The frontier path is exact (same result up to
            float summation order) when silent nodes stay silent: ``fire_zero=False``,
            :math:`\beta \ge 0`, no autograd. Where only firing or inhibition reaches every
            node (``fire_zero=True``, :math:`\beta < 0`), ``"auto"`` propagates the first
            step on :math:`\mathbf{a}(0)`'s frontier (a sparse :math:`\mathbf{a}(0)`, one sparse
            product fewer) and runs the rest densely; with autograd or a swapped spreading
            stage, every step is dense. (default: ``"auto"``)
        frontier_density (float): the largest frontier, as a fraction of the :math:`N \times B`
            cells, that ``"auto"`` propagates sparsely. Measured on LoCoMo-10 (1,100-node
            graphs, a first-step frontier of 5-35 % of them) the dense step is cheaper there;
            from 10^4 nodes on the frontier covers about 1 % and wins by 2-16x
            (experiments/bench_retrieval.md, bench_scaling.md). (default: ``0.05``)
        compile (bool): run a dense step's inhibition and firing as one compiled kernel
            (:func:`~synapse_pt.nn.functional.inhibit_and_fire`, ``torch.compile``) where
            every node is a candidate inhibitor (no node or inhibitor mask), the stages are
            the stock ones and no autograd runs; elsewhere the eager stages run. Same result;
            the first call compiles (seconds). (default: ``False``)

    Shapes:
        - **input:** :math:`\mathbf{a}(0)` :math:`(N, B)`, edge indices :math:`(2, E)` or sparse
          :math:`(N, N)` adjacency (see :class:`SpreadingActivation`; with ``normalized=True`` the
          fan-normalised ``adj_t`` of :func:`~synapse_pt.nn.functional.activation_adjacency`,
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
    ) -> None:
        super().__init__()
        if frontier not in FRONTIER_MODES:
            raise ValueError(f"frontier must be one of {FRONTIER_MODES}, got {frontier!r}")
        if T < 0:
            raise ValueError(f"T must be >= 0, got {T}")
        if inhibition_schedule not in INHIBITION_SCHEDULES:
            raise ValueError(f"inhibition must be one of {INHIBITION_SCHEDULES}, got "
                             f"{inhibition_schedule!r}")
        self.spreading = SpreadingActivation(S, delta, fan=fan, cached=cached, fused=fused)
        # u is a fresh tensor every step: inhibition and firing may overwrite it.
        self.lateral_inhibition = LateralInhibition(M, beta, inplace=True) if inhibition else None
        self.firing = Firing(gamma, theta, fire_zero=fire_zero, inplace=True)
        self.T = int(T)
        self.inhibition_schedule = inhibition_schedule
        self.frontier = frontier
        self.frontier_density = float(frontier_density)
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
        r"""Run the dynamics from ``a0`` ``[N, B]``; keyword hyperparameters override the stored
        ones for this call (scalar or ``[B]``, one value per column). Nodes outside
        ``node_mask`` are kept at 0 after every step and never inhibit (see
        :func:`~synapse_pt.nn.functional.spreading_activation`). ``normalized=True``: the graph
        is already the normalised sparse ``adj_t`` (built once per graph, reused by every batch
        of queries)."""
        if self.T == 0:
            return (a0, a0) if return_potential else a0
        if a0.dim() != 2:
            raise ValueError(f"a0 must have shape [N, B], got {tuple(a0.shape)}")
        a = a0 if a0.is_floating_point() else a0.float()
        sp = self.spreading
        if normalized and is_torch_sparse_tensor(edge_index) and edge_index.size(0) != a.size(0):
            raise ValueError(f"a0 must have shape [N, B] with N = {edge_index.size(0)}, got "
                             f"{tuple(a0.shape)}")
        node_mask = _check_node_mask(node_mask, a)
        inhibitor_mask = _check_node_mask(inhibitor_mask, a)
        candidates = node_mask
        if inhibitor_mask is not None:
            candidates = inhibitor_mask if node_mask is None else node_mask & inhibitor_mask
        B = a.size(1)
        # convert once: the hyperparameters stay tensors (no Python constants in the loop)
        S_t = _column_param(sp.S if S is None else S, B, a, "S")
        delta_t = _column_param(sp.delta if delta is None else delta, B, a, "delta")
        inhibit = self.lateral_inhibition
        beta_t = None if inhibit is None else _column_param(
            inhibit.beta if beta is None else beta, B, a, "beta")
        gamma_t = _column_param(self.firing.gamma if gamma is None else gamma, B, a, "gamma")
        theta_t = _column_param(self.firing.theta if theta is None else theta, B, a, "theta")
        # u is zeroed outside node_mask before inhibition, so the candidates hold every non-zero
        # row unless an inhibitor mask narrows them: then inhibition may take its one-pass form
        # (the last entry of ``hyper``, read by both step paths)
        hyper = (S_t, delta_t, beta_t, gamma_t, theta_t, inhibitor_mask is None)
        done, potential, first_u = 0, None, None
        if self._frontier_applies(a, beta_t):
            edges = self._edge_list(a, edge_index, edge_weight, normalized)
            a, done, potential = self._frontier_steps(
                a, edges, node_mask, candidates, hyper, return_potential)
            if done == self.T:  # the frontier stayed sparse
                return (a, potential) if return_potential else a
            # it grew past frontier_density: continue densely from a(done)
        elif self.frontier == "auto" and self._spread_blocker(a) is None:
            # only inhibition or firing needs every node (fire_zero, beta < 0): the first
            # step's propagation still reads a(0)'s active cells alone
            first_u = self._sparse_first_potential(
                a, self._edge_list(a, edge_index, edge_weight, normalized), S_t, delta_t)
        if normalized:
            graph, weight = edge_index, edge_weight
        else:
            graph, weight = sp.normalize(edge_index, edge_weight, a.size(0), a.dtype)
        outside = None if node_mask is None else ~node_mask
        fused = self.compile and candidates is None and self._stock_stages() and not _needs_grad(
            a, *hyper[:5])
        for t in range(done, self.T):
            last = t == self.T - 1
            u, first_u = first_u, None
            if u is None:
                u = self.spreading(a, graph, weight, S=S_t, delta=delta_t, normalized=True)
            if fused and not (last and return_potential) and self._inhibits(last):
                a = inhibit_and_fire(u, self.lateral_inhibition.M, beta_t, gamma_t, theta_t,
                                     self.firing.fire_zero)
                continue
            uhat = self._potential(u, outside, candidates, hyper, last)
            if last and return_potential:
                potential = uhat.clone()
            a = _apply_node_mask(self.firing(uhat, gamma=gamma_t, theta=theta_t), outside)
        return (a, potential) if return_potential else a

    def _potential(self, u: Tensor, outside: Tensor | None, candidates: Tensor | None,
                   hyper: tuple, last: bool) -> Tensor:
        r""":math:`\hat{u}` of one step from its propagation ``u``: the node mask, inhibition
        (or :math:`\max(0, u)` where the schedule skips it)."""
        beta_t, zero_outside = hyper[2], hyper[5]
        u = _apply_node_mask(u, outside)
        if self._inhibits(last):
            return self.lateral_inhibition(u, beta=beta_t, node_mask=candidates,
                                           zero_outside=zero_outside)
        return _clamp_nonneg(u, inplace=True)

    def _inhibits(self, last: bool) -> bool:
        """Whether this step runs lateral inhibition (the schedule: every step, or the last)."""
        return self.lateral_inhibition is not None and (
            last or self.inhibition_schedule == "every_step")

    def _stock_stages(self) -> bool:
        """Whether the stages are the stock classes (a fused kernel computes their maths)."""
        return (type(self.spreading) is SpreadingActivation
                and type(self.lateral_inhibition) is LateralInhibition
                and type(self.firing) is Firing)

    def _edge_list(self, a: Tensor, edge_index: Tensor, edge_weight: Tensor | None,
                   normalized: bool) -> OutEdges:
        """The graph's edges for the frontier path, without building the sparse adjacency when
        an edge list is given: a sparse (normalised) adjacency gives its entries sorted by
        source, built once and kept with it (:func:`~synapse_pt.nn.functional.out_edges`); an
        edge list is read as it is, each step normalising only its own edges' weights."""
        sp = self.spreading
        if normalized or is_torch_sparse_tensor(edge_index) or sp.cached:
            if not normalized:
                edge_index, edge_weight = sp.normalize(edge_index, edge_weight, a.size(0),
                                                       a.dtype)
            if edge_weight is None:
                return out_edges(edge_index)
            return OutEdges(edge_index[0], edge_index[1], edge_weight.to(a.dtype))
        _check_edge_index(edge_index, a.size(0))
        if edge_weight is not None:
            edge_weight = edge_weight.to(a.dtype)
        return OutEdges(edge_index[0], edge_index[1], edge_weight, fan=sp.fan)

    def _spread_blocker(self, a: Tensor) -> str | None:
        """Why the frontier cannot compute a step's propagation (``None``: it can)."""
        if type(self.spreading) is not SpreadingActivation:
            return "the spreading stage is swapped (the frontier computes the stock one)"
        if _needs_grad(a):
            return "autograd needs the dense graph"
        return None

    def _frontier_applies(self, a: Tensor, beta_t: Tensor | None) -> bool:
        """Whether the frontier path gives the dense result exactly (see ``frontier``)."""
        if self.frontier == "dense":
            return False
        why = self._spread_blocker(a)
        if why is None and self.firing.fire_zero:
            why = "fire_zero=True makes every node fire"
        elif why is None and beta_t is not None and bool((beta_t < 0).any()):
            why = "beta < 0 excites silent nodes"
        if why is not None and self.frontier == "sparse":
            raise ValueError(f"frontier='sparse' is not exact here: {why}")
        return why is None

    def _frontier_steps(self, a: Tensor, edges: OutEdges,
                        node_mask: Tensor | None, candidates: Tensor | None, hyper: tuple,
                        return_potential: bool) -> tuple[Tensor, int, Tensor | None]:
        r"""Steps on each column's active frontier only (see
        :func:`~synapse_pt.nn.functional.frontier_messages`).

        Inhibition and firing run as in the dense loop, on the packed ``[L, B]`` frontier: a
        node outside its column's frontier has :math:`u_i = 0`, hence :math:`\hat{u}_i = 0`
        (for :math:`\beta \ge 0`) and :math:`a_i = 0` (silent nodes do not fire), and its zero
        inhibits nobody (nor does a padding slot). Stops early when the frontier holds more
        than ``frontier_density`` of the ``N x B`` cells (``"auto"``). Returns ``a`` as a dense
        ``[N, B]`` tensor (the input itself when it stops before the first step), the steps
        done and the potential.
        """
        N, B = a.shape
        cells = self._active_cells(a, edges)
        if cells is None:
            return a, 0, None  # a few columns already overflow: no index lists for all of a
        nodes, cols = cells  # sorted by node
        values = a[nodes, cols]
        S_t, delta_t, beta_t, gamma_t, theta_t, zero_outside = hyper
        potential = None
        done = 0
        for t in range(self.T):
            step = self._frontier_potential(nodes, cols, values, edges, N, B, S_t, delta_t)
            if step is None:
                break
            last = t == self.T - 1
            packed, u = step
            outside = ~gather_mask(node_mask, packed) if node_mask is not None else packed < 0
            u = _apply_node_mask(u, outside)
            if self._inhibits(last):
                cand = gather_mask(candidates, packed) if candidates is not None else ~outside
                uhat = self.lateral_inhibition(u, beta=beta_t, node_mask=cand,
                                               zero_outside=zero_outside)
            else:
                uhat = _clamp_nonneg(u, inplace=True)
            if last and return_potential:
                potential = _scatter_packed(uhat, packed, N)
            a_p = _apply_node_mask(self.firing(uhat, gamma=gamma_t, theta=theta_t), outside)
            slot, cols = a_p.nonzero(as_tuple=True)
            nodes, values = packed[slot, cols], a_p[slot, cols]
            order = torch.argsort(nodes, stable=True)
            nodes, cols, values = nodes[order], cols[order], values[order]
            done = t + 1
        if done == 0 < self.T:  # bailed out before the first step: the caller goes on from a(0)
            return a, 0, None
        out = a.new_zeros(N, B)
        out[nodes, cols] = values
        return out, done, potential

    def _limit(self, N: int, B: int) -> float:
        """The most packed cells a frontier step of ``N x B`` may hold (``"auto"``)."""
        return self.frontier_density * N * B if self.frontier == "auto" else math.inf

    def _active_cells(self, a: Tensor, edges: OutEdges) -> tuple[Tensor, Tensor] | None:
        """``a``'s non-zero cells ``(nodes, cols)``, sorted by node, or ``None`` where a few
        probed columns of a wide block already show the first step's frontier too large."""
        N, B = a.shape
        if self.frontier == "auto" and B >= _PROBE_MIN_COLUMNS and _bound_exceeds(
                a[:, :_PROBE_COLUMNS], edges, B, self._limit(N, B)):
            return None
        return _nonzero_cells(a)

    def _frontier_potential(self, nodes: Tensor, cols: Tensor, values: Tensor,
                            edges: OutEdges, N: int, B: int, S_t: Tensor,
                            delta_t: Tensor) -> tuple[Tensor, Tensor] | None:
        r"""One step's propagation on the frontier of the active cells ``(nodes, cols)``
        (values ``values``): the packed nodes and :math:`u = S\,\mathrm{spread} + (1 -
        \delta)\,a`, each ``[L, B]``; ``None`` where the frontier would hold more than
        ``frontier_density`` of the cells."""
        limit = self._limit(N, B)
        selected = frontier_edges(edges, nodes, N)
        if limit < math.inf and _column_bound(nodes, cols, selected, B, values.dtype) * B > limit:
            return None
        packed, spread, a_p = frontier_messages(
            edges.source, edges.target, edges.weight, nodes, cols, values, N, B,
            ptr=edges.ptr, fan=edges.fan, selected=selected)
        if packed.numel() > limit:
            return None
        return packed, _retain_and_spread_(spread, a_p, S_t, delta_t)

    def _sparse_first_potential(self, a: Tensor, edges: OutEdges, S_t: Tensor,
                                delta_t: Tensor) -> Tensor | None:
        """The first step's propagation ``u`` ``[N, B]`` computed on ``a``'s frontier (zeros
        off it), for a run whose later steps are dense; ``None`` where it is too large."""
        cells = self._active_cells(a, edges)
        if cells is None:
            return None
        nodes, cols = cells
        N, B = a.shape
        step = self._frontier_potential(nodes, cols, a[nodes, cols], edges, N, B, S_t, delta_t)
        if step is None:
            return None
        packed, u = step
        return _scatter_packed(u, packed, N)

    def extra_repr(self) -> str:
        return (f"T={self.T}, inhibition={self.lateral_inhibition is not None}, "
                f"schedule={self.inhibition_schedule}, compile={self.compile}")
