"""RMS norm as one autograd node on the CPU (the kernels are
``sitp.kernels.cpu.fused.rms_norm``).

Forward is one fused kernel (rstd and the scaling per row) and backward one more,
recomputing the normalized row from the saved rstd. ``F.rms_norm`` composes ops
instead on a GPU, and when the weight's dtype differs from the input's.
"""

from __future__ import annotations

import numpy as np

from sitp.autograd.function import Function
from sitp.kernels.cpu import ops as cpu
from sitp.kernels.cpu.fused import rms_norm as cpu_fused


class RMSNorm(Function):
    """RMS norm over the last ``n`` entries of each row (a weight of n entries, or None)."""

    @staticmethod
    def forward(ctx, x, weight, n, eps):
        xc = x.contiguous()
        rows = xc.numel() // n
        w = cpu.flat(weight.contiguous()) if weight is not None else np.ones(1, x.dtype.np)
        y = cpu._new(x.shape, x.dtype, x)
        rstd = np.empty(rows, np.float64)
        cpu_fused.rms_norm_forward(
            cpu.flat(xc), rows, n, w, weight is not None, float(eps), y._storage, rstd
        )
        ctx.xc, ctx.w, ctx.rstd, ctx.n = xc, w, rstd, n
        ctx.wshape = None if weight is None else weight.shape
        return y

    @staticmethod
    def backward(ctx, g):
        xc, n = ctx.xc, ctx.n
        gc = g.contiguous().to(xc.dtype)
        dx = cpu._new(xc.shape, xc.dtype, xc)
        dw = np.zeros(n, np.float64)
        cpu_fused.rms_norm_backward_kernel(
            cpu.flat(xc),
            cpu.flat(gc),
            ctx.rstd.size,
            n,
            ctx.w,
            ctx.wshape is not None,
            ctx.rstd,
            dx._storage,
            dw,
        )
        need = ctx.needs_input_grad
        gw = None
        if ctx.wshape is not None and need[1]:
            gw = dx._wrap_np(dw.astype(xc.dtype.np), ctx.wshape)
        return (dx if need[0] else None), gw, None, None
