"""GEMM for small matrices: register tiles without packing (section 2.3).

When A, B and C together fit in L1 (attention's 32 x 16 @ 16 x 32 blocks, a
small layer), packing costs as much as the product. This kernel keeps the
register tile of the micro-kernel but reads its operands where they are: a row
segment of B is contiguous already, and the MR values of A are broadcast from
MR rows of A. Tiles that do not fit at the right and bottom edges use the ikj loop.
"""
import numpy as np
from numba import carray, njit

from .packed import FASTMATH, MR, _register_tile, tile_fma, tile_nr


# --8<-- [start:gemm_small]
@njit(cache=True, fastmath=FASTMATH)
def gemm_small(A, B, C):
    """C += A @ B with MR x NR register tiles read straight from A and B.

    Full tiles cover C[:M - M % MR, :N - N % NR]; for each, :func:`tile_fma`
    loads NR values of row p of B and broadcasts MR values of column p of A,
    reading A through its strides (a transposed view costs nothing). B's rows
    must be contiguous; a B that is not is copied first. The right strip (last
    N % NR columns) and the bottom strip (last M % MR rows) are done with ikj loops.
    """
    M, K = A.shape
    N = B.shape[1]
    if N > 1 and B.strides[1] != B.itemsize:
        B = np.ascontiguousarray(B)
    NR = tile_nr(A.dtype)
    m_full, n_full = M - M % MR, N - N % NR
    a_si, a_sp = A.strides[0] // A.itemsize, A.strides[1] // A.itemsize
    b_sp = B.strides[0] // B.itemsize
    tile = _register_tile(A.dtype)
    acc = carray(tile, (MR, NR))
    for i0 in range(0, m_full, MR):
        for j0 in range(0, n_full, NR):
            tile_fma(A[i0:, :], a_si, a_sp, B[:, j0:], b_sp, K, tile)
            for i in range(MR):
                c_i = C[i0 + i, j0:j0 + NR]
                for j in range(NR):
                    c_i[j] += acc[i, j]
    for i in range(M):                      # right strip, all rows
        c_i = C[i, n_full:]
        for p in range(K):
            a_ip = A[i, p]
            b_p = B[p, n_full:]
            for j in range(c_i.shape[0]):
                c_i[j] += a_ip * b_p[j]
    for i in range(m_full, M):              # bottom strip, full-tile columns
        c_i = C[i, :n_full]
        for p in range(K):
            a_ip = A[i, p]
            b_p = B[p, :n_full]
            for j in range(c_i.shape[0]):
                c_i[j] += a_ip * b_p[j]
# --8<-- [end:gemm_small]
