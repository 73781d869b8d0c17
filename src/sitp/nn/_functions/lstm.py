"""The LSTM cell's gates as one autograd node, :class:`LSTMGates` (chapter 3.4, section
4.2's "layers as single nodes").

After its two linear maps, an LSTM step is four sigmoids and tanhs over the chunks of
the gate pre-activations and five elementwise products and sums. Written with tensor
ops that is a dozen nodes per step, each a trip through Python forward and back; here
it is one node, with the derivatives written out once (torch's gate order i, f, g, o):

    a = gi + gh = (a_i, a_f, a_g, a_o)
    i = σ(a_i),  f = σ(a_f),  g = tanh(a_g),  o = σ(a_o)
    c' = f c + i g,   h' = o tanh(c')

    dc_tot = dc' + dh' o (1 - tanh²(c'))
    da_i = dc_tot g i (1 - i),   da_f = dc_tot c f (1 - f)
    da_g = dc_tot i (1 - g²),    da_o = dh' tanh(c') o (1 - o)
    dc = dc_tot f,   d(gi) = d(gh) = da

On the CPU both ways are one kernel each (``lstm_gates_kernel`` and its backward);
elsewhere the same formulas run as tensor ops inside the node (:func:`_forward_ops`,
:func:`_backward_ops`).
"""

from __future__ import annotations

import numpy as np

from sitp.autograd.function import Function
from sitp.functional import cat
from sitp.kernels.cpu import ops as cpu
from sitp.kernels.cpu.fused import lstm as cpu_fused


def _kernels():
    """``(ops, fused.lstm)`` of the CPU kernel layer (a seam the tests patch to reach the
    composed path)."""
    return cpu, cpu_fused


# --8<-- [start:lstm_ops]
def _forward_ops(gi, gh, c):
    """The gates as tensor ops: returns h', c' and what the backward reads."""
    i, f, g, o = (gi + gh).chunk(4, -1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    c2 = f * c + i * g
    tc = c2.tanh()
    return o * tc, c2, cat([i, f, g, o], -1), tc


def _backward_ops(dh, dc2, c, gates, tc):
    """The chain rule of :func:`_forward_ops` with tensor ops; dh or dc2 may be None."""
    i, f, g, o = gates.chunk(4, -1)
    dc_tot = dc2 if dc2 is not None else None
    if dh is not None:
        through_h = dh * o * (1 - tc * tc)
        dc_tot = through_h if dc_tot is None else dc_tot + through_h
        da_o = dh * tc * o * (1 - o)
    else:
        da_o = o * 0
    da_i = dc_tot * g * i * (1 - i)
    da_f = dc_tot * c * f * (1 - f)
    da_g = dc_tot * i * (1 - g * g)
    return cat([da_i, da_f, da_g, da_o], -1), dc_tot * f


# --8<-- [end:lstm_ops]


class LSTMGates(Function):
    """(h', c') from the affine maps gi = x W_ih^T + b_ih, gh = h W_hh^T + b_hh and c."""

    @staticmethod
    def forward(ctx, gi, gh, c):
        k = _kernels() if _fits_kernel(gi, gh, c) else None
        if k is None:
            h2, c2, gates, tc = _forward_ops(gi, gh, c)
        else:
            ops, fused = k
            gi, gh, c = gi.contiguous(), gh.contiguous(), c.contiguous()
            h2, c2, tc = (ops._new(c.shape, c.dtype, c) for _ in range(3))
            gates = ops._new(gi.shape, c.dtype, c)
            fused.lstm_gates_kernel(
                ops.flat(gi),
                ops.flat(gh),
                ops.flat(c),
                c.shape[-1],
                h2._storage,
                c2._storage,
                gates._storage,
                tc._storage,
            )
        ctx.save_for_backward(c, gates, tc)
        ctx.kernel = k is not None
        return h2, c2

    @staticmethod
    def backward(ctx, grads):
        dh, dc2 = grads
        c, gates, tc = ctx.saved_tensors
        if ctx.kernel and (dh is None or dc2 is None):
            zero = (dc2 if dh is None else dh) * 0
            dh, dc2 = (zero if dh is None else dh), (zero if dc2 is None else dc2)
        if ctx.kernel:
            ops, fused = _kernels()
            dh, dc2 = dh.to(c.dtype).contiguous(), dc2.to(c.dtype).contiguous()
            da, dc = ops._new(gates.shape, c.dtype, c), ops._new(c.shape, c.dtype, c)
            fused.lstm_gates_backward_kernel(
                ops.flat(dh),
                ops.flat(dc2),
                ops.flat(c),
                ops.flat(gates),
                ops.flat(tc),
                c.shape[-1],
                da._storage,
                dc._storage,
            )
        else:
            da, dc = _backward_ops(dh, dc2, c, gates, tc)
        need_gi, need_gh, need_c = ctx.needs_input_grad
        # two inputs get the same gradient: a copy for the second, so that no two
        # leaves' .grad ever share a storage
        return (
            da if need_gi else None,
            (da.clone() if need_gi else da) if need_gh else None,
            dc if need_c else None,
        )


def _fits_kernel(gi, gh, c) -> bool:
    """Whether the CPU kernels take these: CPU floats of one dtype, gates of 4 * H."""
    dt = c.dtype
    return (
        _kernels() is not None
        and dt.is_floating_point
        and gi.dtype is dt
        and gh.dtype is dt
        and c.ndim >= 1
        and c.numel() > 0
        and tuple(gi.shape) == tuple(gh.shape) == tuple(c.shape[:-1]) + (4 * c.shape[-1],)
        and all(isinstance(t._storage, np.ndarray) for t in (gi, gh, c))
    )
