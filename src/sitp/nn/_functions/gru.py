"""The GRU's gates as one autograd node, :class:`GRUGates` (chapter 3.4, section 4.2's
"layers as single nodes").

After its two linear maps, a GRU cell's step is a dozen small tensor ops; here it is one
kernel each way (``sitp.kernels.cpu.fused.gru``, whose docstring writes out the
derivatives). On a GPU the cell composes the ops instead.
"""

from __future__ import annotations

import numpy as np

from sitp.autograd.function import Function
from sitp.kernels.cpu import ops as cpu
from sitp.kernels.cpu.fused import gru as cpu_fused


class GRUGates(Function):
    """h' from the two affine maps gi = x W_ih^T + b_ih, gh = h W_hh^T + b_hh and h."""

    @staticmethod
    def forward(ctx, gi, gh, h):
        gi, gh, h = gi.contiguous(), gh.contiguous(), h.contiguous()
        H = h.shape[-1]
        out, r, z, n, hn = (cpu._new(h.shape, h.dtype, h) for _ in range(5))
        cpu_fused.gru_gates_kernel(
            cpu.flat(gi),
            cpu.flat(gh),
            cpu.flat(h),
            H,
            out._storage,
            r._storage,
            z._storage,
            n._storage,
            hn._storage,
        )
        ctx.save_for_backward(h, r, z, n, hn)
        ctx.gate_shape = gi.shape
        return out

    @staticmethod
    def backward(ctx, g):
        h, r, z, n, hn = ctx.saved_tensors
        g = g.to(h.dtype).contiguous()
        dgi, dgh = cpu._new(ctx.gate_shape, h.dtype, h), cpu._new(ctx.gate_shape, h.dtype, h)
        dh = cpu._new(h.shape, h.dtype, h)
        cpu_fused.gru_gates_backward_kernel(
            cpu.flat(g),
            cpu.flat(h),
            cpu.flat(r),
            cpu.flat(z),
            cpu.flat(n),
            cpu.flat(hn),
            h.shape[-1],
            dgi._storage,
            dgh._storage,
            dh._storage,
        )
        need_gi, need_gh, need_h = ctx.needs_input_grad
        return dgi if need_gi else None, dgh if need_gh else None, dh if need_h else None


def fits(gi, gh, h) -> bool:
    """Whether :class:`GRUGates` takes these: CPU floats of one dtype, gates of 3 * H."""
    dt = h.dtype
    return (
        dt.is_floating_point
        and gi.dtype is dt
        and gh.dtype is dt
        and h.ndim >= 1
        and h.shape[-1] > 0
        and h.numel() > 0
        and tuple(gi.shape) == tuple(gh.shape) == tuple(h.shape[:-1]) + (3 * h.shape[-1],)
        and all(isinstance(t._storage, np.ndarray) for t in (gi, gh, h))
    )
