"""Fused attention on the CPU, flash-style (chapter 4.2): per block of query rows, scores,
masked softmax and P V in one kernel that reads q, k, v through their strides.

The forward saves one row max and one 1 / row sum per query row, and the backward kernel
recomputes P from them. float32 computes in float32, as PyTorch does, with row sums in
float64. :func:`attention_forward` and :func:`attention_backward` split the batch among
numba's threads when the work is large. The autograd node that calls them is
``sitp.nn._functions.attention.Attention``.
"""

from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

from sitp.kernels.cpu.blas.small import _gemv_cols, gemm_small
from sitp.kernels.cpu.vecmath import exp_f32
from sitp.strides import numel

_I64 = np.int64


# Fast-math flags for the attention kernels: let LLVM reorder sums and fuse
# multiply-adds (so the row sums vectorise), but *not* assume away NaN and inf:
# masked keys are -inf, an empty row's logsumexp is +inf, and NaN must propagate.
_FAST = {"contract", "reassoc", "nsz", "arcp"}


_LOG2E = 1.4426950408889634
_LN2_HI = 0.6931471803691238  # ln 2 split in two: k * _LN2_HI is exact for |k| < 2^11
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
    big = 6755399441055744.0  # 1.5 * 2^52
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
        e = np.float64(z).view(np.int64) - 0x4338000000000000 + 1023  # k + 1023
        two_k = np.int64(e << 52).view(np.float64)
        x[t] = 0.0 if under else p * two_k


@njit(cache=True, error_model="numpy")
def _exp_rows32(x, n, shift):
    """_exp_rows64 in float32 arithmetic (8 lanes a vector), with
    :func:`sitp.kernels.cpu.vecmath.exp_f32`; masked keys (-inf) give 0."""
    sh = np.float32(shift)
    for t in range(n):
        x[t] = exp_f32(np.float32(x[t] - sh))  # (typed for float64 rows too; never run on them)


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _exp_block64(s, n, shifts):
    """s[r, :n] = exp(s[r, :n] - shifts[r]) for every row r: one call for a block of
    rows, not one a row (a call into another compiled function costs about as much
    as the exp of a 32-key row)."""
    for r in range(s.shape[0]):
        _exp_rows64(s[r], n, shifts[r])


@njit(cache=True, error_model="numpy")
def _exp_block32(s, n, shifts):
    """_exp_block64 in float32, with :func:`sitp.kernels.cpu.vecmath.exp_f32`."""
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
    LLVM vectorises (a step known only at run time stops it).

    Both loops index a slice of ``x`` by c, not ``x`` by ``start + c * step``: numba
    checks every index that might be negative (and counts it from the end), and LLVM
    cannot prove ``start + c`` never is, so that test sat in the loop and kept it from
    vectorising. An index into a slice is c itself, which the loop's range bounds
    below by 0. A step of 0 (a broadcast operand) keeps the plain loop."""
    if step == 1:
        xs = x[start : start + n]
        for c in range(n):
            dst[c] = xs[c] * scale
    elif step > 0 and n > 0:
        xs = x[start : start + (n - 1) * step + 1 : step]
        for c in range(n):
            dst[c] = xs[c] * scale
    else:
        for c in range(n):
            dst[c] = x[start + c * step] * scale


@njit(cache=True, inline="always")
def _write(x, start, step, src, n, scale, add):
    """x[start + c * step] (+)= src[:n] * scale (added when ``add``), as _read."""
    if step == 1:
        xs = x[start : start + n]
        for c in range(n):
            xs[c] = src[c] * scale + (xs[c] if add else 0)
    elif step > 0 and n > 0:
        xs = x[start : start + (n - 1) * step + 1 : step]
        for c in range(n):
            xs[c] = src[c] * scale + (xs[c] if add else 0)
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
    return buf[: rows * cols].reshape((rows, cols))


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


# Calls with at most this many query rows (a decode step's one) read K and V where they
# are when their rows are contiguous, instead of copying K^T and V into scratch first:
# the copy of K^T is a pass with a stride per entry, which pays for itself only when
# several query rows use it.
_DIRECT_ROWS = 2


@njit(cache=True, inline="always")
def _rows_in_place(x, start, row, col, n, d):
    """The (n, d) operand at ``start`` as a 2-D view of the flat storage ``x`` when its
    rows are contiguous (``col`` 1, rows ``row`` >= d apart), else an empty (0, 0) view."""
    if col == 1 and row >= d and n > 0 and start + n * row <= x.size:
        return x[start : start + n * row].reshape((n, row))[:, :d]
    return x[:0].reshape((0, 1))[:, :0]


# Query rows per block. One (_BR, S) block of scores (and, in the backward, of
# dP) lives in scratch at a time: attention's memory stays O(L) per head
# (the logsumexps) plus O(_BR S) per thread.
_BR = 32


# --8<-- [start:attention_cpu_forward]
@njit(cache=True, error_model="numpy", fastmath=_FAST)
def attention_forward_kernel(
    b_lo, b_hi, q, k, v, mask, out, lse, bshape, st, off, L, S, D, Dv, scale, causal, mask_kind
):
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
    dt = q.dtype  # float32 inputs compute in float32, as PyTorch's
    kT = np.empty((D, S), dt)  # this head's K^T and V
    vm = np.empty((S, Dv), dt)
    qb = np.empty((_BR, D), dt)  # one block of query rows, times scale
    sbuf = np.empty(_BR * S, dt)  # their scores, then probabilities
    ob = np.empty((_BR, Dv), dt)
    mb = np.empty(_BR)  # the block's row maxima, and the shifts of its exps
    shift = np.empty(_BR)
    no_bias = np.empty(0, dt)
    for b in range(b_lo, b_hi):
        _batch_positions(b, bshape, st, off, pos)
        # a decode step: K and V read in place, each score a row of K times the query
        # (_gemv_cols: eight keys side by side, each summed as the tiles sum it)
        kd = _rows_in_place(k, pos[1], st[1, nb], st[1, nb + 1], S, D)
        vd = _rows_in_place(v, pos[2], st[2, nb], st[2, nb + 1], S, Dv)
        direct = L <= _DIRECT_ROWS and kd.shape[0] == S and vd.shape[0] == S and D > 0
        if not direct:
            _load(k, pos[1], st[1, nb], st[1, nb + 1], S, D, kT, True)
            _load(v, pos[2], st[2, nb], st[2, nb + 1], S, Dv, vm, False)
        for i0 in range(0, L, _BR):
            nr = min(_BR, L - i0)
            hp = min(i0 + nr, S) if causal else S
            sb = _tile(sbuf, nr, hp)
            ob[:nr] = 0.0
            for r in range(nr):
                _read(qb[r], q, pos[0] + (i0 + r) * st[0, nb], st[0, nb + 1], D, scale)
            if direct:  # 1. scores
                for r in range(nr):
                    _gemv_cols(qb[r : r + 1], kd[:hp].T, sb[r : r + 1], 1, no_bias)
            else:
                sb[:] = 0.0
                gemm_small(qb[:nr], kT[:, :hp], sb)
            for r in range(nr):  # 2. masked softmax: mask by rows,
                i = i0 + r
                hi = min(i + 1, S) if causal else S
                _mask_row(sb[r], hi, mask_kind, mask, pos[3] + i * st[3, nb], st[3, nb + 1])
                _causal_tail(sb[r], hi, hp)
            _rows_max(sb, hp, mb[:nr])  # the block's row maxima,
            for r in range(nr):
                dead = mb[r] == -np.inf and not _has_nan(sb[r], hp)
                shift[r] = np.inf if dead else mb[r]  # nobody to attend to: exp gives 0
            _exp_block(sb, hp, shift[:nr])  # exp(s - m), 0 for masked keys,
            for r in range(nr):  # then each row over its sum
                i = i0 + r
                row = sb[r]
                if shift[r] == np.inf:  # zeros, no gradient
                    lse[b * L + i] = np.inf
                    lse[NL + b * L + i] = 0.0
                    continue
                total = 0.0  # (float64, whatever the dtype)
                for j in range(hp):
                    total += row[j]
                inv = 1.0 / total
                for j in range(hp):
                    row[j] *= inv
                lse[b * L + i] = mb[r]
                lse[NL + b * L + i] = inv
            gemm_small(sb, vd[:hp] if direct else vm[:hp], ob[:nr])  # 3. O = P V
            for r in range(nr):
                _write(out, pos[4] + (i0 + r) * st[4, nb], st[4, nb + 1], ob[r], Dv, 1, False)


@njit(cache=True, parallel=True)
def attention_forward_kernel_parallel(
    n_chunks,
    n_batch,
    q,
    k,
    v,
    mask,
    out,
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
    mask_kind,
):
    """attention_forward_kernel with the batch split into ``n_chunks`` ranges, one per thread."""
    for c in prange(n_chunks):
        attention_forward_kernel(
            c * n_batch // n_chunks,
            (c + 1) * n_batch // n_chunks,
            q,
            k,
            v,
            mask,
            out,
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
            mask_kind,
        )


# --8<-- [end:attention_cpu_forward]


# --8<-- [start:attention_cpu_backward]
@njit(cache=True, error_model="numpy", fastmath=_FAST)
def attention_backward_kernel(
    b_lo,
    b_hi,
    q,
    k,
    v,
    mask,
    out,
    g,
    lse,
    dq,
    dk,
    dv,
    bshape,
    st,
    off,
    L,
    S,
    D,
    Dv,
    scale,
    causal,
    mask_kind,
):
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
    kT = np.empty((D, S), dt)  # K^T, K and V^T of the head
    km = np.empty((S, D), dt)
    vT = np.empty((Dv, S), dt)
    dkm = np.empty((S, D), dt)
    dvm = np.empty((S, Dv), dt)
    qb = np.empty((_BR, D), dt)
    dob = np.empty((_BR, Dv), dt)
    dqb = np.empty((_BR, D), dt)
    ob = np.empty(Dv, dt)  # one row of the output
    di = np.empty(_BR)
    sbuf = np.empty(_BR * S, dt)  # S, then P
    dpbuf = np.empty(_BR * S, dt)  # dP, then dS
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
            _exp_block(sb, hp, lse[b * L + i0 : b * L + i0 + nr])  # exp(s - m) (0 where masked)
            for r in range(nr):
                i = i0 + r
                row = sb[r]
                dsr = dpb[r]
                inv = lse[NL + b * L + i]
                dr = di[r]
                for j in range(hp):
                    pj = row[j] * inv  # p_ij, as the forward made it
                    row[j] = pj
                    dsr[j] = pj * (dsr[j] - dr)
            gemm_small(sb.T, dob[:nr], dvm[:hp])  # dV += P^T dO
            gemm_small(dpb, km[:hp], dqb[:nr])  # dQ += dS K      (scale below)
            gemm_small(dpb.T, qb[:nr], dkm[:hp])  # dK += dS^T (Q * scale)
            for r in range(nr):
                _write(dq, pos[6] + (i0 + r) * st[6, nb], st[6, nb + 1], dqb[r], D, scale, True)
        for j in range(S):
            _write(dk, pos[7] + j * st[7, nb], st[7, nb + 1], dkm[j], D, 1, True)
            _write(dv, pos[8] + j * st[8, nb], st[8, nb + 1], dvm[j], Dv, 1, True)


@njit(cache=True, parallel=True)
def attention_backward_kernel_parallel(
    n_chunks,
    n_batch,
    q,
    k,
    v,
    mask,
    out,
    g,
    lse,
    dq,
    dk,
    dv,
    bshape,
    st,
    off,
    L,
    S,
    D,
    Dv,
    scale,
    causal,
    mask_kind,
):
    """attention_backward_kernel with the batch split into ``n_chunks`` ranges, one per
    thread (only when no two batch entries share a gradient's storage)."""
    for c in prange(n_chunks):
        attention_backward_kernel(
            c * n_batch // n_chunks,
            (c + 1) * n_batch // n_chunks,
            q,
            k,
            v,
            mask,
            out,
            g,
            lse,
            dq,
            dk,
            dv,
            bshape,
            st,
            off,
            L,
            S,
            D,
            Dv,
            scale,
            causal,
            mask_kind,
        )


# --8<-- [end:attention_cpu_backward]

# Below this many multiply-adds (about 100 us on one core) attention stays on the
# calling thread: a parallel region on a busy machine can wait a whole scheduler
# slice for its second thread (the same rule as sitp.kernels.cpu.blas.batched).
_PARALLEL_ATTENTION_WORK = 1 << 20
_NO_MASK = np.zeros(1, np.bool_)


def _threads(work, n_batch):
    """How many ranges to split the batch into (1: stay on this thread)."""
    if work < _PARALLEL_ATTENTION_WORK or n_batch < 2:
        return 1
    return min(get_num_threads(), n_batch)


def attention_forward(
    q, k, v, mask, out, lse, bshape, st, off, L, S, D, Dv, scale, causal, mask_kind
):
    """Run attention_forward_kernel over the whole batch ``bshape`` (on numba's threads when
    the work is large). ``mask`` is a storage, or None with ``mask_kind`` 0; ``st`` and
    ``off`` are the (5, nb + 2) strides and 5 offsets of q, k, v, mask and out."""
    n_batch = numel(bshape)
    args = (
        q,
        k,
        v,
        _NO_MASK if mask is None else mask,
        out,
        lse,
        np.array(bshape, _I64),
        st,
        off,
        L,
        S,
        D,
        Dv,
        float(scale),
        bool(causal),
        mask_kind,
    )
    chunks = _threads(n_batch * L * S * (D + Dv) // (2 if causal else 1), n_batch)
    if chunks > 1:
        attention_forward_kernel_parallel(chunks, n_batch, *args)
    else:
        attention_forward_kernel(0, n_batch, *args)


def attention_backward(
    q,
    k,
    v,
    mask,
    out,
    g,
    lse,
    dq,
    dk,
    dv,
    bshape,
    st,
    off,
    L,
    S,
    D,
    Dv,
    scale,
    causal,
    mask_kind,
    shared,
):
    """Run attention_backward_kernel over the whole batch; on one thread when ``shared``
    (two batch entries add into the same gradient storage), else on numba's threads when
    the work is large. Operands as in :func:`attention_forward`, with t = 5 the output's
    gradient and t = 6, 7, 8 dq, dk, dv in ``st`` and ``off``."""
    n_batch = numel(bshape)
    args = (
        q,
        k,
        v,
        _NO_MASK if mask is None else mask,
        out,
        g,
        lse,
        dq,
        dk,
        dv,
        np.array(bshape, _I64),
        st,
        off,
        L,
        S,
        D,
        Dv,
        float(scale),
        bool(causal),
        mask_kind,
    )
    chunks = (
        1 if shared else _threads(2 * n_batch * L * S * (D + Dv) // (2 if causal else 1), n_batch)
    )
    if chunks > 1:
        attention_backward_kernel_parallel(chunks, n_batch, *args)
    else:
        attention_backward_kernel(0, n_batch, *args)
