"""Attention as one autograd node, flash-style on the CPU: :class:`Attention` (chapter 4.2).

Per block of query rows, scores, masked softmax and P V run in one kernel that reads
q, k, v through their strides (``sitp.kernels.cpu.fused.attention``); it saves one row
max and one 1 / row sum per query row, and the backward kernel recomputes P from them.
A float mask that needs its gradient takes the exact path instead: scores and
probabilities as tensors, with the masked softmax of ``sitp.nn._functions.softmax``.
"""

from __future__ import annotations

import numpy as np

from sitp._tensor.tensor import Tensor
from sitp.autograd.derivatives import unbroadcast
from sitp.autograd.function import Function
from sitp.dtypes import bool_
from sitp.kernels.cpu import ops as cpu
from sitp.kernels.cpu.fused import attention as cpu_fused
from sitp.nn._functions.softmax import masked_softmax
from sitp.strides import broadcast_shapes, broadcast_strides, numel

_I64 = np.int64


def _bstrides(t, bshape):
    """``t``'s strides broadcast to ``bshape`` + its last two dims (stride 0 where broadcast)."""
    return broadcast_strides(t.shape, t._strides, tuple(bshape) + tuple(t.shape[-2:]))


def _head_major(bshape, n, d, dtype, zero):
    """A new (..., n, d) tensor (zeroed when ``zero``); for 4-D (B, H, n, d) its storage is in
    (B, n, H, d) order, the layout ``y.transpose(1, 2).contiguous().view(B, n, H*d)``
    (the GPT's merge of the heads) reads without a copy."""
    shape = tuple(bshape) + (n, d)
    if len(bshape) == 2:
        B, H = bshape
        strides = (n * H * d, d, H * d, 1)
        storage = (np.zeros if zero else np.empty)(B * n * H * d, dtype.np)
        return Tensor._make(storage, shape, strides, 0, dtype)
    t = cpu._new(shape, dtype, Tensor)
    if zero:
        t._storage[:] = 0
    return t


def _packed_grads(q, k, v, bshape):
    """dq, dk, dv as windows of one zeroed storage laid out as q, k, v's own, when q, k, v
    are three equal windows that tile one storage (the GPT's ``qkv.split(C, dim=2)`` seen
    through its head view): the split's backward then finds its gradient already in
    place, with no copy (``Split.backward``). None for any other layout."""
    store = q._storage
    if not (k._storage is store and v._storage is store):
        return None
    if not (q.shape == k.shape == v.shape and q._strides == k._strides == v._strides):
        return None
    if tuple(q.shape[:-2]) != tuple(bshape):
        return None
    o0, o1, o2 = sorted((q._offset, k._offset, v._offset))
    w, n = o1 - o0, numel(q.shape)
    if o0 != 0 or w <= 0 or o2 - o1 != w or store.size != 3 * n:
        return None
    # the three windows as one view with a dim of 3 (stride w) must be dense: sorted by
    # stride, each dim's stride is the product of the sizes below it, starting at 1
    dims = sorted((st, sz) for st, sz in zip(q._strides + (w,), q.shape + (3,)) if sz > 1)
    expect = 1
    for st, sz in dims:
        if st != expect:
            return None
        expect *= sz
    grad = np.zeros(store.size, q.dtype.np)
    return [Tensor._make(grad, t.shape, t._strides, t._offset, t.dtype) for t in (q, k, v)]


def _mask_args(mask, bshape, L, S):
    """(mask_kind, storage, strides broadcast to bshape + (L, S), offset) for the kernels."""
    if mask is None:
        return 0, None, (0,) * (len(bshape) + 2), 0
    st = broadcast_strides(mask.shape, mask._strides, tuple(bshape) + (L, S))
    return (1 if mask.dtype is bool_ else 2), mask._storage, st, mask._offset


# --8<-- [start:attention]
class Attention(Function):
    """O = softmax(Q K^T * scale + mask) V in one node, flash-style on the CPU.

    Shapes: Q (..., L, D), K (..., S, D), V (..., S, Dv) with broadcast batch
    dims; ``mask`` None, bool (True = attend) or float (added), broadcastable
    to (..., L, S). Forward runs attention_forward_kernel straight on the
    inputs' strided storage and keeps Q, K, V, O and one logsumexp per query
    row -- O(L) memory per head, not the (L, S) probabilities; backward
    recomputes P from them (attention_backward_kernel):

        dV = P^T dO,   dP = dO V^T,   dS = P * (dP - rowsum(dO * O)),
        dQ = dS K * scale,   dK = dS^T Q * scale

    A float mask that requires grad takes the exact path instead (scores and
    probabilities as tensors, ``d(mask) = dS``), as does a non-float dtype.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, causal):
        flash = q.dtype.is_floating_point and not (mask is not None and ctx.needs_input_grad[3])
        ctx.flash, ctx.mask, ctx.scale, ctx.causal = flash, mask, scale, causal
        if not flash:
            return _attention_exact_forward(ctx, q, k, v, mask, scale, causal)
        L, S, D, Dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
        shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]]
        if mask is not None:
            shapes.append(tuple(mask.shape[:-2]))
        bshape = broadcast_shapes(*shapes)
        n_batch = numel(bshape)
        out = _head_major(bshape, L, Dv, q.dtype, False)
        lse = np.empty(2 * n_batch * L)  # row max, then 1 / row sum
        ctx.save_for_backward(q, k, v)
        ctx.out, ctx.lse, ctx.bshape = (out._storage, out._strides), lse, bshape
        if n_batch * L * S * Dv == 0:
            if out.numel():  # no keys (S = 0): zeros, no gradient
                out._storage[:] = 0
            lse[:] = np.inf
            return out
        kind, m, mst, moff = _mask_args(mask, bshape, L, S)
        st = np.array(
            [_bstrides(q, bshape), _bstrides(k, bshape), _bstrides(v, bshape), mst, out._strides],
            _I64,
        )
        off = np.array([q._offset, k._offset, v._offset, moff, 0], _I64)
        cpu_fused.attention_forward(
            q._storage,
            k._storage,
            v._storage,
            m,
            out._storage,
            lse,
            bshape,
            st,
            off,
            L,
            S,
            D,
            Dv,
            scale,
            causal,
            kind,
        )
        return out

    @staticmethod
    def backward(ctx, g):
        if not ctx.flash:
            return _attention_exact_backward(ctx, g)
        q, k, v = ctx.saved_tensors
        nq, nk, nv = ctx.needs_input_grad[:3]
        bshape, mask = ctx.bshape, ctx.mask
        L, S, D, Dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
        n_batch = numel(bshape)
        # Gradients at each input's own shape; a 4-D one not broadcast is laid out
        # (B, n, H, d), so the GPT's view/transpose backward needs no copy.
        grads = _packed_grads(q, k, v, bshape) if nq and nk and nv else None
        if grads is None:
            grads = [
                _head_major(t.shape[:-2], t.shape[-2], t.shape[-1], t.dtype, True)
                for t in (q, k, v)
            ]
        if n_batch * L * S == 0:
            return (
                grads[0] if nq else None,
                grads[1] if nk else None,
                grads[2] if nv else None,
                None,
                None,
                None,
            )
        kind, m, mst, moff = _mask_args(mask, bshape, L, S)
        o_storage, o_strides = ctx.out
        st = np.array(
            [
                _bstrides(q, bshape),
                _bstrides(k, bshape),
                _bstrides(v, bshape),
                mst,
                o_strides,
                _bstrides(g, bshape),
            ]
            + [_bstrides(t, bshape) for t in grads],
            _I64,
        )
        off = np.array(
            [q._offset, k._offset, v._offset, moff, 0, g._offset] + [t._offset for t in grads],
            _I64,
        )
        shared = any(tuple(t.shape[:-2]) != tuple(bshape) for t in (q, k, v))
        cpu_fused.attention_backward(
            q._storage,
            k._storage,
            v._storage,
            m,
            o_storage,
            g._storage,
            ctx.lse,
            grads[0]._storage,
            grads[1]._storage,
            grads[2]._storage,
            bshape,
            st,
            off,
            L,
            S,
            D,
            Dv,
            ctx.scale,
            ctx.causal,
            kind,
            shared,
        )
        return (
            grads[0] if nq else None,
            grads[1] if nk else None,
            grads[2] if nv else None,
            None,
            None,
            None,
        )


def _attention_exact_forward(ctx, q, k, v, mask, scale, causal):
    """Attention with the scores and probabilities as tensors (cpu.matmul and
    masked_softmax_kernel): the path for a float mask that needs its gradient."""
    s_LS = cpu.matmul(q, k.mT)  # (..., L, S)
    p_LS = masked_softmax(s_LS, mask, scale, causal)
    ctx.save_for_backward(q, k, v)
    ctx.mask, ctx.scale, ctx.causal = mask, scale, causal
    return cpu.matmul(p_LS, v)  # (..., L, Dv)


def _attention_exact_backward(ctx, g):
    q, k, v = ctx.saved_tensors
    p_LS = masked_softmax(cpu.matmul(q, k.mT), ctx.mask, ctx.scale, ctx.causal)
    nq, nk, nv, nm = ctx.needs_input_grad[:4]
    dv = unbroadcast(cpu.matmul(p_LS.mT, g), v.shape) if nv else None
    dp_LS = cpu.matmul(g, v.mT)
    ds_LS = cpu.softmax_backward(p_LS, dp_LS, p_LS.ndim - 1, False)
    dq = unbroadcast(cpu.matmul(ds_LS, k), q.shape) * ctx.scale if nq else None
    dk = unbroadcast(cpu.matmul(ds_LS.mT, q), k.shape) * ctx.scale if nk else None
    dmask = unbroadcast(ds_LS, ctx.mask.shape) if nm else None
    return dq, dk, dv, dmask, None, None


# --8<-- [end:attention]
