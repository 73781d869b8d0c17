"""Fused layer norm on the CPU: mean, reciprocal standard deviation and the affine map
in one pass per row; backward recomputes the normalized row from the saved mean and
rstd (chapter 4.2).

The kernels take contiguous rows (flat arrays) and accumulate in float64. Large inputs
have their rows split among numba's threads (:func:`layer_norm_forward`). The autograd
node that calls them is ``sitp.nn._functions.layer_norm.LayerNorm``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import get_num_threads, njit, prange

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
        xr, yr = x[r * n : (r + 1) * n], y[r * n : (r + 1) * n]  # slices: no negative-index checks
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
        if has_w and has_b:  # one branch-free loop per case
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
        layer_norm_kernel(
            x[r0 * n : r1 * n],
            r1 - r0,
            n,
            w,
            b,
            has_w,
            has_b,
            eps,
            y[r0 * n : r1 * n],
            mean[r0:r1],
            rstd[r0:r1],
        )


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
        xr, gr, dxr = x[r * n : (r + 1) * n], g[r * n : (r + 1) * n], dx[r * n : (r + 1) * n]
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


@njit(cache=True, parallel=True)
def layer_norm_backward_parallel(x, g, n_rows, n, w, has_w, mean, rstd, dx, dw, db, n_chunks):
    """layer_norm_backward_kernel on n_chunks bands of rows at once, one per thread, each
    summing its own rows of dw and db (``dw``, ``db``: (n_chunks, n)); the caller adds
    the bands' sums.

    Each band sums into arrays of its own and stores them in ``dw[c]``, ``db[c]`` at
    the end. Summed in place, two threads wrote every row's partial sums into the same
    cache lines where one band's row of dw ended and the other's row of db began (small
    arrays are 16-byte aligned, not 64): on the 2-vCPU Xeon that made a (1024, 64)
    backward take 82 us on two threads against 72 on one; now 37.
    """
    for c in prange(n_chunks):
        r0, r1 = c * n_rows // n_chunks, (c + 1) * n_rows // n_chunks
        dw_c, db_c = np.zeros(n, np.float64), np.zeros(n, np.float64)
        layer_norm_backward_kernel(
            x[r0 * n : r1 * n],
            g[r0 * n : r1 * n],
            r1 - r0,
            n,
            w,
            has_w,
            mean[r0:r1],
            rstd[r0:r1],
            dx[r0 * n : r1 * n],
            dw_c,
            db_c,
        )
        dw[c] = dw_c
        db[c] = db_c


def layer_norm_backward(x, g, n_rows, n, w, has_w, mean, rstd, dx):
    """layer_norm_backward_kernel over flat arrays, on numba's threads when the input is
    large; returns dw and db (float64, summed over the rows)."""
    threads = min(get_num_threads(), n_rows) if n_rows * n >= _PARALLEL_ROWS_MIN else 1
    dw = np.zeros((threads, n), np.float64)
    db = np.zeros((threads, n), np.float64)
    if threads > 1:
        layer_norm_backward_parallel(x, g, n_rows, n, w, has_w, mean, rstd, dx, dw, db, threads)
        return dw.sum(0), db.sum(0)
    layer_norm_backward_kernel(x, g, n_rows, n, w, has_w, mean, rstd, dx, dw[0], db[0])
    return dw[0], db[0]


def layer_norm_forward(x, n_rows, n, w, b, has_w, has_b, eps, y, mean, rstd):
    """layer_norm_kernel over flat arrays, on numba's threads when the input is large."""
    threads = get_num_threads() if n_rows * n >= _PARALLEL_ROWS_MIN else 1
    if threads > 1:
        layer_norm_parallel(x, n_rows, n, w, b, has_w, has_b, eps, y, mean, rstd, threads)
    else:
        layer_norm_kernel(x, n_rows, n, w, b, has_w, has_b, eps, y, mean, rstd)
