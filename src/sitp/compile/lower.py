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

import numba
import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from sitp.autograd.function import Context
from sitp.compile import kernels, runtime
from sitp.compile.graph import CtxArg, Graph, Ref, contiguous
from sitp.kernels.cpu import blas
from sitp.kernels.cpu import ops as cpu
from sitp.kernels.cpu.blas.packed import FASTMATH
from sitp.kernels.cpu.blas.small import gemm_small_set
from sitp.kernels.cpu.fused import layer_norm as ln_fused
from sitp.kernels.cpu.fused import linear as linear_fused
from sitp.kernels.cpu.vecmath import exp_f32


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
    # a storage the three gradients share: np.empty if they cover it, else zeros
    refs = [r for r in (res if isinstance(res, tuple) else ()) if isinstance(r, Ref)]
    covered = {
        r.value.id: sum(int(np.prod(q.shape)) for q in refs if q.value is r.value) == r.value.size
        for r in refs
    }

    def new_store(value):
        return (np.empty if covered[value.id] else np.zeros)(value.size, np_dt)

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
                    store = env.get(r.value.id)
                    if store is None:  # (dq, dk, dv may be windows of one storage)
                        store = new_store(r.value)
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
    count = lower_mlp(g)
    for n in g.nodes:
        if attention_fits(n):
            fwd_of[n.outputs[0].id] = n
            n.lowered = attention_forward_step
            count += 1
    if not fwd_of:
        return count
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


# ------------------------------------------------------------------ the MLP
# --8<-- [start:mlp_lowered]
def _whole(r, shape=None) -> bool:
    """Whether Ref ``r`` is its whole buffer, row-major (and of ``shape``)."""
    return (
        isinstance(r, Ref)
        and r.contiguous_whole()
        and int(np.prod(r.shape)) == r.value.size
        and (shape is None or tuple(r.shape) == tuple(shape))
    )


def _strided_rows(r) -> bool:
    """Whether Ref ``r`` is a matrix whose rows are each contiguous, a fixed stride apart
    within its buffer: a time step's slice of an RNN's (batch, time, width) states, or
    one row broadcast to all (stride 0: an initial state expanded to the batch)."""
    if (
        not isinstance(r, Ref)
        or len(r.shape) != 2
        or any(not isinstance(x, int) for x in (*r.shape, *r.strides, r.offset))
    ):
        return False  # fmt: skip
    (M, K), (rs, cs) = r.shape, r.strides
    last = r.offset + (M - 1) * rs + K  # one past the last entry read
    return (
        M > 0 and K > 0 and cs == 1 and (rs >= K or rs == 0) and r.offset >= 0
        and last <= r.value.size
    )  # fmt: skip


def _linear_fits(n, rows: bool = False) -> bool:
    """A ``Linear.forward`` node on whole row-major x (..., K), W (N, K) and b (N,) or
    None, of one float dtype, with a result that is its whole buffer; with ``rows``, x
    may also be a matrix of rows a stride apart (:func:`_strided_rows`)."""
    if n.fn != "Linear.forward" or len(n.args) != 4 or n.kwargs:
        return False
    _, x, w, b = n.args
    x_fits = _whole(x) or (rows and _strided_rows(x))
    if not (x_fits and _whole(w) and len(w.shape) == 2 and _whole(n.result)):
        return False
    if b is not None and not _whole(b, (w.shape[0],)):
        return False
    dts = {t.dtype.name for t in (x, w, b) if t is not None}
    return dts <= set(_LOWERED_DTYPES) and len(dts) == 1 and x.shape[-1] == w.shape[1]


def _only_reader(users, value, fn):
    """The one node that reads ``value``, if it is a call of ``fn``."""
    us = users.get(value.id, [])
    return us[0] if len(us) == 1 and us[0].fn == fn else None


def _tensor(r: Ref, env, shape=None):
    """The tensor of Ref ``r`` (a whole buffer) in this call, seen with ``shape``."""
    shape = tuple(r.shape) if shape is None else shape
    return r.cls._make(env[r.value.id], shape, contiguous(shape), 0, r.dtype)


def _linear_context(cv, x_MK, w, x_shape):
    """The Context that ``Linear.forward`` leaves for its backward."""
    ctx = Context()
    if cv.array is not None:
        ctx.needs_input_grad = cv.array
    ctx.save_for_backward(x_MK, w)
    ctx.x_shape = x_shape
    return ctx


def linear_step(n):
    """A ``Linear.forward`` as a step on arrays: eager's one GEMM from the bias, without
    the tensor calls around it."""
    cv = n.outputs[0]
    _, rx, rw, rb = n.args
    rh = n.result
    M, K = int(np.prod(rx.shape[:-1])), rx.shape[-1]
    N = rw.shape[0]
    x_shape = tuple(rx.shape)
    if not _whole(rx):  # rows a stride apart (_strided_rows): their view, as eager sees x

        def step(env):
            xa = runtime._view(env[rx.value.id], rx)
            ba = env[rb.value.id] if rb is not None else None
            env[rh.value.id] = blas.matmul(xa, env[rw.value.id].reshape(N, K).T, ba).reshape(-1)
            env[cv.id] = _linear_context(cv, runtime.make(rx, env), _tensor(rw, env), x_shape)

        return step

    def step(env):
        xa, wa = env[rx.value.id].reshape(M, K), env[rw.value.id].reshape(N, K)
        ba = env[rb.value.id] if rb is not None else None
        env[rh.value.id] = blas.matmul(xa, wa.T, ba).reshape(-1)
        env[cv.id] = _linear_context(cv, _tensor(rx, env, (M, K)), _tensor(rw, env), x_shape)

    return step


def _linear_backward_parts(n):
    """(ctx Value, g Ref, (dx, dW, db) Refs or None) of a ``Linear.backward`` node whose
    gradient is whole and row-major and whose results are new whole buffers."""
    if n.fn != "Linear.backward" or len(n.args) != 2 or n.kwargs:
        return None
    c, rg = n.args
    res = n.result
    if not (isinstance(c, CtxArg) and _whole(rg)) or not isinstance(res, tuple) or len(res) != 3:
        return None
    if not all(r is None or (_whole(r) and r.value.producer is n) for r in res):
        return None
    if rg.dtype.name not in _LOWERED_DTYPES:
        return None
    return c.value, rg, res


def _put(env, r, arr):
    if r is not None:
        env[r.value.id] = arr.reshape(-1)


def _linear_backward_inputs(env, cv, rg):
    """A lowered ``Linear.backward``'s operands: its Context, the saved input, the weight
    (N, K) as an array and the output's gradient as (M, N) rows."""
    ctx = env[cv.id]
    x_MK, w = ctx.saved_tensors
    wa = cpu.as_numpy(w)
    return ctx, x_MK, wa, env[rg.value.id].reshape(-1, wa.shape[0])


def _weight_grads(env, ctx, x_MK, g, rdw, rdb, np_dt):
    """dW = g^T x and db = the column sums of g, as eager's ``Linear.backward``, for the
    ones the Context needs and the graph reads (``rdw``, ``rdb`` not None)."""
    _, need_w, need_b = ctx.needs_input_grad
    if need_w and rdw is not None:
        _put(env, rdw, blas.matmul(g.T, cpu.as_numpy(x_MK)))
    if need_b and rdb is not None:
        db = np.empty(g.shape[1], np_dt)
        linear_fused.column_sum(g, db)
        _put(env, rdb, db)


def linear_backward_step(parts):
    """A ``Linear.backward`` as a step on arrays: dX, dW and db as eager."""
    cv, rg, (rdx, rdw, rdb) = parts
    np_dt = rg.value.np_dtype

    def step(env):
        ctx, x_MK, wa, g = _linear_backward_inputs(env, cv, rg)
        if ctx.needs_input_grad[0] and rdx is not None:
            _put(env, rdx, blas.matmul(g, wa))
        _weight_grads(env, ctx, x_MK, g, rdw, rdb, np_dt)

    return step


def lower_mlp(g: Graph) -> int:
    """Lower each ``Linear`` chain that :func:`lower_residual_norm` fuses, then the other
    ``Linear.forward`` nodes into :func:`linear_step` and their backwards into
    :func:`linear_backward_step`, and the cross-entropy into :func:`cross_entropy_step`;
    returns how many nodes were lowered. (The MLP's GELU is no longer lowered here: the
    rules of ``rules.py`` decompose it and fuse it into the products as their epilogue.)"""
    count = lower_residual_norm(g)
    linear_ctx = set()
    for n in g.nodes:  # the other Linears: steps on arrays; the loss
        if n.lowered is None and cross_entropy_fits(n):
            n.lowered = cross_entropy_step
            count += 1
            continue
        if n.lowered is None and _linear_fits(n, rows=True):
            n.lowered = linear_step
            linear_ctx.add(n.outputs[0].id)
            count += 1
        elif n.lowered is None and (parts := _linear_backward_parts(n)) is not None:
            if parts[0].id in linear_ctx or _is_lowered_linear(parts[0]):
                n.lowered = lambda node, p=parts: linear_backward_step(p)
                count += 1
    return count


def _norm_after_residual(g, i, n, users, index):
    """For ``Linear.forward`` node n (at index i): the ``binary`` add that is the only
    reader of its result, r + n's result with r made before n, and a ``LayerNorm.forward``
    over the rows of that sum; (add node, r's Ref, norm node) or None."""
    a = _only_reader(users, n.result.value, "binary")
    if a is None or a.kwargs or len(a.args) not in (3, 4) or a.args[0] != "add":
        return None
    if len(a.outputs) != 1 or a.writes or (len(a.args) == 4 and a.args[3] is not None):
        return None
    p, q = a.args[1:3]
    shape = tuple(n.result.shape)
    if not (_whole(p, shape) and _whole(q, shape) and _whole(a.result, shape)):
        return None
    r = p if q.value is n.result.value else q if p.value is n.result.value else None
    if r is None or r.value is n.result.value or r.dtype is not n.result.dtype:
        return None
    if r.value.producer is not None and index.get(r.value.producer.id, i) >= i:
        return None  # the residual must be there when n runs
    for ln in users.get(a.result.value.id, []):
        if ln.fn != "LayerNorm.forward" or len(ln.args) != 6 or ln.kwargs:
            continue
        _, x, lw, lb, width, eps = ln.args
        if x.value is not a.result.value or not _whole(x, shape) or width != shape[-1]:
            continue
        if not isinstance(eps, float) or not _whole(ln.result, shape) or len(ln.outputs) != 2:
            continue
        if not all(t is None or _whole(t, (width,)) for t in (lw, lb)):
            continue
        if any(t is not None and t.dtype is not r.dtype for t in (lw, lb)):
            continue
        if any(
            t is not None
            and t.value.producer is not None
            and index.get(t.value.producer.id, i) >= i
            for t in (lw, lb)
        ):
            continue
        return a, r, ln
    return None


def linear_residual_norm_step(n, rr, ln):
    """The lowered ``Linear.forward``, the residual add after it and the ``LayerNorm``
    of the sum: s = r + (x W^T + b) and y = layer_norm(s) in one pass over row blocks;
    the Linear's result itself is never stored. Both Contexts as eager's."""
    cv = n.outputs[0]
    _, rx, rw, rb = n.args[:4]
    cv_ln, rs_y = ln.outputs[0], ln.result
    _, rs, rlw, rlb, width, eps = ln.args
    M, K = int(np.prod(rx.shape[:-1])), rx.shape[-1]
    N = rw.shape[0]
    np_dt = rs.value.np_dtype
    x_shape = tuple(rx.shape)
    shapes = (None if rlw is None else tuple(rlw.shape), None if rlb is None else tuple(rlb.shape))

    def step(env):
        xa, wa = env[rx.value.id].reshape(M, K), env[rw.value.id].reshape(N, K)
        ba = env[rb.value.id] if rb is not None else np.empty(0, np_dt)
        lw = env[rlw.value.id] if rlw is not None else np.ones(1, np_dt)
        lb = env[rlb.value.id] if rlb is not None else np.zeros(1, np_dt)
        r = env[rr.value.id].reshape(M, N)
        s, y = np.empty(M * N, np_dt), np.empty(M * N, np_dt)
        mean, rstd = np.empty(M, np.float64), np.empty(M, np.float64)
        if numba.get_num_threads() == 1:
            kernels.linear_residual_norm(
                xa,
                wa,
                ba,
                rb is not None,
                r,
                s.reshape(M, N),
                lw,
                lb,
                rlw is not None,
                rlb is not None,
                float(eps),
                y.reshape(M, N),
                mean,
                rstd,
            )
        else:  # eager's kernels, which use the threads
            out = blas.matmul(xa, wa.T, ba if rb is not None else None)
            np.add(r, out, out=s.reshape(M, N))
            ln_fused.layer_norm_forward(
                s, M, N, lw, lb, rlw is not None, rlb is not None, float(eps), y, mean, rstd
            )
        env[cv.id] = _linear_context(cv, _tensor(rx, env, (M, K)), _tensor(rw, env), x_shape)
        env[rs.value.id] = s
        env[rs_y.value.id] = y
        ctx = Context()
        if cv_ln.array is not None:
            ctx.needs_input_grad = cv_ln.array
        ctx.xc, ctx.w, ctx.mean, ctx.rstd, ctx.n = _tensor(rs, env), lw, mean, rstd, width
        ctx.has_w, ctx.shapes = rlw is not None, shapes
        env[cv_ln.id] = ctx

    return step


def lower_residual_norm(g: Graph) -> int:
    """Lower each ``Linear.forward`` -> residual add -> ``LayerNorm.forward`` chain into
    :func:`linear_residual_norm_step`: the add and the norm leave the graph, their
    results and the norm's Context become the Linear's."""
    users = g.users()
    index = {n.id: i for i, n in enumerate(g.nodes)}
    gone, count = set(), 0
    for i, n in enumerate(g.nodes):
        if n.lowered is not None or n.id in gone or not _linear_fits(n):
            continue
        found = _norm_after_residual(g, i, n, users, index)
        if found is None:
            continue
        a, rr, ln = found
        if a.id in gone or ln.id in gone:
            continue
        s_value = a.outputs[0]
        for v in [s_value] + list(ln.outputs):
            v.producer = n
        n.outputs = [n.outputs[0], s_value] + list(ln.outputs)
        _, _, rlw, rlb, _, _ = ln.args
        n.args = n.args + (rr, rlw, rlb)  # what the step reads besides x, W, b
        n.lowered = lambda node, r=rr, m=ln: linear_residual_norm_step(node, r, m)
        gone |= {a.id, ln.id}
        count += 1
    g.nodes = [n for n in g.nodes if n.id not in gone]
    return count


def cross_entropy_fits(n) -> bool:
    """A ``CrossEntropy.forward`` of whole (R, C) float logits against (R,) int64 targets,
    without class weights or label smoothing, reduced by 'mean' or 'sum'."""
    if n.fn != "CrossEntropy.forward" or len(n.args) != 7 or n.kwargs:
        return False
    _, z, t, w, ignore, eps, reduction = n.args
    if w is not None or eps != 0 or reduction not in ("mean", "sum"):
        return False
    if not (_whole(z) and len(z.shape) == 2 and z.shape[1] > 0 and _whole(t, z.shape[:1])):
        return False
    return (
        z.dtype.name in _LOWERED_DTYPES
        and t.dtype.name == "int64"
        and isinstance(ignore, int)
        and isinstance(n.result, Ref)
    )


def cross_entropy_step(n):
    """``CrossEntropy.forward`` with :func:`kernels.cross_entropy_rows`; the Context is
    the one eager's forward leaves, so that eager's backward reads it."""
    cv = n.outputs[0]
    _, rz, rt, _, ignore, eps, reduction = n.args
    R, C = rz.shape
    np_dt = rz.value.np_dtype
    dt = rz.dtype

    def step(env):
        z, t = env[rz.value.id], env[rt.value.id]
        loss = np.empty(R, np_dt)
        p = np.empty(R * C, np_dt)
        stats = np.zeros(2, np.float64)
        bad = kernels.cross_entropy_rows(z, R, C, t, ignore, loss, p, stats)
        if bad >= 0:
            raise IndexError(
                f"Target {int(t[bad])} is out of bounds: cross_entropy expects class "
                f"indices in [0, {C}) or ignore_index={ignore} (logits of shape (R, C) = {(R, C)})"
            )
        ctx = Context()
        if cv.array is not None:
            ctx.needs_input_grad = cv.array
        ctx.p, ctx.t, ctx.w, ctx.shape, ctx.dtype = (
            p,
            _tensor(rt, env),
            np.ones(C, np_dt),
            (R, C),
            dt,
        )
        ctx.ignore_index, ctx.eps, ctx.reduction = ignore, eps, reduction
        ctx.denom = stats[1]
        env[cv.id] = ctx
        total = stats[0] if reduction == "sum" else stats[0] / stats[1] if stats[1] else math.nan
        env[n.result.value.id] = np.array([total], np_dt)

    return step


def _is_lowered_linear(cv) -> bool:
    """Whether Context Value ``cv`` is left by a lowered Linear forward."""
    p = cv.producer
    return p is not None and p.fn == "Linear.forward" and p.lowered is not None


# --8<-- [end:mlp_lowered]
