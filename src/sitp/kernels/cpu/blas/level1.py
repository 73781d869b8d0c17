"""Level-1 BLAS: vector-vector kernels (section 2.3).

A level-1 kernel touches every element once and does O(1) arithmetic per element,
so its speed is set by memory bandwidth, not by the floating-point units.
"""

from numba import njit, prange


# --8<-- [start:saxpy]
@njit(cache=True, parallel=True)
def saxpy(alpha, x, y):
    """y += alpha * x, in place, for 1-D arrays of the same length.

    One pass over the data: 2 FLOPs (a multiply and an add) for every 12 bytes
    moved in float32 (read x[i], read y[i], write y[i]). The loop is split across
    threads with ``prange``; each thread streams its contiguous chunk.
    """
    n = x.shape[0]
    for i in prange(n):
        y[i] += alpha * x[i]


# --8<-- [end:saxpy]


# --8<-- [start:triad]
@njit(cache=True, parallel=True)
def triad(a, b, c, alpha):
    """a = b + alpha * c: the STREAM triad, used to measure memory bandwidth.

    Reads two arrays and writes one: 3 * itemsize bytes per element, 2 FLOPs.
    """
    for i in prange(a.shape[0]):
        a[i] = b[i] + alpha * c[i]


# --8<-- [end:triad]
