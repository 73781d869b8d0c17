"""GELU as one autograd node, :class:`GELU` (chapter 4.2): one vectorising kernel forward
and one backward (``sitp.kernels.cpu.fused.gelu``), for float32 and float64 CPU tensors.
"""

from __future__ import annotations

from sitp.autograd.function import Function
from sitp.kernels.cpu import ops as cpu
from sitp.kernels.cpu.fused import gelu as cpu_fused


# --8<-- [start:gelu_function]
class GELU(Function):
    """gelu(x) of a float32/float64 CPU tensor; backward from the saved input.

    Saving x (not y) is what both derivatives need; the backward kernel
    recomputes erf or exp from it, which is cheaper than a second array.
    """

    @staticmethod
    def forward(ctx, x, approximate):
        xc = x.contiguous()
        tanh = approximate == "tanh"
        y = cpu._new(x.shape, x.dtype, x)
        cpu_fused.gelu_forward(cpu.flat(xc), y._storage, tanh)
        ctx.save_for_backward(xc)
        ctx.tanh = tanh
        ctx.op = "gelu_tanh" if tanh else "gelu"  # grad_fn prints as <GeluBackward>, as before
        return y

    @staticmethod
    def backward(ctx, g):
        (xc,) = ctx.saved_tensors
        gc = g.to(xc.dtype).contiguous()
        dx = cpu._new(xc.shape, xc.dtype, xc)
        cpu_fused.gelu_backward(cpu.flat(xc), cpu.flat(gc), dx._storage, ctx.tanh)
        return dx, None


# --8<-- [end:gelu_function]
