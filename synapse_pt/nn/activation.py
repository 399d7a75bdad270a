r"""SYNAPSE spreading activation (SPEC §1.2 steps 3-5, ablations §1.3, readings §1.5): one layer.

Activations are a matrix :math:`\mathbf{A} \in \mathbb{R}^{N \times B}`: one row per memory node,
one column per query (or per ``(query, configuration)`` pair in a sweep). Edges run from a source
:math:`j` to a target :math:`i` (``edge_index = [j; i]``, PyG's ``source_to_target`` flow).
:class:`ActivationDynamics` runs :math:`T` steps of

.. math::
    u_i &= (1 - \delta)\, a_i + S \sum_{j \in \mathcal{N}_{in}(i)}
           \frac{w_{ji}}{\mathrm{fan}(j)}\, a_j
           &\qquad \text{(spreading, } \mathrm{fan}(j) = \deg_{out}(j))

    \hat{u}_i &= \max\Big(0,\; u_i - \beta \sum_{k \in \text{top-}M(u)}
                 (u_k - u_i)\, [u_k > u_i]\Big)
           &\qquad \text{(lateral inhibition)}

    a_i &= \sigma\big(\gamma (\hat{u}_i - \theta)\big)\,[\hat{u}_i > 0]
           &\qquad \text{(firing)}

from :math:`\mathbf{a}(0)` and returns :math:`\mathbf{a}(T)`. The indicator :math:`[\hat{u}_i > 0]`
is our reading of step 5 (a node with no input stays silent; ``fire_zero=True`` drops it, the
literal formula). :math:`(u_k - u_i)[u_k > u_i] = \mathrm{relu}(u_k - u_i)`, so ties inhibit
nothing and which of several tied values is in the top :math:`M` does not matter.

- :math:`S, \delta, \beta, \gamma, \theta` are Python floats or ``[B]`` tensors, one value per
  column: a sweep runs thousands of configurations in one pass. :math:`M` and :math:`T` are ints.
- ``node_mask`` (``[N, B]`` or ``[N, 1]``): each column's own graph; the other nodes are held at 0
  in :math:`u` and :math:`a` and never inhibit. ``inhibitor_mask``: the nodes that may be among a
  column's top-:math:`M` (the ``inhibition_scope`` reading, SPEC §1.5).
- ``inhibition="last_step"`` (SPEC §1.5): steps :math:`1 \dots T-1` skip inhibition,
  :math:`\hat{u} = \max(0, u)`. Ablations: ``fan=False``, :math:`\delta = 0`, :math:`\beta = 0`
  (or :math:`M = 0`), ``T=0`` (returns :math:`\mathbf{a}(0)`).

How it computes, the floats unchanged:

- **One-pass inhibition.** With a column's top values :math:`v_1 \ge \dots \ge v_M`, every row
  below them has :math:`u_k \ge u_i` for all :math:`M` inhibitors, so
  :math:`\hat{u}_i = \max(0, (1 + \beta M)\, u_i - \beta \sum_k v_k)`: one pass instead of
  :math:`M`; the :math:`M` top rows get the exact sum over the ``[M, M, B]`` differences of their
  values. That holds where every row is a candidate, or the rows outside the candidates hold 0 and
  :math:`v_M \ge 0`; elsewhere (a narrower inhibitor mask, autograd) the sum loops over the top
  values. Never an ``[N, B, M]`` tensor.
- **Row blocks.** On the CPU the elementwise chains run in place over cache-sized row blocks
  (:func:`~synapse_pt.nn.sparse.row_blocks`), no ``[N, B]`` temporaries; under autograd they run
  out of place.
- **Storage.** Where :math:`\mathbf{a}(t)` lives between steps, a dense ``[N, B]`` matrix or each
  column's packed active frontier, is :mod:`synapse_pt.nn.frontier`'s business: it hands the
  loop :math:`\mathbf{P}\mathbf{a}` and :math:`\mathbf{a}` over this step's rows (every node, or
  the frontier) and the masks in the same layout; the loop below is the same for both.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from .frontier import FRONTIER_MODES, GraphInput, NodeMasks, activation_storage
from .sparse import column_topk, needs_grad, row_blocks

__all__ = ["INHIBITION_SCHEDULES", "ActivationDynamics", "Hyperparams", "column_param", "fire",
           "lateral_inhibition"]

Hyper = float | Tensor

INHIBITION_SCHEDULES = ("every_step", "last_step")


class Hyperparams(NamedTuple):
    r"""The continuous hyperparameters of one call of :class:`ActivationDynamics`:
    :math:`S, \delta, \beta, \gamma, \theta` (module docstring), each a Python float or a
    ``[B]`` tensor, one value per column."""

    S: Hyper
    delta: Hyper
    beta: Hyper
    gamma: Hyper
    theta: Hyper


def column_param(value: Hyper, num_columns: int, like: Tensor, name: str) -> Tensor:
    """A hyperparameter as a tensor in ``like``'s dtype and device that broadcasts over
    ``[N, B]``: 0-d for a scalar, else ``[B]``."""
    t = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    if t.dim() == 0:
        return t
    if t.numel() == 1:
        return t.reshape(())
    try:
        return torch.broadcast_to(t.reshape(-1) if t.dim() > 1 else t, (num_columns,))
    except RuntimeError as e:
        raise ValueError(
            f"hyperparameter {name!r} has shape {tuple(t.shape)}; expected a float or a tensor "
            f"broadcastable to [B] = [{num_columns}]") from e


def _zero(x: Tensor, outside: Tensor | None) -> Tensor:
    """``x`` with the cells ``outside`` set to 0 (in place unless autograd needs ``x``)."""
    if outside is None:
        return x
    return x.masked_fill(outside, 0.0) if needs_grad(x) else x.masked_fill_(outside, 0.0)


def _clamp_nonneg(u: Tensor, inplace: bool) -> Tensor:
    return u.clamp_(min=0) if inplace and not needs_grad(u) else u.clamp(min=0)


def lateral_inhibition(u: Tensor, M: int, beta: Hyper, *, candidates: Tensor | None = None,
                       zero_outside: bool = False, inplace: bool = False) -> Tensor:
    r""":math:`\hat{u}` of ``u`` ``[N, B]``: inhibition by the top-:math:`M` candidates of each
    column (module docstring). ``M`` is clipped to :math:`N`; ``M = 0`` or a float ``beta = 0``
    gives :math:`\max(0, u)`. ``candidates`` (bool ``[N, B]`` or ``[N, 1]``): the nodes that may
    inhibit (default: all). ``zero_outside``: ``u`` is 0 at every row outside ``candidates``
    (lets the one-pass form run). ``inplace``: write :math:`\hat{u}` into ``u``."""
    B = u.size(1)
    M = min(int(M), u.size(0))
    if M <= 0 or (isinstance(beta, (int, float)) and beta == 0):
        return _clamp_nonneg(u, inplace)  # equal to the general path with beta = 0
    beta_t = column_param(beta, B, u, "beta")
    cand = u if candidates is None else u.masked_fill(~candidates, float("-inf"))
    # relu(-inf - u) = 0 for finite u: a masked-out candidate inhibits nobody.
    grad = needs_grad(u, beta_t)
    if (candidates is None or zero_outside) and not grad:
        top, rows = column_topk(cand, M)  # [M, B], descending
        if candidates is None or bool((top[-1] >= 0).all()):  # the one-pass form
            out = u if inplace else u.clone()
            gain, offset = 1.0 + beta_t * M, beta_t * top.sum(dim=0)
            for blk in row_blocks(out):
                out[blk].mul_(gain).sub_(offset).clamp_(min=0)
            pressure = (top.unsqueeze(0) - top.unsqueeze(1)).clamp_(min=0).sum(dim=1)  # [M, B]
            return out.scatter_(0, rows, (top - beta_t * pressure).clamp_(min=0))
    else:
        top = column_topk(cand, M, sorted=False)[0]  # [M, B]
    if grad:
        acc = torch.zeros_like(u)
        for v_k in top:
            acc = acc + torch.relu(v_k - u)
        return torch.clamp(u - beta_t * acc, min=0)
    out = u if inplace else u.clone()
    blocks = row_blocks(out)
    acc = out.new_empty(min(blocks[0].stop - blocks[0].start, out.size(0)), B)
    tmp = torch.empty_like(acc)
    for blk in blocks:
        u_b = out[blk]
        acc_b, tmp_b = acc[: u_b.size(0)], tmp[: u_b.size(0)]
        acc_b.zero_()
        for v_k in top:
            torch.sub(v_k, u_b, out=tmp_b)
            acc_b.add_(tmp_b.clamp_(min=0))
        u_b.sub_(acc_b.mul_(beta_t)).clamp_(min=0)
    return out


def fire(uhat: Tensor, gamma: Hyper, theta: Hyper, fire_zero: bool, *,
         inplace: bool = False) -> Tensor:
    r""":math:`a = \sigma(\gamma (\hat{u} - \theta))\,[\hat{u} > 0]` of ``uhat`` ``[N, B]``
    (without the indicator where ``fire_zero``); ``inplace``: written into ``uhat``."""
    B = uhat.size(1)
    gamma_t = column_param(gamma, B, uhat, "gamma")
    theta_t = column_param(theta, B, uhat, "theta")
    if needs_grad(uhat, gamma_t, theta_t):
        a = torch.sigmoid(gamma_t * (uhat - theta_t))
        return a if fire_zero else a.masked_fill(uhat <= 0, 0.0)
    out = uhat if inplace else torch.empty_like(uhat)
    blocks = row_blocks(uhat)
    # [uhat > 0] as a float factor (1 or 0): a float pass costs about a third of a boolean
    # comparison and masked_fill here, and sigmoid(.) * 1 or * 0 are the floats masked_fill
    # keeps or writes (sigmoid is never negative; NaN stays NaN either way)
    rows = min(blocks[0].stop, uhat.size(0)) if blocks else 0
    gate = None if fire_zero else uhat.new_empty(rows, B)
    for blk in blocks:
        x_b, o_b = uhat[blk], out[blk]
        if gate is not None:
            g_b = torch.gt(x_b, 0, out=gate[: x_b.size(0)])
        torch.sub(x_b, theta_t, out=o_b).mul_(gamma_t).sigmoid_()
        if gate is not None:
            o_b.mul_(g_b)
    return out


class ActivationDynamics(nn.Module):
    r"""The SYNAPSE dynamics: :math:`T` steps of spreading, lateral inhibition and firing (the
    equations in this module's docstring).

    The structure of the dynamics is the layer's; the continuous hyperparameters come with each
    call as one :class:`Hyperparams` (scalar, or ``[B]``: one value per column). No argument
    has a default: the values live in the config (``configs/memory/synapse.yaml``), and
    :func:`~synapse_pt.retrieval.spreading.activation_layer` builds the layer from them.

    Args:
        M (int): inhibiting top nodes per column (clipped to :math:`N`; ``0``: no inhibition).
        T (int): steps; ``0`` returns :math:`\mathbf{a}(0)`.
        fan (bool): divide by the source's out-degree (``False``: ``no_fan``); read where the
            layer normalises the graph itself (not with ``normalized=True``).
        fire_zero (bool): drop the firing indicator (silent nodes fire
            :math:`\sigma(-\gamma\theta)`).
        inhibition (str): ``"every_step"`` or ``"last_step"`` (SPEC §1.5).
        frontier (str): how :math:`\mathbf{a}(t)` is stored (:mod:`synapse_pt.nn.frontier`):
            ``"auto"`` (each column's active frontier while it holds at most
            ``frontier_density`` of the :math:`N \times B` cells, then dense), ``"sparse"``
            (always; an error where not exact), ``"dense"``. Same result up to float summation
            order.
        frontier_density (float): the largest frontier ``"auto"`` keeps sparse, as a share of
            the :math:`N \times B` cells.

    Shapes:
        - **input:** :math:`\mathbf{a}(0)` :math:`(N, B)`; edge indices :math:`(2, E)` (source,
          target) with weights :math:`(E)` *(optional)*, or a sparse :math:`(N, N)` ``adj_t``
          (row = target; with ``normalized=True`` the fan-normalised one of
          :func:`~synapse_pt.nn.sparse.activation_adjacency`, built once per graph); node and
          inhibitor masks :math:`(N, B)` or :math:`(N, 1)` *(optional)*
        - **output:** :math:`\mathbf{a}(T)` :math:`(N, B)`; with ``return_potential`` also the
          last step's :math:`\hat{\mathbf{u}}`
    """

    def __init__(self, *, M: int, T: int, fan: bool, fire_zero: bool, inhibition: str,
                 frontier: str, frontier_density: float) -> None:
        super().__init__()
        if T < 0:
            raise ValueError(f"T must be >= 0, got {T}")
        if inhibition not in INHIBITION_SCHEDULES:
            raise ValueError(f"inhibition must be one of {INHIBITION_SCHEDULES}, got "
                             f"{inhibition!r}")
        if frontier not in FRONTIER_MODES:
            raise ValueError(f"frontier must be one of {FRONTIER_MODES}, got {frontier!r}")
        self.M, self.T, self.fan, self.fire_zero = int(M), int(T), bool(fan), bool(fire_zero)
        self.inhibition, self.frontier = inhibition, frontier
        self.frontier_density = float(frontier_density)

    def forward(self, a0: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None, *,
                hyper: Hyperparams, node_mask: Tensor | None = None,
                inhibitor_mask: Tensor | None = None, normalized: bool = False,
                return_potential: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        r""":math:`\mathbf{a}(T)` from ``a0`` under ``hyper`` (and the last
        :math:`\hat{\mathbf{u}}` with ``return_potential``); ``normalized``: the graph is
        already the fan-normalised ``adj_t``."""
        if self.T == 0:
            return (a0, a0) if return_potential else a0
        if a0.dim() != 2:
            raise ValueError(f"a0 must have shape [N, B], got {tuple(a0.shape)}")
        if normalized and edge_index.layout != torch.strided and edge_index.size(0) != a0.size(0):
            raise ValueError(f"a0 must have shape [N, B] with N = {edge_index.size(0)}, got "
                             f"{tuple(a0.shape)}")
        a = a0 if a0.is_floating_point() else a0.float()
        B = a.size(1)
        S, delta, beta, gamma, theta = (column_param(v, B, a, name)
                                        for name, v in hyper._asdict().items())
        # the frontier storage is exact where silent nodes stay silent; else why not
        loud = (None if self.frontier == "dense"
                else "fire_zero=True makes every node fire" if self.fire_zero
                else "beta < 0 excites silent nodes" if bool((beta < 0).any()) else None)
        x = activation_storage(a, GraphInput(edge_index, edge_weight, normalized, self.fan),
                               NodeMasks.of(a, node_mask, inhibitor_mask), mode=self.frontier,
                               density=self.frontier_density, inexact=loud)
        retain = 1.0 - delta
        potential = None
        for t in range(self.T):
            last = t == self.T - 1
            # spread: u = S P a + (1 - delta) a, over this step's rows, 0 outside the node mask
            u, a = x.neighbours()
            if needs_grad(u, a, S, delta):
                u = S * u + a * retain
            else:
                for blk in row_blocks(u):
                    u[blk].mul_(S).addcmul_(a[blk], retain)
            u = _zero(u, x.outside)
            # inhibit: uhat = max(0, u - beta sum_{top M} relu(u_k - u)), or max(0, u) on the
            # steps the schedule skips
            if last or self.inhibition == "every_step":
                uhat = lateral_inhibition(u, self.M, beta, candidates=x.candidates,
                                          zero_outside=x.zero_outside, inplace=True)
            else:
                uhat = _clamp_nonneg(u, inplace=True)
            if return_potential and last:
                potential = x.dense(uhat.clone())
            # fire: a = sigmoid(gamma (uhat - theta)) [uhat > 0], 0 outside the node mask
            x.update(_zero(fire(uhat, gamma, theta, self.fire_zero, inplace=True), x.outside))
        return (x.dense(), potential) if return_potential else x.dense()

    def extra_repr(self) -> str:
        return (f"M={self.M}, T={self.T}, fan={self.fan}, fire_zero={self.fire_zero}, "
                f"inhibition={self.inhibition!r}, frontier={self.frontier!r}, "
                f"frontier_density={self.frontier_density}")
