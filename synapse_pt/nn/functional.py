r"""Functional form of the SYNAPSE activation dynamics (SPEC §1.2, steps 3-5).

Activations are a dense matrix :math:`\mathbf{A} \in \mathbb{R}^{N \times B}`: one row per memory
node, one column per query (or per ``(query, hyperparameter configuration)`` pair in a sweep).
Edges run from a source :math:`j` to a target :math:`i` (``edge_index[0] = j``,
``edge_index[1] = i``), PyG's ``source_to_target`` flow. One step :math:`t \to t + 1` is

.. math::
    u_i &= (1 - \delta)\, a_i + \sum_{j \in \mathcal{N}_{in}(i)}
           S \, \frac{w_{ji}}{\mathrm{fan}(j)} \, a_j

    \hat{u}_i &= \max\Big(0,\; u_i - \beta \sum_{k \in \text{top-}M(u)}
                 (u_k - u_i)\, [u_k > u_i]\Big)

    a_i &= \sigma\big(\gamma (\hat{u}_i - \theta)\big)\,[\hat{u}_i > 0]

with :math:`\mathrm{fan}(j)` the out-degree of :math:`j` (propagation, lateral inhibition, firing;
the indicator is our default reading of step 5, ``fire_zero=True`` drops it).
Every hyperparameter except :math:`M` and :math:`T` may be a Python float or a tensor
broadcastable to ``[B]`` (one value per column), so thousands of configurations run in one pass.

This module holds the maths of one step, stage by stage (:func:`propagate`,
:func:`lateral_inhibition`, :func:`fire`, and :func:`inhibit_and_fire` as one compiled kernel).
The sparse kernels they run on (the normalised adjacency, sparse products, frontier edge lists,
column top-k) are in :mod:`synapse_pt.nn.sparse`; the whole loop is the layer
:class:`~synapse_pt.nn.ActivationDynamics`, whose functional forms
(:func:`~synapse_pt.nn.activation.spreading_activation`,
:func:`~synapse_pt.nn.activation.activation_dynamics`,
:func:`~synapse_pt.nn.activation.activation_step`) sit beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from .sparse import _needs_grad, column_topk, spmm_sum

__all__ = [
    "INHIBITION_SCHEDULES",
    "NodeMasks",
    "StepParams",
    "fire",
    "inhibit_and_fire",
    "lateral_inhibition",
    "propagate",
    "row_blocks",
]

Hyper = float | Tensor

# On the CPU the elementwise chains (propagation update, the M passes of lateral inhibition,
# firing) run over row blocks of about this many elements (256 KiB of float32), so a block stays
# in cache and no [N, B] temporaries are allocated (~5x faster than whole-matrix passes on a
# 2-core EPYC). On CUDA whole-matrix kernels are bandwidth-bound and launch-cheap: one block.
_CPU_BLOCK_ELEMS = 1 << 16


def _column_param(value: Hyper, num_columns: int, like: Tensor, name: str) -> Tensor:
    """Turn a hyperparameter into a tensor that broadcasts over the ``[N, B]`` activations.

    Returns a 0-d tensor for a scalar and a ``[B]`` tensor otherwise, in ``like``'s dtype and
    device.
    """
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
            f"broadcastable to [B] = [{num_columns}]"
        ) from e


def row_blocks(x: Tensor) -> list[slice]:
    """Row slices of ``x`` ``[N, B]``: cache-sized blocks on the CPU, one block elsewhere.

    Elementwise chains run block by block so each block stays in cache and no ``[N, B]``
    temporary is allocated (fresh ``[N, B]`` buffers cost page faults on every step).
    """
    n = x.size(0)
    if x.device.type != "cpu" or torch.compiler.is_compiling():  # one kernel fuses the chain
        return [slice(0, n)]
    rows = max(1, _CPU_BLOCK_ELEMS // max(1, x.size(1)))
    return [slice(s, s + rows) for s in range(0, n, rows)]


def _retain_and_spread_(spread: Tensor, a: Tensor, S: Tensor, delta: Tensor) -> Tensor:
    r""":math:`u = S \cdot \text{spread} + (1 - \delta)\, a`, written into the fresh ``spread``.

    Shared by :func:`propagate` and :class:`~synapse_pt.nn.SpreadingActivation`.
    """
    retain = 1.0 - delta
    if _needs_grad(spread, a, S, delta):
        return S * spread + a * retain
    for blk in row_blocks(spread):
        spread[blk].mul_(S).addcmul_(a[blk], retain)
    return spread


def propagate(adj_t: Tensor, a: Tensor, *, S: Hyper = 0.8, delta: Hyper = 0.5) -> Tensor:
    r"""Propagation with decay (SPEC §1.2 step 3).

    .. math::
        \mathbf{U} = (1 - \delta)\,\mathbf{A} + S\, \mathbf{P} \mathbf{A}

    Args:
        adj_t (Tensor): sparse ``[N, N]`` from :func:`activation_adjacency`.
        a (Tensor): activations ``[N, B]``.
        S (float or Tensor): spreading factor, scalar or ``[B]``. (default: ``0.8``)
        delta (float or Tensor): decay, scalar or ``[B]``; ``0`` is the ``no_decay``
            ablation (full self-retention), ``1`` keeps nothing of :math:`a_i`.
            (default: ``0.5``)

    Returns:
        Tensor ``[N, B]``: :math:`u` (a new tensor).
    """
    B = a.size(1)
    S_t = _column_param(S, B, a, "S")
    delta_t = _column_param(delta, B, a, "delta")
    return _retain_and_spread_(spmm_sum(adj_t, a), a, S_t, delta_t)


def _clamp_nonneg(u: Tensor, inplace: bool) -> Tensor:
    if inplace and not _needs_grad(u):
        return u.clamp_(min=0)
    return u.clamp(min=0)


def lateral_inhibition(
    u: Tensor,
    M: int = 7,
    beta: Hyper = 0.15,
    *,
    node_mask: Tensor | None = None,
    inplace: bool = False,
    zero_outside: bool = False,
) -> Tensor:
    r"""Lateral inhibition by the top-:math:`M` nodes of each column (SPEC §1.2 step 4).

    .. math::
        \hat{u}_i = \max\Big(0,\; u_i - \beta \sum_{k \in \text{top-}M(u)}
        \mathrm{relu}(u_k - u_i)\Big)

    :math:`\mathrm{relu}(u_k - u_i)` equals :math:`(u_k - u_i)[u_k > u_i]`, so ties inhibit
    nothing and which of several tied values ``topk`` picks does not matter.

    With the top values :math:`v_1 \ge \dots \ge v_M` of a column, every row below them
    (:math:`u_i \le v_M`) has :math:`u_k \ge u_i` for all :math:`M` inhibitors, so

    .. math::
        \hat{u}_i = \max\Big(0,\; (1 + \beta M)\, u_i - \beta \sum_{k=1}^{M} v_k\Big)

    one pass instead of :math:`M`; the :math:`M` top rows themselves get the exact sum over
    the ``[M, M, B]`` differences of their values. That holds for every row when all rows are
    candidates (``node_mask`` ``None``), and when ``zero_outside`` says the rows outside
    ``node_mask`` hold 0 and :math:`v_M \ge 0` in every column (the activation layer's case).
    Elsewhere (inhibitors restricted to a neighbourhood, autograd) the sum is a loop over the
    :math:`M` top values. Both run row block by row block on the CPU, never an ``[N, B, M]``
    tensor; they agree up to float rounding (tested).

    Args:
        u (Tensor): ``[N, B]``.
        M (int): number of inhibiting nodes per column, clipped to :math:`N`; ``0`` disables.
            (default: ``7``)
        beta (float or Tensor): inhibition strength, scalar or ``[B]``; ``0`` is the ``beta0``
            ablation (then :math:`\hat{u} = \max(0, u)`). (default: ``0.15``)
        node_mask (BoolTensor, optional): ``[N, B]`` or ``[N, 1]``; nodes outside the mask are
            not candidates for the top-:math:`M` (each query is inhibited only by its own graph).
        inplace (bool): write :math:`\hat{u}` into ``u`` (ignored when autograd needs ``u``).
            (default: ``False``)
        zero_outside (bool): ``u`` is 0 at every row outside ``node_mask`` (lets the one-pass
            form run with a mask). (default: ``False``)

    Returns:
        Tensor ``[N, B]``: :math:`\hat{u}`.
    """
    B = u.size(1)
    M = min(int(M), u.size(0))
    if M <= 0 or (isinstance(beta, (int, float)) and beta == 0):
        return _clamp_nonneg(u, inplace)  # equal to the general path with beta = 0
    beta_t = _column_param(beta, B, u, "beta")
    cand = u if node_mask is None else u.masked_fill(~node_mask, float("-inf"))
    # relu(-inf - u) = 0 for finite u: a masked-out candidate inhibits nobody.
    if (node_mask is None or zero_outside) and not _needs_grad(u, beta_t):
        top, rows = column_topk(cand, M)  # [M, B], descending
        if node_mask is None or bool((top[-1] >= 0).all()):
            return _inhibit_closed_form(u, top, rows, beta_t, inplace)
    else:
        top = column_topk(cand, M, sorted=False)[0]  # [M, B]
    if _needs_grad(u, beta_t):
        acc = torch.zeros_like(u)
        for v_k in top:
            acc = acc + torch.relu(v_k - u)
        return torch.clamp(u - beta_t * acc, min=0)
    out = u if inplace else u.clone()
    blocks = row_blocks(out)
    rows = blocks[0].stop - blocks[0].start if blocks else 0
    acc = out.new_empty(min(rows, out.size(0)), B)
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


def _inhibit_closed_form(u: Tensor, top: Tensor, rows: Tensor, beta: Tensor,
                         inplace: bool) -> Tensor:
    r""":func:`lateral_inhibition` when no row outside the top :math:`M` exceeds the
    :math:`M`-th value: one pass :math:`\max(0, (1 + \beta M) u - \beta \sum_k v_k)` over
    the rows, then the exact value at the top rows ``rows`` ``[M, B]`` (values ``top``)."""
    out = u if inplace else u.clone()
    _inhibit_rows_(out, *_closed_form_terms(top, beta))
    out.scatter_(0, rows, _inhibit_top(top, beta))
    return out


def _closed_form_terms(top: Tensor, beta: Tensor) -> tuple[Tensor, Tensor]:
    """``(1 + beta M, beta sum_k v_k)`` of the one-pass form, from the top values ``[M, B]``."""
    return 1.0 + beta * top.size(0), beta * top.sum(dim=0)


def _inhibit_rows_(out: Tensor, gain: Tensor, offset: Tensor) -> Tensor:
    r"""The one-pass form :math:`\max(0, \text{gain}\, u - \text{offset})`, in place."""
    for blk in row_blocks(out):
        out[blk].mul_(gain).sub_(offset).clamp_(min=0)
    return out


def _inhibit_top(top: Tensor, beta: Tensor) -> Tensor:
    """The top rows' exact values ``v_r - beta sum_k relu(v_k - v_r)``, from the ``[M, M, B]``
    differences of the top values ``top`` ``[M, B]``."""
    pressure = (top.unsqueeze(0) - top.unsqueeze(1)).clamp_(min=0).sum(dim=1)  # [M, B]
    return (top - beta * pressure).clamp_(min=0)


def _inhibit_fire_rows_(u: Tensor, gain: Tensor, offset: Tensor, gamma: Tensor, theta: Tensor,
                        fire_zero: bool) -> Tensor:
    """The one-pass inhibition of every row, then firing, in place on ``u``: the body of
    :func:`inhibit_and_fire`'s compiled kernel (the same two functions as the eager stages)."""
    return fire(_inhibit_rows_(u, gain, offset), gamma, theta, fire_zero, inplace=True)


_FUSED_KERNELS: dict[str, Callable[..., Tensor]] = {}


def _fused_kernel(device: torch.device) -> Callable[..., Tensor]:
    """:func:`_inhibit_fire_rows_` compiled once per device type (dynamic shapes: one kernel
    for every block size)."""
    if device.type not in _FUSED_KERNELS:
        _FUSED_KERNELS[device.type] = torch.compile(_inhibit_fire_rows_, dynamic=True)
    return _FUSED_KERNELS[device.type]


def inhibit_and_fire(u: Tensor, M: int = 7, beta: Hyper = 0.15, gamma: Hyper = 5.0,
                     theta: Hyper = 0.5, fire_zero: bool = False, *,
                     compiled: bool = True) -> Tensor:
    r""":func:`fire` of :func:`lateral_inhibition` for every column of ``u`` ``[N, B]`` (all
    rows candidates, no node mask), in place on ``u``:

    .. math::
        a_i = \sigma\big(\gamma (\hat{u}_i - \theta)\big)\,[\hat{u}_i > 0],\qquad
        \hat{u}_i = \max\big(0,\; (1 + \beta M)\, u_i - \beta \textstyle\sum_{k=1}^{M} v_k\big)

    below the top :math:`M` values :math:`v_k` of each column, and the exact inhibition at the
    :math:`M` top rows (see :func:`lateral_inhibition`). With ``compiled`` the row pass and the
    firing run as one kernel (``torch.compile``: one read and one write of ``u`` instead of eight
    eager passes; the first call compiles, seconds); the top rows are fired apart, ``[M, B]``.
    Results equal the two eager stages up to float rounding (tested). Not for autograd.
    """
    B = u.size(1)
    M = min(int(M), u.size(0))
    beta_t = _column_param(beta, B, u, "beta")
    gamma_t = _column_param(gamma, B, u, "gamma")
    theta_t = _column_param(theta, B, u, "theta")
    if _needs_grad(u, beta_t, gamma_t, theta_t):
        raise ValueError("inhibit_and_fire runs in place without autograd; use "
                         "lateral_inhibition and fire")
    if M <= 0:
        return fire(u.clamp_(min=0), gamma_t, theta_t, fire_zero, inplace=True)
    top, rows = column_topk(u, M)
    gain, offset = _closed_form_terms(top, beta_t)
    if compiled:  # [B] parameters whatever was given: one compiled graph for every call
        gain, gamma_c, theta_c = (t.expand(B).contiguous() for t in (gain, gamma_t, theta_t))
        a = _fused_kernel(u.device)(u, gain, offset, gamma_c, theta_c, fire_zero)
    else:
        a = _inhibit_fire_rows_(u, gain, offset, gamma_t, theta_t, fire_zero)
    return a.scatter_(0, rows, fire(_inhibit_top(top, beta_t), gamma_t, theta_t, fire_zero))


def fire(
    uhat: Tensor,
    gamma: Hyper = 5.0,
    theta: Hyper = 0.5,
    fire_zero: bool = False,
    *,
    inplace: bool = False,
) -> Tensor:
    r"""Sigmoid firing (SPEC §1.2 step 5).

    .. math::
        a_i = \sigma\big(\gamma (\hat{u}_i - \theta)\big) \cdot [\hat{u}_i > 0]

    The indicator is the default reading (a node with no input stays silent, otherwise
    :math:`\sigma(-\gamma\theta) > 0` would hand every node energy); ``fire_zero=True`` drops it
    (the literal formula).

    Args:
        uhat (Tensor): ``[N, B]``, non-negative.
        gamma (float or Tensor): gain, scalar or ``[B]``. (default: ``5.0``)
        theta (float or Tensor): threshold, scalar or ``[B]``. (default: ``0.5``)
        fire_zero (bool): let nodes with :math:`\hat{u}_i = 0` fire too. (default: ``False``)
        inplace (bool): write the result into ``uhat`` (ignored when autograd needs it).
            (default: ``False``)

    Returns:
        Tensor ``[N, B]``.
    """
    B = uhat.size(1)
    gamma_t = _column_param(gamma, B, uhat, "gamma")
    theta_t = _column_param(theta, B, uhat, "theta")
    if _needs_grad(uhat, gamma_t, theta_t):
        a = torch.sigmoid(gamma_t * (uhat - theta_t))
        return a if fire_zero else a.masked_fill(uhat <= 0, 0.0)
    out = uhat if inplace else torch.empty_like(uhat)
    for blk in row_blocks(uhat):
        x_b, o_b = uhat[blk], out[blk]
        silent = None if fire_zero else x_b <= 0
        torch.sub(x_b, theta_t, out=o_b).mul_(gamma_t).sigmoid_()
        if silent is not None:
            o_b.masked_fill_(silent, 0.0)
    return out


def _apply_node_mask(x: Tensor, outside: Tensor | None) -> Tensor:
    """Zero the nodes outside each query's graph (in place on a fresh ``x`` when allowed)."""
    if outside is None:
        return x
    if _needs_grad(x):
        return x.masked_fill(outside, 0.0)
    return x.masked_fill_(outside, 0.0)


def _check_node_mask(node_mask: Tensor | None, a: Tensor) -> Tensor | None:
    if node_mask is None:
        return None
    if node_mask.dtype != torch.bool:
        raise ValueError(f"node_mask must be bool, got {node_mask.dtype}")
    if node_mask.dim() == 1:
        node_mask = node_mask.unsqueeze(1)
    N, B = a.shape
    if node_mask.dim() != 2 or node_mask.size(0) != N or node_mask.size(1) not in (1, B):
        raise ValueError(
            f"node_mask has shape {tuple(node_mask.shape)}; expected [N, B] or [N, 1] with "
            f"N = {N}, B = {B}"
        )
    return node_mask.to(a.device)


INHIBITION_SCHEDULES = ("every_step", "last_step")


class StepParams(NamedTuple):
    r"""One call's hyperparameters of a step, as tensors in the activations' dtype and device
    (0-d, or ``[B]``: one value per column): :math:`S` and :math:`\delta` (propagation),
    :math:`\beta` (inhibition; ``None`` where the layer has no inhibition stage), :math:`\gamma`
    and :math:`\theta` (firing)."""

    S: Tensor
    delta: Tensor
    beta: Tensor | None
    gamma: Tensor
    theta: Tensor

    def needs_grad(self) -> bool:
        """Whether autograd tracks any of them."""
        return _needs_grad(*(t for t in self if t is not None))


class NodeMasks(NamedTuple):
    """The node masks of one call, checked against the activations ``[N, B]`` (each ``[N, B]``
    or ``[N, 1]`` bool on their device, or ``None``: every node)."""

    #: the nodes of each column's graph; the others are kept at 0 after every step
    node_mask: Tensor | None
    #: the nodes that may be among a column's top-:math:`M` inhibitors (in its graph, and in the
    #: inhibitor mask where one is given)
    candidates: Tensor | None
    #: ``u`` is 0 at every candidate row outside ``node_mask`` (no inhibitor mask narrows the
    #: candidates), so inhibition may take its one-pass form (:func:`lateral_inhibition`)
    zero_outside: bool

    @classmethod
    def of(cls, a: Tensor, node_mask: Tensor | None = None,
           inhibitor_mask: Tensor | None = None) -> NodeMasks:
        """The masks of a call on ``a`` ``[N, B]``: the candidates are the nodes in both
        masks."""
        node_mask = _check_node_mask(node_mask, a)
        inhibitor_mask = _check_node_mask(inhibitor_mask, a)
        candidates = node_mask
        if inhibitor_mask is not None:
            candidates = inhibitor_mask if node_mask is None else node_mask & inhibitor_mask
        return cls(node_mask, candidates, inhibitor_mask is None)
