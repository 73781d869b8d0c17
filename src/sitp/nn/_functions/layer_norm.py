"""Layer norm as one autograd node: :class:`LayerNorm` on the CPU, :class:`LayerNormGPU`
on a GPU (chapter 4.2; sections 4.3, 4.5 for the GPU kernels).

Forward is one fused kernel (mean, rstd and the affine map per row) and backward one
more, recomputing the normalized row from the saved mean and rstd. The kernels are
``sitp.kernels.cpu.fused.layer_norm`` and ``sitp.kernels.cuda.fused``.
"""

from __future__ import annotations

import numpy as np

from sitp.autograd.function import Function
from sitp.kernels.cpu import ops as cpu
from sitp.kernels.cpu.fused import layer_norm as cpu_fused
from sitp.nn._functions import _cuda


class LayerNorm(Function):
    """Layer norm over the last ``n`` entries of each row (weight/bias of n entries or None)."""

    @staticmethod
    def forward(ctx, x, weight, bias, n, eps):
        xc = x.contiguous()
        rows = xc.numel() // n if n else 0
        dt = x.dtype.np
        w = cpu.flat(weight.to(x.dtype).contiguous()) if weight is not None else np.ones(1, dt)
        b = cpu.flat(bias.to(x.dtype).contiguous()) if bias is not None else np.zeros(1, dt)
        y = cpu._new(x.shape, x.dtype, x)
        mean = np.empty(rows, np.float64)
        rstd = np.empty(rows, np.float64)
        cpu_fused.layer_norm_forward(
            cpu.flat(xc),
            rows,
            n,
            w,
            b,
            weight is not None,
            bias is not None,
            float(eps),
            y._storage,
            mean,
            rstd,
        )
        ctx.xc, ctx.w, ctx.mean, ctx.rstd, ctx.n = xc, w, mean, rstd, n
        ctx.has_w, ctx.shapes = (
            weight is not None,
            (None if weight is None else weight.shape, None if bias is None else bias.shape),
        )
        return y

    @staticmethod
    def backward(ctx, g):
        xc, n = ctx.xc, ctx.n
        gc = g.contiguous().to(xc.dtype)
        dx = cpu._new(xc.shape, xc.dtype, xc)
        dw, db = cpu_fused.layer_norm_backward(
            cpu.flat(xc),
            cpu.flat(gc),
            ctx.mean.size,
            n,
            ctx.w,
            ctx.has_w,
            ctx.mean,
            ctx.rstd,
            dx._storage,
        )
        wshape, bshape = ctx.shapes
        need = ctx.needs_input_grad
        gw = dx._wrap_np(dw.astype(xc.dtype.np), wshape) if wshape is not None and need[1] else None
        gb = dx._wrap_np(db.astype(xc.dtype.np), bshape) if bshape is not None and need[2] else None
        return (dx if need[0] else None), gw, gb, None, None


def gpu_fits(x, weight, bias, n) -> bool:
    """Whether :class:`LayerNormGPU` takes these tensors: all on the device, float32 or
    float64, a non-empty input (otherwise ``F.layer_norm`` composes ops)."""
    return (
        all(_cuda.is_device(t) for t in (x, weight, bias))
        and n > 0
        and x.numel() > 0
        and _cuda.backend()[0].supports(x.dtype.np)
    )


# --8<-- [start:layer_norm_function]
class LayerNormGPU(Function):
    """Layer norm over the last ``n`` entries of each row of a device tensor.

    Forward: one kernel (a block per row). Backward: one kernel for dx, and, when
    weight or bias want gradients, the two-step column sums for dw and db. Saved for
    backward: the input, and the mean and rstd of each row (in the input's dtype).
    nt: threads per block (default ``block_size(n)``; the tests pass fewer so that the
    simulator runs several strides per row).
    """

    @staticmethod
    def forward(ctx, x, weight, bias, n, eps, nt=None):
        FG, _ = _cuda.backend()
        nt = FG.block_size(n, nt)
        dt = x.dtype
        rows = x.numel() // n
        xs = _cuda.flat(x)
        ws = _cuda.flat(weight, dt) if weight is not None else None
        bs = _cuda.flat(bias, dt) if bias is not None else None
        y = _cuda.new(x.shape, dt)
        mean, rstd = FG.layer_norm_forward(xs, ws, bs, n, rows, eps, nt, y._storage)
        ctx.xs, ctx.ws, ctx.mean, ctx.rstd = xs, ws, mean, rstd
        ctx.n, ctx.rows, ctx.nt, ctx.dtype, ctx.shape = n, rows, nt, dt, tuple(x.shape)
        ctx.wshape = None if weight is None else tuple(weight.shape)
        ctx.bshape = None if bias is None else tuple(bias.shape)
        ctx.op = "layer_norm"  # grad_fn prints as <LayerNormBackward>, as on the CPU
        return y

    @staticmethod
    def backward(ctx, g):
        FG, _ = _cuda.backend()
        dt, n, rows, nt = ctx.dtype, ctx.n, ctx.rows, ctx.nt
        gs = _cuda.flat(g, dt)
        need = ctx.needs_input_grad
        dx = gw = gb = None
        if need[0]:
            dx = _cuda.new(ctx.shape, dt)
            FG.layer_norm_backward(ctx.xs, gs, ctx.ws, ctx.mean, ctx.rstd, n, rows, nt, dx._storage)
        want_w = ctx.wshape is not None and need[1]
        want_b = ctx.bshape is not None and need[2]
        if want_w or want_b:
            dw = _cuda.new(ctx.wshape if want_w else (n,), dt)  # written even when not wanted
            db = _cuda.new(ctx.bshape, dt) if want_b else None
            FG.layer_norm_dwdb(
                ctx.xs,
                gs,
                ctx.mean,
                ctx.rstd,
                n,
                rows,
                nt,
                dw._storage,
                None if db is None else db._storage,
            )
            gw = dw if want_w else None
            gb = db
        return dx, gw, gb, None, None, None


# --8<-- [end:layer_norm_function]
