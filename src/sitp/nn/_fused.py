"""Fused kernels of ``sitp.nn.functional``: one pass per row, forward beside backward.

Composing a loss from small ops (``log_softmax``, then ``gather``, then ``mean``)
writes every intermediate to memory and records a node for each. The three ops
here are written as single kernels instead, each with a :class:`Function` whose
backward is one kernel too:

* **cross-entropy** — log-softmax, negative log-likelihood, label smoothing and
  class weights in one pass over each row of logits; its gradient is
  ``softmax - target distribution``, scaled (chapter 1's formula, now a kernel);
* **layer norm** — mean, reciprocal standard deviation and the affine map in one
  pass; backward recomputes the normalized row from the saved mean and rstd;
* **masked softmax for attention** — scale, causal or explicit mask and softmax
  in place over the score rows; attention's backward recomputes the probabilities
  instead of saving them.

Every kernel takes contiguous rows (the launchers make them so) and accumulates
in float64, so float32 rows of any length keep their small terms.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .. import cpu
from .. import kernels as K
from ..autograd import Function
from ..ops import unbroadcast
from ..strides import broadcast_strides

_I64 = np.int64


def _flat(t):
    """The storage of a contiguous tensor as a flat numpy array (no copy)."""
    return t._storage[t._offset:t._offset + t.numel()]


def _new(shape, dtype):
    return cpu._new(shape, dtype)


# --8<-- [start:cross_entropy_kernel]
@njit(cache=True, error_model="numpy")
def cross_entropy_kernel(z, n_rows, C, target, w, ignore_index, eps, loss, p, stats):
    """Per-row loss of logits ``z`` (rows of C) against class indices ``target``.

    With p = softmax(z), w the class weights (ones when none are given) and
    label smoothing eps, row r with target t loses

        (1 - eps) * w[t] * (-log p[t])  +  (eps / C) * sum_c w[c] * (-log p[c])

    and -log p[c] = lse - z[c], with lse = log sum_c exp(z[c]). A row whose target
    is ``ignore_index`` loses 0 and weighs 0. Writes ``loss[r]`` and the row's
    probabilities into ``p`` (the backward needs them: saving them halves the
    number of exps, the expensive part); ``stats`` gets (sum of losses, sum of
    the rows' weights w[t]) for the reductions.
    Returns -1, or the first row whose target is out of [0, C).
    """
    w_all = 0.0
    for c in range(C):
        w_all += w[c]
    total = 0.0
    weight = 0.0
    for r in range(n_rows):
        o = r * C
        t = target[r]
        if t == ignore_index:
            loss[r] = 0.0
            continue
        if t < 0 or t >= C:
            return r
        m = z[o]                          # pass 1: the row max, for a stable exp
        for c in range(1, C):             # (m keeps z's dtype: float32 rows use expf)
            v = z[o + c]
            if v > m or v != v:
                m = v
        s = 0.0                           # pass 2: exp(z - m) and their sum (in float64)
        for c in range(C):
            e = math.exp(z[o + c] - m)
            p[o + c] = e
            s += e
        wz = 0.0
        if eps != 0.0:                    # sum of w * z, for the smoothing term
            for c in range(C):
                wz += w[c] * z[o + c]
        inv = 1.0 / s                     # pass 3: normalize
        for c in range(C):
            p[o + c] *= inv
        lse = m + math.log(s)
        row = (1.0 - eps) * w[t] * (lse - z[o + t])
        if eps != 0.0:
            row += eps / C * (w_all * lse - wz)
        loss[r] = row
        total += row
        weight += w[t]
    stats[0] = total
    stats[1] = weight
    return -1
# --8<-- [end:cross_entropy_kernel]


# --8<-- [start:cross_entropy_backward_kernel]
@njit(cache=True)
def cross_entropy_backward_kernel(p, n_rows, C, target, w, ignore_index, eps, g, g_step, dz):
    """d(loss)/dz for :func:`cross_entropy_kernel`: softmax minus the target distribution.

    For row r with target t, probabilities p and upstream gradient g[r * g_step]
    (``g_step`` is 0 for a reduced loss):

        dz[c] = g * ( p[c] * ((1 - eps) w[t] + eps/C * sum w)  -  (1 - eps) w[t] [c == t]  -  eps/C w[c] )

    which, without weights, is g * (p - ((1 - eps) one_hot(t) + eps / C)).
    Ignored rows get zero.
    """
    w_all = 0.0
    for c in range(C):
        w_all += w[c]
    for r in range(n_rows):
        o = r * C
        t = target[r]
        if t == ignore_index:
            for c in range(C):
                dz[o + c] = 0.0
            continue
        gr = g[r * g_step]
        a = gr * ((1.0 - eps) * w[t] + eps / C * w_all)
        b = gr * eps / C
        for c in range(C):
            dz[o + c] = p[o + c] * a - b * w[c]
        dz[o + t] -= gr * (1.0 - eps) * w[t]
# --8<-- [end:cross_entropy_backward_kernel]


class CrossEntropy(Function):
    """Fused cross-entropy of (R, C) logits against (R,) class indices."""

    @staticmethod
    def forward(ctx, z_RC, target_R, weight_C, ignore_index, eps, reduction):
        R, C = z_RC.shape
        z = z_RC.contiguous()
        t = target_R.contiguous()
        w = np.ones(C, z.dtype.np) if weight_C is None else _flat(weight_C.to(z.dtype).contiguous())
        loss = _new((R,), z.dtype)
        p = np.empty(R * C, z.dtype.np)
        stats = np.zeros(2, np.float64)
        bad = cross_entropy_kernel(_flat(z), R, C, _flat(t), w, ignore_index, eps,
                                   loss._storage, p, stats)
        if bad >= 0:
            raise IndexError(
                f"Target {int(_flat(t)[bad])} is out of bounds: cross_entropy expects class "
                f"indices in [0, {C}) or ignore_index={ignore_index} (logits of shape (R, C) = {(R, C)})")
        ctx.p, ctx.t, ctx.w, ctx.shape, ctx.dtype = p, t, w, (R, C), z.dtype
        ctx.ignore_index, ctx.eps, ctx.reduction = ignore_index, eps, reduction
        ctx.denom = stats[1]
        if reduction == "none":
            return loss
        value = stats[0] if reduction == "sum" else stats[0] / stats[1] if stats[1] else math.nan
        return loss._wrap_np(np.array([value], z.dtype.np), ())

    @staticmethod
    def backward(ctx, g):
        (R, C), p, dt = ctx.shape, ctx.p, ctx.dtype
        if ctx.reduction == "none":
            garr, step = _flat(g.to(dt).contiguous()), 1
        else:
            scale = g.item() / (ctx.denom if ctx.reduction == "mean" else 1.0)
            garr, step = np.array([scale], dt.np), 0
        dz = _new((R, C), dt)
        cross_entropy_backward_kernel(p, R, C, _flat(ctx.t), ctx.w, ctx.ignore_index,
                                      ctx.eps, garr, step, dz._storage)
        return dz, None, None, None, None, None


# --8<-- [start:layer_norm_kernel]
@njit(cache=True)
def layer_norm_kernel(x, n_rows, n, w, b, has_w, has_b, eps, y, mean, rstd):
    """y = (x - mean) * rstd * w + b over each row of n; saves mean and rstd per row.

    rstd = 1 / sqrt(var + eps), with the biased variance (divide by n), as
    PyTorch. Two passes over the row: the mean, then the squared deviations
    (more accurate than E[x^2] - E[x]^2 when the mean is large).
    """
    for r in range(n_rows):
        o = r * n
        s = 0.0
        for j in range(n):
            s += x[o + j]
        mu = s / n
        ss = 0.0
        for j in range(n):
            d = x[o + j] - mu
            ss += d * d
        rs = 1.0 / math.sqrt(ss / n + eps)
        mean[r] = mu
        rstd[r] = rs
        for j in range(n):
            v = (x[o + j] - mu) * rs
            if has_w:
                v *= w[j]
            if has_b:
                v += b[j]
            y[o + j] = v
# --8<-- [end:layer_norm_kernel]


# --8<-- [start:layer_norm_backward_kernel]
@njit(cache=True)
def layer_norm_backward_kernel(x, g, n_rows, n, w, has_w, mean, rstd, dx, dw, db):
    """Gradients of :func:`layer_norm_kernel` from upstream ``g`` (rows of n).

    With xhat = (x - mean) * rstd and gh = g * w (the gradient reaching xhat):

        dx = rstd * (gh - mean_j(gh) - xhat * mean_j(gh * xhat))
        dw = sum over rows of g * xhat,   db = sum over rows of g

    (the two means are what the row's mean and variance contribute).
    ``dw`` and ``db`` accumulate in float64 arrays.
    """
    for r in range(n_rows):
        o = r * n
        mu = mean[r]
        rs = rstd[r]
        a = 0.0
        c = 0.0
        for j in range(n):
            xh = (x[o + j] - mu) * rs
            gh = g[o + j] * w[j] if has_w else g[o + j]
            a += gh
            c += gh * xh
            dw[j] += g[o + j] * xh
            db[j] += g[o + j]
        a /= n
        c /= n
        for j in range(n):
            xh = (x[o + j] - mu) * rs
            gh = g[o + j] * w[j] if has_w else g[o + j]
            dx[o + j] = rs * (gh - a - xh * c)
# --8<-- [end:layer_norm_backward_kernel]


class LayerNorm(Function):
    """Layer norm over the last ``n`` entries of each row (weight/bias of n entries or None)."""

    @staticmethod
    def forward(ctx, x, weight, bias, n, eps):
        xc = x.contiguous()
        rows = xc.numel() // n if n else 0
        dt = x.dtype.np
        w = _flat(weight.to(x.dtype).contiguous()) if weight is not None else np.ones(1, dt)
        b = _flat(bias.to(x.dtype).contiguous()) if bias is not None else np.zeros(1, dt)
        y = _new(x.shape, x.dtype)
        mean = np.empty(rows, np.float64)
        rstd = np.empty(rows, np.float64)
        layer_norm_kernel(_flat(xc), rows, n, w, b, weight is not None, bias is not None,
                          float(eps), y._storage, mean, rstd)
        ctx.xc, ctx.w, ctx.mean, ctx.rstd, ctx.n = xc, w, mean, rstd, n
        ctx.has_w, ctx.shapes = weight is not None, (
            None if weight is None else weight.shape, None if bias is None else bias.shape)
        return y

    @staticmethod
    def backward(ctx, g):
        xc, n = ctx.xc, ctx.n
        gc = g.contiguous().to(xc.dtype)
        dx = _new(xc.shape, xc.dtype)
        dw = np.zeros(n, np.float64)
        db = np.zeros(n, np.float64)
        layer_norm_backward_kernel(_flat(xc), _flat(gc), ctx.mean.size, n, ctx.w, ctx.has_w,
                                   ctx.mean, ctx.rstd, dx._storage, dw, db)
        wshape, bshape = ctx.shapes
        need = ctx.needs_input_grad
        gw = dx._wrap_np(dw.astype(xc.dtype.np), wshape) if wshape is not None and need[1] else None
        gb = dx._wrap_np(db.astype(xc.dtype.np), bshape) if bshape is not None and need[2] else None
        return (dx if need[0] else None), gw, gb, None, None


# --8<-- [start:masked_softmax_kernel]
@njit(cache=True, error_model="numpy")
def masked_softmax_kernel(s, n_rows, n, L, scale, causal, mask_kind, mask, m_starts, m_step, p):
    """Attention probabilities, in one pass per row of scores ``s`` (rows of n keys).

    Row r is query i = r % L. Key j takes part when ``causal`` is off or j <= i
    (PyTorch's top-left aligned causal mask), and, with ``mask_kind`` 1 (bool),
    when mask[j] is True; with ``mask_kind`` 2 the float mask is added to the
    scaled score. The mask row of r starts at m_starts[r] and steps by m_step
    (0 for a dim broadcast along keys). A row where no key takes part gets all
    zeros -- what PyTorch's fused CPU kernels return -- not the NaN of 0/0.
    """
    for r in range(n_rows):
        o = r * n
        i = r % L
        m = -np.inf
        for j in range(n):
            v = s[o + j] * scale
            if causal and j > i:
                v = -np.inf
            if mask_kind == 1:
                if not mask[m_starts[r] + j * m_step]:
                    v = -np.inf
            elif mask_kind == 2:
                v += mask[m_starts[r] + j * m_step]
            p[o + j] = v
            if v > m or v != v:
                m = v
        if m == -np.inf:                  # nobody to attend to
            for j in range(n):
                p[o + j] = 0.0
            continue
        total = 0.0
        for j in range(n):
            e = math.exp(p[o + j] - m)
            p[o + j] = e
            total += e
        for j in range(n):
            p[o + j] /= total
# --8<-- [end:masked_softmax_kernel]


def masked_softmax(scores, mask, scale, causal):
    """softmax(scores * scale + mask) over the last dim, with a causal or bool mask.

    ``scores`` is a contiguous (..., L, S) tensor; ``mask`` is None, a bool tensor
    (True = attend) or a float tensor of the scores' dtype, broadcastable to it.
    """
    L, S = scores.shape[-2:]
    p = _new(scores.shape, scores.dtype)
    rows = scores.numel() // S if S else 0
    if rows == 0 or S == 0:
        return p
    if mask is None:
        kind, m, starts, step = 0, np.zeros(1, scores.dtype.np), np.zeros(1, _I64), 0
    else:
        kind = 1 if not mask.dtype.is_floating_point else 2
        st = broadcast_strides(mask.shape, mask._strides, scores.shape)
        starts = K.positions(np.asarray(scores.shape[:-1], _I64), np.asarray(st[:-1], _I64), mask._offset)
        m, step = mask._storage, st[-1]
    masked_softmax_kernel(_flat(scores), rows, S, L, float(scale), causal, kind, m, starts, step,
                          p._storage)
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


# --8<-- [start:attention]
class Attention(Function):
    """O = softmax(Q K^T * scale + mask) V in one node; backward recomputes P.

    Shapes: Q (..., L, D), K (..., S, D), V (..., S, Dv) with broadcast batch
    dims. Forward keeps Q, K, V (not the (L, S) probabilities), and backward
    rebuilds P from them -- the memory trade that flash attention makes, here
    without the tiling:

        dV = P^T dO,   dP = dO V^T,   dS = P * (dP - rowsum(dP * P)),
        dQ = dS K * scale,   dK = dS^T Q * scale,   d(float mask) = dS
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, causal):
        s_LS = cpu.matmul(q, k.mT)                  # (..., L, S)
        p_LS = masked_softmax(s_LS, mask, scale, causal)
        ctx.save_for_backward(q, k, v)
        ctx.mask, ctx.scale, ctx.causal = mask, scale, causal
        return cpu.matmul(p_LS, v)                  # (..., L, Dv)

    @staticmethod
    def backward(ctx, g):
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


# ---------------------------------------------------------------- binary losses
class BinaryCrossEntropy(Function):
    """Elementwise -(y log x + (1 - y) log(1 - x)), each log clamped at -100.

    The clamp keeps x = 0 and x = 1 finite, as PyTorch does; the gradient uses
    PyTorch's formula (x - y) / max(x (1 - x), 1e-12) rather than the clamp's
    zero, so a confident wrong prediction still gets a (large, finite) push.
    """

    @staticmethod
    def forward(ctx, x, y):
        log_x = x.log().clamp(min=-100.0)
        log_1mx = (1 - x).log().clamp(min=-100.0)
        ctx.save_for_backward(x, y, log_x, log_1mx)
        return -(y * log_x + (1 - y) * log_1mx)

    @staticmethod
    def backward(ctx, g):
        x, y, log_x, log_1mx = ctx.saved_tensors
        gx = g * (x - y) / (x * (1 - x)).clamp(min=1e-12) if ctx.needs_input_grad[0] else None
        gy = g * (log_1mx - log_x) if ctx.needs_input_grad[1] else None
        return gx, gy


class BinaryCrossEntropyWithLogits(Function):
    """Elementwise (1 - y) z + (1 + (pw - 1) y) softplus(-z), stable for any z.

    softplus(-z) = log(1 + exp(-z)) = max(-z, 0) + log1p(exp(-|z|)) never
    overflows. Gradients: dz = sigmoid(z) (1 + (pw - 1) y) - pw y (sigmoid(z) - y
    without pos_weight), dy = (pw - 1) softplus(-z) - z.
    """

    @staticmethod
    def forward(ctx, z, y, pos_weight):
        sp = (-z).relu() + (-z.abs()).exp().log1p()      # softplus(-z)
        coef = 1 if pos_weight is None else 1 + (pos_weight - 1) * y
        ctx.save_for_backward(z, y, sp)
        ctx.pos_weight = pos_weight
        return (1 - y) * z + coef * sp

    @staticmethod
    def backward(ctx, g):
        z, y, sp = ctx.saved_tensors
        pw = ctx.pos_weight
        s = z.sigmoid()
        if pw is None:
            gz = g * (s - y)
            gy = g * -z
        else:
            gz = g * (s * (1 + (pw - 1) * y) - pw * y)
            gy = g * ((pw - 1) * sp - z)
        nz, ny = ctx.needs_input_grad[:2]
        return (unbroadcast(gz, z.shape) if nz else None,
                unbroadcast(gy, y.shape) if ny else None, None)
