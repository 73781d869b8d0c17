"""Lowering fused layers into matrix products and fused loops (6.2).

A fused layer (``sitp/nn/_functions``) is one opaque node of the captured graph: the
passes cannot see inside it, so they cannot give it an output buffer or change how it
computes. For a layer whose shapes fit, this module replaces the node's step with one
that the compiler chooses.

Attention (``Attention.forward`` and ``.backward``, causal or unmasked, no broadcast
batch dims, float32 or float64): eager sitp runs a flash-style kernel that keeps one
row max and row sum per query row and recomputes the probabilities in the backward.
At a GPT's sizes (T = 64, head width 32) the probabilities of all heads take a few
hundred kilobytes, so the lowered forward keeps them instead, and both directions become
per-head register-tiled matrix products (``gemm_small_set`` of the CPU backend, which
reads its operands through their strides) around two fused loops:

    forward:   S = Q K^T,  P = softmax(scale S, causal),  O = P V
    backward:  dV = P^T dO,  dP = dO V^T,  dS = scale P (dP - rowsum(P dP)),
               dQ = dS K,  dK = dS^T Q

The softmax is one pass per row (scale, mask, max, exp, sum, normalise) over S while it
is in cache, and dS one more. The gradients are written where the program wants them:
when the next calls only copy dQ, dK and dV into the three column blocks of one new
buffer (the backward of the GPT's ``qkv.split``), the backward writes into those blocks
directly and the buffer and the copies disappear from the graph
(:func:`lower_graph`).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from sitp.backends.cpu.blas.packed import FASTMATH
from sitp.backends.cpu.blas.small import gemm_small_set
from sitp.backends.cpu.vecmath import exp_f32
from sitp.compile.graph import CtxArg, Graph, Ref


# --8<-- [start:attention_lowered]
def _exp(x):
    """e**x in x's float dtype (vecmath's vectorisable exp_f32 for float32)."""
    return math.exp(x)


@overload(_exp, inline="always")
def _exp_typed(x):
    if x == types.float32:
        return lambda x: exp_f32(x)
    return lambda x: math.exp(x)


def _zero(x):
    return 0.0


@overload(_zero, inline="always")
def _zero_typed(x):
    if x == types.float32:
        return lambda x: np.float32(0)
    return lambda x: 0.0


@njit(cache=True, inline="always", fastmath=FASTMATH)
def _softmax_block(s, scale, causal, m):
    """s = softmax(scale s) along rows, row i masked after column i when ``causal``;
    ``m`` is scratch of one entry per row. Each pass runs over every row before the
    next starts, and every pass after the max over whole rows (the mask a store of
    zeros), so that the loops vectorise with few tails."""
    L, S = s.shape
    for i in range(L):
        n = i + 1 if causal else S
        mi = s[i, 0]
        for j in range(n):
            mi = max(mi, s[i, j])
        m[i] = mi * scale
    zero = _zero(scale)
    for i in range(L):
        mi = m[i]
        for j in range(S):  # (a sum in this loop would keep exp from vectorising)
            s[i, j] = _exp(s[i, j] * scale - mi)
    if causal:
        for i in range(L):
            for j in range(i + 1, S):
                s[i, j] = zero
    for i in range(L):
        total = zero
        for j in range(S):
            total += s[i, j]
        m[i] = (zero + 1) / total  # (1 / total would be a float64)
    for i in range(L):
        r = m[i]
        for j in range(S):
            s[i, j] *= r


@njit(cache=True, inline="always", fastmath=FASTMATH)
def _softmax_grad_block(p, d, scale, dot):
    """d = scale p (d - rowsum(p d)): the masked entries, where p is 0, become 0."""
    L, S = p.shape
    for i in range(L):
        t = _zero(scale)
        for j in range(S):
            t += p[i, j] * d[i, j]
        dot[i] = t
    for i in range(L):
        t = dot[i]
        for j in range(S):
            d[i, j] = scale * p[i, j] * (d[i, j] - t)


@njit(cache=True, parallel=True, fastmath=FASTMATH)
def forward(q, k, v, out, p, scale, causal):
    """out[b, h] = softmax(scale q k^T) v for (B, H, T, D) strided views; p keeps
    the probabilities (B, H, T, T)."""
    B, H, T, D = q.shape
    empty = out[0, 0, 0, :0]
    for bh in prange(B * H):
        b, h = bh // H, bh % H
        kt = np.ascontiguousarray(k[b, h].T)  # (D, T): the product reads B's rows
        s = p[b, h]
        gemm_small_set(q[b, h], kt, s, empty, False)  # S = Q K^T
        _softmax_block(s, scale, causal, np.empty(T, p.dtype))
        gemm_small_set(s, v[b, h], out[b, h], empty, False)  # O = P V


@njit(cache=True, parallel=True, fastmath=FASTMATH)
def backward(q, k, v, p, g, dq, dk, dv, scale, causal):
    """dq, dk, dv (B, H, T, D) views, each written whole, from the saved
    probabilities p and the output's gradient g."""
    B, H, T, D = q.shape
    empty = dq[0, 0, 0, :0]
    for bh in prange(B * H):
        b, h = bh // H, bh % H
        pb = p[b, h]
        gemm_small_set(pb.T, g[b, h], dv[b, h], empty, False)  # dV = P^T dO
        vt = np.ascontiguousarray(v[b, h].T)
        ds = np.empty((T, T), p.dtype)
        gemm_small_set(g[b, h], vt, ds, empty, False)  # dP = dO V^T
        _softmax_grad_block(pb, ds, scale, np.empty(T, p.dtype))
        gemm_small_set(ds, np.ascontiguousarray(k[b, h]), dq[b, h], empty, False)  # dS K
        gemm_small_set(ds.T, np.ascontiguousarray(q[b, h]), dk[b, h], empty, False)


KERNELS = {"float32": (forward, backward), "float64": (forward, backward)}
# --8<-- [end:attention_lowered]

_LOWERED_DTYPES = ("float32", "float64")


def view(arr: np.ndarray, r: Ref) -> np.ndarray:
    """The strided numpy view ``r`` of the flat storage ``arr``."""
    isz = arr.itemsize
    return np.ndarray(r.shape, arr.dtype, arr, r.offset * isz, tuple(s * isz for s in r.strides))


def attention_fits(n) -> bool:
    """Whether an ``Attention.forward`` node can be lowered: q, k, v of one (B, H, T, D)
    shape and float dtype, no mask, a Python float scale, rows of unit stride."""
    if n.fn != "Attention.forward" or len(n.args) != 7 or n.kwargs:
        return False
    _, q, k, v, mask, scale, causal = n.args
    if mask is not None or not isinstance(scale, float) or not isinstance(causal, bool):
        return False
    if not all(isinstance(t, Ref) for t in (q, k, v)) or not isinstance(n.result, Ref):
        return False
    if len(q.shape) != 4 or tuple(q.shape) != tuple(k.shape) or tuple(q.shape) != tuple(v.shape):
        return False
    if q.dtype.name not in _LOWERED_DTYPES or not (q.dtype is k.dtype is v.dtype):
        return False
    return all(t.strides[-1] == 1 for t in (q, k, v, n.result))


class _AttentionState:
    """What the lowered forward leaves for the lowered backward (its Context)."""

    __slots__ = ("q", "k", "v", "p")

    def __init__(self, q, k, v, p):
        self.q, self.k, self.v, self.p = q, k, v, p


def attention_forward_step(n):
    cv = n.outputs[0]
    _, rq, rk, rv, _, scale, causal = n.args
    ro = n.result
    B, H, T, D = rq.shape
    np_dt = np.float32 if rq.dtype.name == "float32" else np.float64
    size = ro.value.size
    fwd_kernel = KERNELS[rq.dtype.name][0]

    def step(env):
        q, k, v = view(env[rq.value.id], rq), view(env[rk.value.id], rk), view(env[rv.value.id], rv)
        store = np.empty(size, np_dt)
        p = np.empty((B, H, T, T), np_dt)
        fwd_kernel(q, k, v, view(store, ro), p, np_dt(scale), causal)
        env[cv.id] = _AttentionState(q, k, v, p)
        env[ro.value.id] = store

    return step


def attention_backward_step(n, fwd, into=None):
    """The lowered backward of forward node ``fwd``. ``into``: (the Value of one buffer,
    its size, and the views of dQ, dK, dV inside it) when the gradients go there."""
    cv, rg = n.args[0].value, n.args[1]
    _, _, _, _, _, scale, causal = fwd.args
    res = n.result
    np_dt = np.float32 if rg.dtype.name == "float32" else np.float64
    bwd_kernel = KERNELS[rg.dtype.name][1]

    def step(env):
        st = env[cv.id]
        g = view(env[rg.value.id], rg)
        if into is not None:
            value, size, refs = into
            buf = np.empty(size, np_dt)
            grads = [view(buf, r) for r in refs]
            env[value.id] = buf
        else:
            grads = []
            for i, t in enumerate((st.q, st.k, st.v)):
                r = res[i]
                if isinstance(r, Ref):
                    store = np.empty(r.value.size, np_dt)
                    env[r.value.id] = store
                    grads.append(view(store, r))
                else:  # a gradient nobody asked for: computed into scratch
                    grads.append(np.empty(t.shape, np_dt))
        bwd_kernel(st.q, st.k, st.v, st.p, g, *grads, np_dt(scale), causal)

    return step


# ------------------------------------------------------------------ the pass
def _concat_target(g: Graph, i: int, bwd, users, live) -> tuple | None:
    """If nodes i+1.. are ``empty`` and three ``assign`` calls that copy the backward's
    dQ, dK and dV (each whole, read by nothing else) into disjoint blocks covering the new
    buffer, return (last assign's index, the buffer's final Value, its size, the views of
    dQ, dK, dV inside it); else None."""
    nodes = g.nodes
    if i + 4 >= len(nodes):
        return None
    e = nodes[i + 1]
    if e.fn != "empty" or len(e.outputs) != 1:
        return None
    res = bwd.result
    if not isinstance(res, tuple) or not all(isinstance(r, Ref) for r in res[:3]):
        return None
    buf = e.outputs[0]
    cur, views, size = buf, [], buf.size
    cover = np.zeros(size, np.int64)
    for j in range(3):
        a = nodes[i + 2 + j]
        if a.fn != "assign" or len(a.args) != 2 or a.kwargs or len(a.writes) != 1:
            return None
        dst, src = a.args
        r = res[j]
        if not (isinstance(dst, Ref) and isinstance(src, Ref)) or dst.value is not cur:
            return None
        if src.value is not r.value or [u.id for u in users.get(r.value.id, [])] != [a.id]:
            return None
        if r.value.id in live or cur.id in live:
            return None
        if users.get(cur.id, []) != [a] or tuple(src.shape) != tuple(dst.shape):
            return None
        if src.offset != 0 or not src.contiguous_whole() or r.value.size != int(np.prod(src.shape)):
            return None
        # entry p of dQ's storage is src's entry unravel(p), which the assign stores at
        # dst's position of that index: dQ's view inside the buffer, if that is strided
        pos = np.empty(r.value.size, np.int64)
        pos[:] = view(np.arange(size, dtype=np.int64), dst).reshape(-1)
        grid = view(np.arange(r.value.size, dtype=np.int64), r)
        want = pos[grid]
        o = r.offset
        strides = tuple(
            int(pos[o + s] - pos[o]) if n_ > 1 else 0 for s, n_ in zip(r.strides, r.shape)
        )
        moved = Ref(buf, r.shape, strides, int(pos[r.offset]), r.dtype, r.cls)
        if not np.array_equal(view(np.arange(size, dtype=np.int64), moved), want):
            return None
        if min(strides) < 0 or strides[-1] != 1:
            return None
        cover[want.reshape(-1)] += 1
        views.append(moved)
        cur = a.writes[0][1]
    if not np.all(cover == 1):
        return None
    return i + 4, cur, size, views


def lower_graph(g: Graph) -> int:
    """Give the fitting attention nodes lowered steps (``node.lowered``: a step factory);
    returns how many nodes were lowered. A backward whose gradients are only copied into
    one new buffer writes them there, and the copies leave the graph."""
    fwd_of = {}
    count = 0
    for n in g.nodes:
        if attention_fits(n):
            fwd_of[n.outputs[0].id] = n
            n.lowered = attention_forward_step
            count += 1
    if not fwd_of:
        return 0
    users, live = g.users(), g.live_values()
    kept, i = [], 0
    nodes = g.nodes
    while i < len(nodes):
        n = nodes[i]
        arg = n.args[0] if n.args else None
        if n.fn == "Attention.backward" and isinstance(arg, CtxArg) and arg.value.id in fwd_of:
            fwd = fwd_of[arg.value.id]
            target = _concat_target(g, i, n, users, live)
            if target is not None:
                last, value, size, views = target
                value.base, value.producer = None, n
                n.outputs = [value]
                n.result = Ref(value, (size,), (1,), 0, views[0].dtype, views[0].cls)
                n.lowered = lambda node, f=fwd, t=(value, size, views): attention_backward_step(
                    node, f, t
                )
                kept.append(n)
                count += 1
                i = last + 1
                continue
            n.lowered = lambda node, f=fwd: attention_backward_step(node, f)
            count += 1
        kept.append(n)
        i += 1
    g.nodes = kept
    return count
