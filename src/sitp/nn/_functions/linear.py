"""The linear layer as one autograd node: y = x W^T + b (chapter 4.2).

Written with general ops, ``x @ W.t() + b`` records three nodes (a transpose,
a matmul, a broadcast add), and its backward adds a sum over the batch for
the bias and copies of transposed operands. A layer is the innermost loop of
every network, so it gets a node of its own, as PyTorch's ``addmm``:

* forward is one GEMM whose output starts as the bias (no zeros, no add pass),
  reading ``W`` transposed in place;
* backward is two GEMMs and one column sum, straight from the saved input:

      dX = dY W,    dW = dY^T X,    db = sum over rows of dY

  with ``dY^T`` again read in place. A leading batch shape (B, T, C) is folded
  into the rows: a (B*T, C) matrix.

The GEMMs are ``sitp.kernels.cpu.blas`` (through ``sitp.kernels.cpu.ops``); the column
sum is ``sitp.kernels.cpu.fused.linear.column_sum``.
"""

from __future__ import annotations

import numpy as np

from sitp.autograd.function import Function
from sitp.kernels.cpu import ops as cpu
from sitp.kernels.cpu.fused import linear as cpu_fused


# --8<-- [start:linear_function]
class Linear(Function):
    """y = x W^T + b for x (..., K), W (N, K), b (N,) or None, on the CPU."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        flat = len(x._shape) == 2
        x_MK = x if flat else x.reshape(-1, x.shape[-1])  # fold (B, T) into the rows
        y_MN = cpu.linear(x_MK, weight, bias)
        ctx.save_for_backward(x_MK, weight)
        ctx.x_shape = None if flat else x.shape
        return y_MN if flat else y_MN.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, g):
        x_MK, w_NK = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad
        g_MN = (g if ctx.x_shape is None else g.reshape(-1, w_NK.shape[0])).contiguous()
        small = cpu.linear_backward_small(g_MN, x_MK, w_NK, need_x, need_w, need_b)
        if small is not None:  # a small layer: the three kernels below in one call
            dx, dw, db = small
        else:
            dx = cpu.matmul(g_MN, w_NK) if need_x else None
            dw = cpu.matmul(g_MN.mT, x_MK) if need_w else None  # dY^T read in place
            db = None
            if need_b:
                db = cpu._new((w_NK.shape[0],), g.dtype, g)
                cpu_fused.column_sum(cpu.as_numpy(g_MN), db._storage)
        if dx is not None and ctx.x_shape is not None:
            dx = dx.view(ctx.x_shape)
        return dx, dw, db


# --8<-- [end:linear_function]


def fits(x, weight, bias) -> bool:
    """Whether :class:`Linear` takes these operands: CPU floats of one dtype, 2-D weight."""
    dt, ws = x.dtype, weight._shape
    if not (dt.is_floating_point and weight.dtype is dt and len(ws) == 2):
        return False
    if not x._shape or x._shape[-1] == 0 or not _on_cpu(x) or not _on_cpu(weight):
        return False
    return bias is None or (bias.dtype is dt and bias._shape == ws[:1] and _on_cpu(bias))


def _on_cpu(t) -> bool:
    s = t._storage
    return s.__class__ is np.ndarray or isinstance(s, np.ndarray)
