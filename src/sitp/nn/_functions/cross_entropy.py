"""Cross-entropy over class indices as one autograd node: :class:`CrossEntropy` on the CPU,
:class:`CrossEntropyGPU` on a GPU (chapter 4.2; sections 4.3, 4.5 for the GPU kernels).

Log-softmax, negative log-likelihood, label smoothing and class weights run as one
kernel per row; the gradient, ``softmax - target distribution`` scaled, as one more.
The kernels are ``sitp.kernels.cpu.fused.cross_entropy`` and ``sitp.kernels.cuda.fused``.
"""

from __future__ import annotations

import math

import numpy as np

from sitp.autograd.function import Function
from sitp.kernels.cpu import ops as cpu
from sitp.kernels.cpu.fused import cross_entropy as cpu_fused
from sitp.nn._functions import _cuda


class CrossEntropy(Function):
    """Fused cross-entropy of (R, C) logits against (R,) class indices."""

    @staticmethod
    def forward(ctx, z_RC, target_R, weight_C, ignore_index, eps, reduction):
        R, C = z_RC.shape
        z = z_RC.contiguous()
        t = target_R.contiguous()
        w = (
            np.ones(C, z.dtype.np)
            if weight_C is None
            else cpu.flat(weight_C.to(z.dtype).contiguous())
        )
        loss = cpu._new((R,), z.dtype, z)
        p = np.empty(R * C, z.dtype.np)
        stats = np.zeros(2, np.float64)
        bad = cpu_fused.cross_entropy_kernel(
            cpu.flat(z), R, C, cpu.flat(t), w, ignore_index, eps, loss._storage, p, stats
        )
        if bad >= 0:
            raise IndexError(
                f"Target {int(cpu.flat(t)[bad])} is out of bounds: cross_entropy expects class "
                f"indices in [0, {C}) or ignore_index={ignore_index} (logits of shape (R, C) = {(R, C)})"
            )
        ctx.p, ctx.t, ctx.w, ctx.shape, ctx.dtype = p, t, w, (R, C), z.dtype
        ctx.ignore_index, ctx.eps, ctx.reduction = ignore_index, eps, reduction
        ctx.denom = stats[1]
        if reduction == "none":
            return loss
        value = stats[0] if reduction == "sum" else stats[0] / stats[1] if stats[1] else math.nan
        return loss._wrap_np(np.array([value], z.dtype.np), ())

    @staticmethod
    def backward(ctx, g):
        (R, C), p, dt = ctx.shape, ctx.p, ctx.dtype
        if ctx.reduction == "none":
            garr, step = cpu.flat(g.to(dt).contiguous()), 1
        else:
            scale = g.item() / (ctx.denom if ctx.reduction == "mean" else 1.0)
            garr, step = np.array([scale], dt.np), 0
        dz = cpu._new((R, C), dt, g)
        cpu_fused.cross_entropy_backward_kernel(
            p, R, C, cpu.flat(ctx.t), ctx.w, ctx.ignore_index, ctx.eps, garr, step, dz._storage
        )
        return dz, None, None, None, None, None


def gpu_fits(z_RC, target_R, weight) -> bool:
    """Whether :class:`CrossEntropyGPU` takes these: device tensors, float32/float64 logits,
    int64 class indices, at least one class and one row."""
    return (
        all(_cuda.is_device(t) for t in (z_RC, target_R, weight))
        and target_R.dtype.name == "int64"
        and z_RC.ndim == 2
        and z_RC.shape[1] > 0
        and z_RC.shape[0] > 0
        and _cuda.backend()[0].supports(z_RC.dtype.np)
    )


# --8<-- [start:cross_entropy_function]
class CrossEntropyGPU(Function):
    """Cross-entropy of (R, C) device logits against (R,) int64 class indices.

    The same arguments and semantics as :class:`CrossEntropy` (ignore_index, label
    smoothing eps, class weights, reduction 'none' / 'mean' / 'sum'). Saved for backward:
    the logits, targets, the logsumexp of each row and, for a reduced loss, the weight
    total (a one-entry device array). nt: threads per block, as in ``LayerNormGPU``.
    """

    @staticmethod
    def forward(ctx, z_RC, target_R, weight_C, ignore_index, eps, reduction, nt=None):
        FG, _ = _cuda.backend()
        R, C = z_RC.shape
        nt_rows = FG.block_size(R, nt)  # the one block that sums over the rows
        nt = FG.block_size(C, nt)
        dt = z_RC.dtype
        zs = _cuda.flat(z_RC)
        ts = _cuda.flat(target_R)
        ws = _cuda.flat(weight_C, dt) if weight_C is not None else None
        loss = _cuda.new((R,), dt)
        w_sum, wrow, lse, denom = FG.cross_entropy_forward(
            zs, ts, ws, R, C, ignore_index, eps, nt, loss._storage
        )
        ctx.zs, ctx.ts, ctx.ws, ctx.w_sum, ctx.lse, ctx.denom = zs, ts, ws, w_sum, lse, denom
        ctx.R, ctx.C, ctx.dtype, ctx.nt = R, C, dt, nt
        ctx.ignore_index, ctx.eps, ctx.reduction = ignore_index, eps, reduction
        ctx.op = "cross_entropy"  # grad_fn prints as <CrossEntropyBackward>, as on the CPU
        if reduction == "none":
            return loss
        out = _cuda.new((), dt)
        FG.cross_entropy_reduce(
            loss._storage, wrow, R, reduction == "mean", nt_rows, out._storage, denom
        )
        return out

    @staticmethod
    def backward(ctx, g):
        FG, _ = _cuda.backend()
        dt, R, C = ctx.dtype, ctx.R, ctx.C
        gs = _cuda.flat(g, dt)
        g_step = 1 if ctx.reduction == "none" else 0
        dz = _cuda.new((R, C), dt)
        FG.cross_entropy_backward(
            ctx.zs,
            ctx.ts,
            ctx.ws,
            ctx.w_sum,
            ctx.lse,
            gs,
            g_step,
            ctx.denom,
            ctx.reduction == "mean",
            R,
            C,
            ctx.ignore_index,
            ctx.eps,
            ctx.nt,
            dz._storage,
        )
        return dz, None, None, None, None, None, None


# --8<-- [end:cross_entropy_function]
