"""Level-2 BLAS: matrix-vector product (section 2.3)."""

from numba import njit, prange


# --8<-- [start:sgemv]
@njit(cache=True, parallel=True, fastmath=True)
def sgemv(A, x, y):
    """y += A @ x for a C-contiguous (M, N) matrix A.

    Row i of A is contiguous, so y[i] is a dot product of two contiguous vectors.
    Rows are split across threads. ``fastmath=True`` allows the reduction to be
    reassociated, which is what lets LLVM keep 8-wide partial sums in vector
    registers (the result differs from a left-to-right sum by rounding).
    Each element of A is used once: 2 FLOPs per 4 bytes in float32.
    """
    M, N = A.shape
    for i in prange(M):
        a_i = A[i]
        s = y.dtype.type(0)
        for j in range(N):
            s += a_i[j] * x[j]
        y[i] += s


# --8<-- [end:sgemv]
