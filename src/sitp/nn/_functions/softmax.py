"""Attention's masked softmax as one autograd node, :class:`MaskedSoftmax` (chapter 4.2):
scale, causal or explicit mask and softmax in one pass per row of scores
(``sitp.kernels.cpu.fused.softmax``). Used when attention applies dropout to its weights.
"""

from __future__ import annotations

from sitp.autograd.derivatives import unbroadcast
from sitp.autograd.function import Function
from sitp.kernels.cpu import ops as cpu
from sitp.kernels.cpu.fused import softmax as cpu_fused
from sitp.strides import broadcast_strides


def masked_softmax(scores, mask, scale, causal):
    """softmax(scores * scale + mask) over the last dim, with a causal or bool mask.

    ``scores`` is a contiguous (..., L, S) tensor; ``mask`` is None, a bool tensor
    (True = attend) or a float tensor of the scores' dtype, broadcastable to it.
    """
    p = cpu._new(scores.shape, scores.dtype, scores)
    if mask is None:
        kind, m, st, off = 0, None, None, 0
    else:
        kind = 1 if not mask.dtype.is_floating_point else 2
        st = broadcast_strides(mask.shape, mask._strides, scores.shape)
        m, off = mask._storage, mask._offset
    cpu_fused.masked_softmax(
        cpu.flat(scores), tuple(scores.shape), scale, causal, kind, m, st, off, p._storage
    )
    return p


class MaskedSoftmax(Function):
    """P = masked_softmax(scores, mask, scale, causal); the attention weights alone
    (used when attention applies dropout to them)."""

    @staticmethod
    def forward(ctx, scores, mask, scale, causal):
        p = masked_softmax(scores.contiguous(), mask, scale, causal)
        ctx.save_for_backward(p)
        ctx.scale, ctx.mask_shape = scale, None if mask is None else mask.shape
        return p

    @staticmethod
    def backward(ctx, g):
        (p,) = ctx.saved_tensors
        ds = cpu.softmax_backward(p, g.contiguous(), p.ndim - 1, False)  # d(scaled+masked scores)
        dmask = unbroadcast(ds, ctx.mask_shape) if ctx.needs_input_grad[1] else None
        return ds * ctx.scale, dmask, None, None
