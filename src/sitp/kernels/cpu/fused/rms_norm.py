"""Fused RMS norm on the CPU: the reciprocal root mean square and the scaling in one pass
per row; backward recomputes the normalized row from the saved rstd.

RMS norm is layer norm without the mean and the bias (``layer_norm.py`` beside this
file has the same structure). The kernels take contiguous rows (flat arrays) and
accumulate in float64; large inputs have their rows split among numba's threads. The
autograd node that calls them is ``sitp.nn._functions.rms_norm.RMSNorm``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import get_num_threads, njit, prange

# Sums over a row may be reordered (vectorised); NaN and inf keep their meaning.
_RMS_FAST = {"reassoc", "contract"}

# Inputs at least this large have their rows split among numba's threads (forward).
_PARALLEL_ROWS_MIN = 1 << 16


# --8<-- [start:rms_norm_kernel]
@njit(cache=True, fastmath=_RMS_FAST)
def rms_norm_kernel(x, n_rows, n, w, has_w, eps, y, rstd):
    """y = x * rstd * w over each row of n, rstd = 1 / sqrt(mean(x^2) + eps); saves rstd."""
    for r in range(n_rows):
        xr, yr = x[r * n : (r + 1) * n], y[r * n : (r + 1) * n]
        ss = 0.0
        for j in range(n):
            ss += xr[j] * xr[j]
        rs = 1.0 / math.sqrt(ss / n + eps)
        rstd[r] = rs
        if has_w:
            for j in range(n):
                yr[j] = xr[j] * rs * w[j]
        else:
            for j in range(n):
                yr[j] = xr[j] * rs


# --8<-- [end:rms_norm_kernel]


@njit(cache=True, parallel=True)
def rms_norm_parallel(x, n_rows, n, w, has_w, eps, y, rstd, n_chunks):
    """rms_norm_kernel on n_chunks bands of rows at once, one per thread."""
    for c in prange(n_chunks):
        r0, r1 = c * n_rows // n_chunks, (c + 1) * n_rows // n_chunks
        rms_norm_kernel(
            x[r0 * n : r1 * n], r1 - r0, n, w, has_w, eps, y[r0 * n : r1 * n], rstd[r0:r1]
        )


# --8<-- [start:rms_norm_backward_kernel]
@njit(cache=True, fastmath=_RMS_FAST)
def rms_norm_backward_kernel(x, g, n_rows, n, w, has_w, rstd, dx, dw):
    """Gradients of :func:`rms_norm_kernel` from upstream ``g`` (rows of n).

    With xhat = x * rstd and gh = g * w (the gradient reaching xhat):

        dx = rstd * (gh - xhat * mean_j(gh * xhat)),   dw = sum over rows of g * xhat

    (the mean is what the row's root mean square contributes). ``dw`` accumulates in
    a float64 array.
    """
    if not has_w:
        w = np.ones(n, x.dtype)
    for r in range(n_rows):
        xr, gr, dxr = x[r * n : (r + 1) * n], g[r * n : (r + 1) * n], dx[r * n : (r + 1) * n]
        rs = rstd[r]
        c = 0.0
        for j in range(n):
            xh = xr[j] * rs
            c += gr[j] * w[j] * xh
            dw[j] += gr[j] * xh
        c /= n
        for j in range(n):
            dxr[j] = rs * (gr[j] * w[j] - xr[j] * rs * c)


# --8<-- [end:rms_norm_backward_kernel]


def rms_norm_forward(x, n_rows, n, w, has_w, eps, y, rstd):
    """rms_norm_kernel over flat arrays, on numba's threads when the input is large."""
    threads = get_num_threads() if n_rows * n >= _PARALLEL_ROWS_MIN else 1
    if threads > 1:
        rms_norm_parallel(x, n_rows, n, w, has_w, eps, y, rstd, threads)
    else:
        rms_norm_kernel(x, n_rows, n, w, has_w, eps, y, rstd)
