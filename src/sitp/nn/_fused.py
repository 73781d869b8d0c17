"""Fused kernels of ``sitp.nn.functional``: one pass per row, forward beside backward.

Composing a loss from small ops (``log_softmax``, then ``gather``, then ``mean``)
writes every intermediate to memory and records a node for each. The ops
here are written as single kernels instead, each with a :class:`Function` whose
backward is one kernel too:

* **cross-entropy** — log-softmax, negative log-likelihood, label smoothing and
  class weights in one pass over each row of logits; its gradient is
  ``softmax - target distribution``, scaled (chapter 1's formula, now a kernel);
* **layer norm** — mean, reciprocal standard deviation and the affine map in one
  pass; backward recomputes the normalized row from the saved mean and rstd;
* **masked softmax for attention** — scale, causal or explicit mask and softmax
  in place over the score rows (used when attention applies dropout);
* **attention** — flash-style on the CPU: per block of query rows, scores,
  masked softmax and P V in one kernel that reads q, k, v through their strides;
  it saves one logsumexp per row, and the backward kernel recomputes P from it.

Every other kernel takes contiguous rows (the launchers make them so) and
accumulates in float64, so float32 rows of any length keep their small terms;
attention computes float32 in float32, as PyTorch does, with row sums in float64.
"""

from __future__ import annotations

import math

import numpy as np
from numba import get_num_threads, njit, prange

from sitp.backends.cpu import ops as cpu
from sitp.backends.cpu.ops import flat as _flat
from sitp.backends.cpu import kernels as K
from sitp.autograd.function import Function
from sitp.backends.cpu.vecmath import exp_f32
from sitp.backends.cpu.blas.small import gemm_small
from sitp.dtypes import bool_
from sitp.autograd.derivatives import unbroadcast
from sitp.strides import broadcast_shapes, broadcast_strides, numel

_I64 = np.int64


def _new(shape, dtype):
    return cpu._new(shape, dtype)


# --8<-- [start:cross_entropy_kernel]
@njit(cache=True, error_model="numpy")
def cross_entropy_kernel(z, n_rows, C, target, w, ignore_index, eps, loss, p, stats):
    """Per-row loss of logits ``z`` (rows of C) against class indices ``target``.

    With p = softmax(z), w the class weights (ones when none are given) and
    label smoothing eps, row r with target t loses

        (1 - eps) * w[t] * (-log p[t])  +  (eps / C) * sum_c w[c] * (-log p[c])

    and -log p[c] = log s - (z[c] - m), with m the row max and s = sum_c exp(z[c] - m)
    (not lse - z[c] with lse = m + log s: for |z| >~ 1e8, m + log s rounds to m). A row whose target
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
        if eps != 0.0:                    # sum of w * (z - m), for the smoothing term
            for c in range(C):
                wz += w[c] * (z[o + c] - m)
        inv = 1.0 / s                     # pass 3: normalize
        for c in range(C):
            p[o + c] *= inv
        ls = math.log(s)
        row = (1.0 - eps) * w[t] * (ls - (z[o + t] - m))
        if eps != 0.0:
            row += eps / C * (w_all * ls - wz)
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
# The sums over a row may be reordered ("reassoc"): LLVM then adds 8 or 16 lanes at
# a time instead of one value after another, whose chain of dependent adds would be
# most of the kernels' time on rows of 64. No "nnan"/"ninf": NaN and inf keep
# their meaning.
_LN_FAST = {"reassoc", "contract"}


@njit(cache=True, fastmath=_LN_FAST)
def layer_norm_kernel(x, n_rows, n, w, b, has_w, has_b, eps, y, mean, rstd):
    """y = (x - mean) * rstd * w + b over each row of n; saves mean and rstd per row.

    rstd = 1 / sqrt(var + eps), with the biased variance (divide by n), as
    PyTorch. Two passes over the row: the mean, then the squared deviations
    (more accurate than E[x^2] - E[x]^2 when the mean is large).
    """
    for r in range(n_rows):
        xr, yr = x[r * n:(r + 1) * n], y[r * n:(r + 1) * n]  # slices: no negative-index checks
        s = 0.0
        for j in range(n):
            s += xr[j]
        mu = s / n
        ss = 0.0
        for j in range(n):
            d = xr[j] - mu
            ss += d * d
        rs = 1.0 / math.sqrt(ss / n + eps)
        mean[r] = mu
        rstd[r] = rs
        if has_w and has_b:                  # one branch-free loop per case
            for j in range(n):
                yr[j] = (xr[j] - mu) * rs * w[j] + b[j]
        elif has_w:
            for j in range(n):
                yr[j] = (xr[j] - mu) * rs * w[j]
        elif has_b:
            for j in range(n):
                yr[j] = (xr[j] - mu) * rs + b[j]
        else:
            for j in range(n):
                yr[j] = (xr[j] - mu) * rs
# --8<-- [end:layer_norm_kernel]


# Inputs at least this large (about 30 us of layer norm on one core) have their rows
# split among numba's threads in the forward (the backward sums dw and db over rows).
_PARALLEL_ROWS_MIN = 1 << 16


@njit(cache=True, parallel=True)
def layer_norm_parallel(x, n_rows, n, w, b, has_w, has_b, eps, y, mean, rstd, n_chunks):
    """layer_norm_kernel on n_chunks bands of rows at once, one per thread."""
    for c in prange(n_chunks):
        r0, r1 = c * n_rows // n_chunks, (c + 1) * n_rows // n_chunks
        layer_norm_kernel(x[r0 * n:r1 * n], r1 - r0, n, w, b, has_w, has_b, eps,
                          y[r0 * n:r1 * n], mean[r0:r1], rstd[r0:r1])


# --8<-- [start:layer_norm_backward_kernel]
@njit(cache=True, fastmath=_LN_FAST)
def layer_norm_backward_kernel(x, g, n_rows, n, w, has_w, mean, rstd, dx, dw, db):
    """Gradients of :func:`layer_norm_kernel` from upstream ``g`` (rows of n).

    With xhat = (x - mean) * rstd and gh = g * w (the gradient reaching xhat):

        dx = rstd * (gh - mean_j(gh) - xhat * mean_j(gh * xhat))
        dw = sum over rows of g * xhat,   db = sum over rows of g

    (the two means are what the row's mean and variance contribute).
    ``dw`` and ``db`` accumulate in float64 arrays.
    """
    if not has_w:
        w = np.ones(n, x.dtype)
    for r in range(n_rows):
        xr, gr, dxr = x[r * n:(r + 1) * n], g[r * n:(r + 1) * n], dx[r * n:(r + 1) * n]
        mu = mean[r]
        rs = rstd[r]
        a = 0.0
        c = 0.0
        for j in range(n):
            xh = (xr[j] - mu) * rs
            gh = gr[j] * w[j]
            a += gh
            c += gh * xh
            dw[j] += gr[j] * xh
            db[j] += gr[j]
        a /= n
        c /= n
        for j in range(n):
            xh = (xr[j] - mu) * rs
            dxr[j] = rs * (gr[j] * w[j] - a - xh * c)
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
        threads = get_num_threads() if rows * n >= _PARALLEL_ROWS_MIN else 1
        if threads > 1:
            layer_norm_parallel(_flat(xc), rows, n, w, b, weight is not None, bias is not None,
                                float(eps), y._storage, mean, rstd, threads)
        else:
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


# Fast-math flags for the attention kernels: let LLVM reorder sums and fuse
# multiply-adds (so the row sums vectorise), but *not* assume away NaN and inf:
# masked keys are -inf, an empty row's logsumexp is +inf, and NaN must propagate.
_FAST = {"contract", "reassoc", "nsz", "arcp"}


_LOG2E = 1.4426950408889634
_LN2_HI = 0.6931471803691238           # ln 2 split in two: k * _LN2_HI is exact for |k| < 2^11
_LN2_LO = 1.9082149292705877e-10


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _exp_rows64(x, n, shift):
    """x[:n] = exp(x[:n] - shift) for x <= shift (the softmax's s - max), vectorised.

    ``math.exp`` is a libm call per element, which no loop around it vectorises,
    and it is most of attention's time. Here exp(y) = 2^k exp(r) with k = round(y
    / ln 2), |r| <= ln 2 / 2: exp(r) by its Taylor polynomial to degree 12 (error
    < 2e-16, relative), and 2^k made by writing k + 1023 into a float's exponent
    bits. Adding 1.5 * 2^52 rounds y / ln 2 to the integer k and leaves k in the
    sum's low bits. y < -708 (2^k would be subnormal) gives 0; NaN stays NaN.
    Not compiled with ``reassoc``: that would fold (z + 1.5 * 2^52) - 1.5 * 2^52
    back into z.
    """
    big = 6755399441055744.0              # 1.5 * 2^52
    for t in range(n):
        y = x[t] - shift
        under = y < -708.0
        y = -708.0 if under else y
        z = y * _LOG2E + big
        k = z - big
        r = (y - k * _LN2_HI) - k * _LN2_LO
        p = 1.0 / 479001600.0
        p = p * r + 1.0 / 39916800.0
        p = p * r + 1.0 / 3628800.0
        p = p * r + 1.0 / 362880.0
        p = p * r + 1.0 / 40320.0
        p = p * r + 1.0 / 5040.0
        p = p * r + 1.0 / 720.0
        p = p * r + 1.0 / 120.0
        p = p * r + 1.0 / 24.0
        p = p * r + 1.0 / 6.0
        p = p * r + 0.5
        p = p * r + 1.0
        p = p * r + 1.0
        e = np.float64(z).view(np.int64) - 0x4338000000000000 + 1023   # k + 1023
        two_k = np.int64(e << 52).view(np.float64)
        x[t] = 0.0 if under else p * two_k


@njit(cache=True, error_model="numpy")
def _exp_rows32(x, n, shift):
    """_exp_rows64 in float32 arithmetic (8 lanes a vector), with
    :func:`sitp.backends.cpu.vecmath.exp_f32`; masked keys (-inf) give 0."""
    sh = np.float32(shift)
    for t in range(n):
        x[t] = exp_f32(np.float32(x[t] - sh))   # (typed for float64 rows too; never run on them)


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _exp_block64(s, n, shifts):
    """s[r, :n] = exp(s[r, :n] - shifts[r]) for every row r: one call for a block of
    rows, not one a row (a call into another compiled function costs about as much
    as the exp of a 32-key row)."""
    for r in range(s.shape[0]):
        _exp_rows64(s[r], n, shifts[r])


@njit(cache=True, error_model="numpy")
def _exp_block32(s, n, shifts):
    """_exp_block64 in float32, with :func:`sitp.backends.cpu.vecmath.exp_f32`."""
    for r in range(s.shape[0]):
        row = s[r]
        sh = np.float32(shifts[r])
        for t in range(n):
            row[t] = exp_f32(np.float32(row[t] - sh))


@njit(cache=True, inline="always")
def _exp_block(s, n, shifts):
    """s[r, :n] = exp(s[r, :n] - shifts[r]) for each row r, in s's precision."""
    if s.itemsize == 4:
        _exp_block32(s, n, shifts)
    else:
        _exp_block64(s, n, shifts)


@njit(cache=True, inline="always")
def _batch_positions(b, bshape, st, off, pos):
    """Storage offsets of batch entry ``b`` (row-major over ``bshape``) in each
    operand: ``pos[t] = off[t] + sum_a index_a * st[t, a]``."""
    for t in range(pos.size):
        pos[t] = off[t]
    rem = b
    for a in range(bshape.size - 1, -1, -1):
        ia = rem % bshape[a]
        rem //= bshape[a]
        for t in range(pos.size):
            pos[t] += ia * st[t, a]


@njit(cache=True, inline="always")
def _read(dst, x, start, step, n, scale):
    """dst[:n] = x[start + c * step] * scale; a unit step gets its own loop, one
    LLVM vectorises (a step known only at run time stops it)."""
    if step == 1:
        for c in range(n):
            dst[c] = x[start + c] * scale
    else:
        for c in range(n):
            dst[c] = x[start + c * step] * scale


@njit(cache=True, inline="always")
def _write(x, start, step, src, n, scale, add):
    """x[start + c * step] (+)= src[:n] * scale (added when ``add``), as _read."""
    if step == 1:
        for c in range(n):
            x[start + c] = src[c] * scale + (x[start + c] if add else 0)
    else:
        for c in range(n):
            x[start + c * step] = src[c] * scale + (x[start + c * step] if add else 0)


@njit(cache=True, inline="always")
def _load(x, xb, x_row, x_col, n, d, dst, transpose):
    """Copy one head's (n, d) operand from strided storage into scratch ``dst``,
    (d, n) when ``transpose``. The copy reads any strides (a transposed or
    broadcast view costs nothing extra) and is O(n d), against the O(L S d) of
    the products that use it, which then run on contiguous rows.
    """
    if transpose:
        for c in range(d):
            _read(dst[c], x, xb + c * x_col, x_row, n, 1)
    else:
        for j in range(n):
            _read(dst[j], x, xb + j * x_row, x_col, d, 1)


@njit(cache=True, inline="always")
def _tile(buf, rows, cols):
    """A C-contiguous (rows, cols) view of the front of the flat scratch ``buf``.

    gemm_small's register tiles are only fast when C (the product) is
    C-contiguous -- a column slice of a wider array is not -- so each row block's
    scores get a fresh (rows, cols) shape over the same memory.
    """
    return buf[:rows * cols].reshape((rows, cols))


@njit(cache=True, inline="always")
def _mask_row(row, hi, mask_kind, mask, m_start, m_step):
    """Apply the mask to the scores row[:hi]: a bool mask's False -> -inf, a float
    mask is added (its -inf entries too)."""
    if mask_kind == 1:
        for j in range(hi):
            if not mask[m_start + j * m_step]:
                row[j] = -np.inf
    elif mask_kind == 2:
        for j in range(hi):
            row[j] += mask[m_start + j * m_step]


@njit(cache=True, fastmath={"nnan", "nsz", "reassoc"})
def _rows_max(s, n, out):
    """out[r] = max(s[r, :n]) of the entries that are not NaN, -inf when there are
    none, for every row r of the block.

    Compiled with ``nnan`` so that LLVM vectorises the max (without it, a
    compare-and-select reduction stays scalar). A NaN in the row still reaches
    the output: exp(NaN - m) is NaN, and so is the row's sum.
    """
    for r in range(s.shape[0]):
        m = -np.inf
        for j in range(n):
            x = s[r, j]
            m = x if x > m else m
        out[r] = m


@njit(cache=True, inline="always")
def _causal_tail(row, hi, hp):
    """row[hi:hp] = -inf: keys past the causal limit inside the row block's last
    columns, so that the vectorised max / exp / sum run over the block's full
    width hp (exp gives them 0) instead of a ragged hi per row."""
    for j in range(hi, hp):
        row[j] = -np.inf


@njit(cache=True, inline="always")
def _has_nan(row, n):
    for j in range(n):
        if row[j] != row[j]:
            return True
    return False


# Query rows per block. One (_BR, S) block of scores (and, in the backward, of
# dP) lives in scratch at a time: attention's memory stays O(L) per head
# (the logsumexps) plus O(_BR S) per thread.
_BR = 32


# --8<-- [start:attention_cpu_forward]
@njit(cache=True, error_model="numpy", fastmath=_FAST)
def attention_forward_kernel(b_lo, b_hi, q, k, v, mask, out, lse, bshape, st, off,
                             L, S, D, Dv, scale, causal, mask_kind):
    """O = softmax(Q K^T * scale + mask) V for batch entries b_lo..b_hi-1, flash-style.

    q, k, v, mask and out are flat storages; batch entry b of operand t starts at
    off[t] + its batch index . st[t, :nb], and steps st[t, nb] per row, st[t, nb+1]
    per column (t = 0 q, 1 k, 2 v, 3 mask, 4 out): no operand is copied to be
    made contiguous. Per head, K^T and V are read once into scratch of q's dtype
    (float32 computes in float32, as PyTorch does; sums of a row in float64);
    then per block of _BR query rows, which may see keys 0..hp-1 (causal: key
    j <= query i, PyTorch's top-left alignment -- later keys are never touched):

    1. S = (Q * scale) K^T by gemm_small;
    2. per row, the mask (bool: False -> -inf; float: added; causal: -inf past
       the row's own limit); then for the whole block the row maxima m and
       p = exp(s - m) by the vectorised _exp_block (0 for -inf); each row
       divided by its sum. A masked key costs one
       lane of a vector exp: cheaper than gathering the kept keys to skip it;
    3. O = P V by gemm_small, written through out's strides.

    Saves the row's max and 1 / sum (lse[b * L + i] = m, lse[N + b * L + i] = 1 / sum,
    N = lse.size // 2): the backward rebuilds P = exp(s - m) / sum from them, exactly
    as here. (Not one logsumexp m + log(sum): for scores beyond ~1e8 that rounds to
    m, and exp(s - lse) would be 1 for every key at the max.) A row with no key
    left (m = -inf) gets zeros and m = +inf, so exp(s - m) = 0 there in the
    backward: no gradient -- as PyTorch's CPU kernels. NaN stays NaN.
    """
    nb = bshape.size
    NL = lse.size // 2
    pos = np.empty(5, _I64)
    dt = q.dtype                          # float32 inputs compute in float32, as PyTorch's
    kT = np.empty((D, S), dt)             # this head's K^T and V
    vm = np.empty((S, Dv), dt)
    qb = np.empty((_BR, D), dt)           # one block of query rows, times scale
    sbuf = np.empty(_BR * S, dt)          # their scores, then probabilities
    ob = np.empty((_BR, Dv), dt)
    mb = np.empty(_BR)                    # the block's row maxima, and the shifts of its exps
    shift = np.empty(_BR)
    for b in range(b_lo, b_hi):
        _batch_positions(b, bshape, st, off, pos)
        _load(k, pos[1], st[1, nb], st[1, nb + 1], S, D, kT, True)
        _load(v, pos[2], st[2, nb], st[2, nb + 1], S, Dv, vm, False)
        for i0 in range(0, L, _BR):
            nr = min(_BR, L - i0)
            hp = min(i0 + nr, S) if causal else S
            sb = _tile(sbuf, nr, hp)
            sb[:] = 0.0
            ob[:nr] = 0.0
            for r in range(nr):
                _read(qb[r], q, pos[0] + (i0 + r) * st[0, nb], st[0, nb + 1], D, scale)
            gemm_small(qb[:nr], kT[:, :hp], sb)           # 1. scores
            for r in range(nr):                           # 2. masked softmax: mask by rows,
                i = i0 + r
                hi = min(i + 1, S) if causal else S
                _mask_row(sb[r], hi, mask_kind, mask, pos[3] + i * st[3, nb], st[3, nb + 1])
                _causal_tail(sb[r], hi, hp)
            _rows_max(sb, hp, mb[:nr])                    # the block's row maxima,
            for r in range(nr):
                dead = mb[r] == -np.inf and not _has_nan(sb[r], hp)
                shift[r] = np.inf if dead else mb[r]      # nobody to attend to: exp gives 0
            _exp_block(sb, hp, shift[:nr])                # exp(s - m), 0 for masked keys,
            for r in range(nr):                           # then each row over its sum
                i = i0 + r
                row = sb[r]
                if shift[r] == np.inf:    # zeros, no gradient
                    lse[b * L + i] = np.inf
                    lse[NL + b * L + i] = 0.0
                    continue
                total = 0.0               # (float64, whatever the dtype)
                for j in range(hp):
                    total += row[j]
                inv = 1.0 / total
                for j in range(hp):
                    row[j] *= inv
                lse[b * L + i] = mb[r]
                lse[NL + b * L + i] = inv
            gemm_small(sb, vm[:hp], ob[:nr])              # 3. O = P V
            for r in range(nr):
                _write(out, pos[4] + (i0 + r) * st[4, nb], st[4, nb + 1], ob[r], Dv, 1, False)


@njit(cache=True, parallel=True)
def attention_forward_kernel_parallel(n_chunks, n_batch, q, k, v, mask, out, lse, bshape, st,
                                      off, L, S, D, Dv, scale, causal, mask_kind):
    """attention_forward_kernel with the batch split into ``n_chunks`` ranges, one per thread."""
    for c in prange(n_chunks):
        attention_forward_kernel(c * n_batch // n_chunks, (c + 1) * n_batch // n_chunks,
                                 q, k, v, mask, out, lse, bshape, st, off,
                                 L, S, D, Dv, scale, causal, mask_kind)
# --8<-- [end:attention_cpu_forward]


# --8<-- [start:attention_cpu_backward]
@njit(cache=True, error_model="numpy", fastmath=_FAST)
def attention_backward_kernel(b_lo, b_hi, q, k, v, mask, out, g, lse, dq, dk, dv, bshape, st,
                              off, L, S, D, Dv, scale, causal, mask_kind):
    """dQ, dK, dV of attention for batch entries b_lo..b_hi-1, *added* into dq, dk, dv.

    Operands as in attention_forward_kernel, with t = 5 the output's gradient g
    and t = 6, 7, 8 the storages of dq, dk, dv (stride 0 along a batch dim the
    input was broadcast over: the gradients of all its copies add up there).
    Per block of query rows, with P rebuilt from the saved row max m and 1 / sum:

        S = (Q * scale) K^T,   P = exp(S + mask - m) / sum,   dP = dO V^T,
        dS = P * (dP - D_i)    with D_i = dO_i . O_i (= rowsum(P * dP), without P),
        dV += P^T dO,   dQ += scale dS K,   dK += dS^T (Q * scale)

    -- five gemm_small products. A row with m = +inf (no key) contributes
    nothing. dK and dV of a head are summed in scratch and added to
    storage once, at the end of the head.
    """
    nb = bshape.size
    NL = lse.size // 2
    pos = np.empty(9, _I64)
    dt = q.dtype
    kT = np.empty((D, S), dt)             # K^T, K and V^T of the head
    km = np.empty((S, D), dt)
    vT = np.empty((Dv, S), dt)
    dkm = np.empty((S, D), dt)
    dvm = np.empty((S, Dv), dt)
    qb = np.empty((_BR, D), dt)
    dob = np.empty((_BR, Dv), dt)
    dqb = np.empty((_BR, D), dt)
    ob = np.empty(Dv, dt)                 # one row of the output
    di = np.empty(_BR)
    sbuf = np.empty(_BR * S, dt)          # S, then P
    dpbuf = np.empty(_BR * S, dt)         # dP, then dS
    for b in range(b_lo, b_hi):
        _batch_positions(b, bshape, st, off, pos)
        _load(k, pos[1], st[1, nb], st[1, nb + 1], S, D, kT, True)
        _load(k, pos[1], st[1, nb], st[1, nb + 1], S, D, km, False)
        _load(v, pos[2], st[2, nb], st[2, nb + 1], S, Dv, vT, True)
        dkm[:] = 0.0
        dvm[:] = 0.0
        for i0 in range(0, L, _BR):
            nr = min(_BR, L - i0)
            hp = min(i0 + nr, S) if causal else S
            sb = _tile(sbuf, nr, hp)
            dpb = _tile(dpbuf, nr, hp)
            sb[:] = 0.0
            dpb[:] = 0.0
            dqb[:nr] = 0.0
            for r in range(nr):
                i = i0 + r
                _read(qb[r], q, pos[0] + i * st[0, nb], st[0, nb + 1], D, scale)
                _read(dob[r], g, pos[5] + i * st[5, nb], st[5, nb + 1], Dv, 1)
                _read(ob, out, pos[4] + i * st[4, nb], st[4, nb + 1], Dv, 1)
                acc = 0.0
                for d in range(Dv):
                    acc += dob[r, d] * ob[d]
                di[r] = acc
            gemm_small(qb[:nr], kT[:, :hp], sb)
            gemm_small(dob[:nr], vT[:, :hp], dpb)
            for r in range(nr):
                i = i0 + r
                hi = min(i + 1, S) if causal else S
                if lse[b * L + i] == np.inf:  # a row with no key: no gradient
                    hi = 0
                _mask_row(sb[r], hi, mask_kind, mask, pos[3] + i * st[3, nb], st[3, nb + 1])
                _causal_tail(sb[r], hi, hp)
            _exp_block(sb, hp, lse[b * L + i0:b * L + i0 + nr])  # exp(s - m) (0 where masked)
            for r in range(nr):
                i = i0 + r
                row = sb[r]
                dsr = dpb[r]
                inv = lse[NL + b * L + i]
                dr = di[r]
                for j in range(hp):
                    pj = row[j] * inv     # p_ij, as the forward made it
                    row[j] = pj
                    dsr[j] = pj * (dsr[j] - dr)
            gemm_small(sb.T, dob[:nr], dvm[:hp])          # dV += P^T dO
            gemm_small(dpb, km[:hp], dqb[:nr])            # dQ += dS K      (scale below)
            gemm_small(dpb.T, qb[:nr], dkm[:hp])          # dK += dS^T (Q * scale)
            for r in range(nr):
                _write(dq, pos[6] + (i0 + r) * st[6, nb], st[6, nb + 1], dqb[r], D, scale, True)
        for j in range(S):
            _write(dk, pos[7] + j * st[7, nb], st[7, nb + 1], dkm[j], D, 1, True)
            _write(dv, pos[8] + j * st[8, nb], st[8, nb + 1], dvm[j], Dv, 1, True)


@njit(cache=True, parallel=True)
def attention_backward_kernel_parallel(n_chunks, n_batch, q, k, v, mask, out, g, lse, dq, dk, dv,
                                       bshape, st, off, L, S, D, Dv, scale, causal, mask_kind):
    """attention_backward_kernel with the batch split into ``n_chunks`` ranges, one per
    thread (only when no two batch entries share a gradient's storage)."""
    for c in prange(n_chunks):
        attention_backward_kernel(c * n_batch // n_chunks, (c + 1) * n_batch // n_chunks,
                                  q, k, v, mask, out, g, lse, dq, dk, dv, bshape, st, off,
                                  L, S, D, Dv, scale, causal, mask_kind)
# --8<-- [end:attention_cpu_backward]


# Below this many multiply-adds (about 100 us on one core) attention stays on the
# calling thread: a parallel region on a busy machine can wait a whole scheduler
# slice for its second thread (the same rule as sitp.backends.cpu.blas.batched).
_PARALLEL_ATTENTION_WORK = 1 << 20
_NO_MASK = np.zeros(1, np.bool_)


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
        return cpu._tensor()._make(storage, shape, strides, 0, dtype)
    t = _new(shape, dtype)
    if zero:
        t._storage[:] = 0
    return t


def _mask_args(mask, bshape, L, S):
    """(mask_kind, storage, strides broadcast to bshape + (L, S), offset) for the kernels."""
    if mask is None:
        return 0, _NO_MASK, (0,) * (len(bshape) + 2), 0
    st = broadcast_strides(mask.shape, mask._strides, tuple(bshape) + (L, S))
    return (1 if mask.dtype is bool_ else 2), mask._storage, st, mask._offset


def _threads(work, n_batch):
    """How many ranges to split the batch into (1: stay on this thread)."""
    if work < _PARALLEL_ATTENTION_WORK or n_batch < 2:
        return 1
    return min(get_num_threads(), n_batch)


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
        lse = np.empty(2 * n_batch * L)      # row max, then 1 / row sum
        ctx.save_for_backward(q, k, v)
        ctx.out, ctx.lse, ctx.bshape = (out._storage, out._strides), lse, bshape
        if n_batch * L * S * Dv == 0:
            if out.numel():                   # no keys (S = 0): zeros, no gradient
                out._storage[:] = 0
            lse[:] = np.inf
            return out
        kind, m, mst, moff = _mask_args(mask, bshape, L, S)
        st = np.array([_bstrides(q, bshape), _bstrides(k, bshape), _bstrides(v, bshape),
                       mst, out._strides], _I64)
        off = np.array([q._offset, k._offset, v._offset, moff, 0], _I64)
        args = (q._storage, k._storage, v._storage, m, out._storage, lse,
                np.array(bshape, _I64), st, off, L, S, D, Dv, float(scale), bool(causal), kind)
        chunks = _threads(n_batch * L * S * (D + Dv) // (2 if causal else 1), n_batch)
        if chunks > 1:
            attention_forward_kernel_parallel(chunks, n_batch, *args)
        else:
            attention_forward_kernel(0, n_batch, *args)
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
        grads = [_head_major(t.shape[:-2], t.shape[-2], t.shape[-1], t.dtype, True)
                 for t in (q, k, v)]
        if n_batch * L * S == 0:
            return (grads[0] if nq else None, grads[1] if nk else None,
                    grads[2] if nv else None, None, None, None)
        kind, m, mst, moff = _mask_args(mask, bshape, L, S)
        o_storage, o_strides = ctx.out
        st = np.array([_bstrides(q, bshape), _bstrides(k, bshape), _bstrides(v, bshape),
                       mst, o_strides, _bstrides(g, bshape)]
                      + [_bstrides(t, bshape) for t in grads], _I64)
        off = np.array([q._offset, k._offset, v._offset, moff, 0, g._offset, 0, 0, 0], _I64)
        args = (q._storage, k._storage, v._storage, m, o_storage, g._storage, ctx.lse,
                grads[0]._storage, grads[1]._storage, grads[2]._storage,
                np.array(bshape, _I64), st, off, L, S, D, Dv, float(ctx.scale),
                bool(ctx.causal), kind)
        shared = any(tuple(t.shape[:-2]) != tuple(bshape) for t in (q, k, v))
        chunks = 1 if shared else _threads(
            2 * n_batch * L * S * (D + Dv) // (2 if ctx.causal else 1), n_batch)
        if chunks > 1:
            attention_backward_kernel_parallel(chunks, n_batch, *args)
        else:
            attention_backward_kernel(0, n_batch, *args)
        return (grads[0] if nq else None, grads[1] if nk else None,
                grads[2] if nv else None, None, None, None)


def _attention_exact_forward(ctx, q, k, v, mask, scale, causal):
    """Attention with the scores and probabilities as tensors (cpu.matmul and
    masked_softmax_kernel): the path for a float mask that needs its gradient."""
    s_LS = cpu.matmul(q, k.mT)                  # (..., L, S)
    p_LS = masked_softmax(s_LS, mask, scale, causal)
    ctx.save_for_backward(q, k, v)
    ctx.mask, ctx.scale, ctx.causal = mask, scale, causal
    return cpu.matmul(p_LS, v)                  # (..., L, Dv)


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
