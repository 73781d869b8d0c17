"""The linear layer's kernel beside its GEMMs: the column sum of the bias gradient
(chapter 4.2).

``y = x W^T + b`` runs as one GEMM whose output starts as the bias
(``sitp.kernels.cpu.blas``); its backward is two GEMMs and
:func:`column_sum`, db = sum over rows of dY. The autograd node that calls them is
``sitp.nn._functions.linear.Linear``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sitp.kernels.cpu.blas.small import gemm_small_set


# --8<-- [start:column_sum]
@njit(cache=True)
def column_sum(g, out):
    """out[j] = sum_i g[i, j] for a C-contiguous (M, N) array, in float64.

    Rows are added into a float64 accumulator one after another: every load is
    a contiguous row (vectorised), where summing each column on its own would
    stride through memory N entries at a time.
    """
    acc = np.zeros(g.shape[1], np.float64)
    for i in range(g.shape[0]):
        g_i = g[i]
        for j in range(g.shape[1]):
            acc[j] += g_i[j]
    for j in range(g.shape[1]):
        out[j] = acc[j]


# --8<-- [end:column_sum]


@njit(cache=True)
def backward_small(g, w, x, dx, dw, db, need_x, need_w, need_b):
    """A small layer's backward in one call: dx = g w, dw = g^T x, db = column sums of g.

    The same kernels as the separate calls (``blas.matmul`` gives a product this small
    to ``gemm_small_set`` on one thread), so the same bits; one launch instead of three,
    which is most of what a layer of a few thousand entries costs.
    """
    none = db[:0]
    if need_x:
        gemm_small_set(g, w, dx, none, False)
    if need_w:
        gemm_small_set(g.T, x, dw, none, False)
    if need_b:
        column_sum(g, db)
