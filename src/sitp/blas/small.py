"""GEMM for small matrices: register tiles without packing (section 2.3).

When A, B and C together fit in L1 (attention's 32 x 16 @ 16 x 32 blocks, a
small layer), packing costs as much as the product. This kernel keeps the
register tiles of the micro-kernel but reads its operands where they are: a row
segment of B is contiguous already, and the values of A are broadcast from rows of
A. Narrower tiles cover the edges; only the last few columns use the ikj loop.
"""
import numpy as np
from numba import carray, njit, prange

from .packed import FASTMATH, MR, _register_tile, make_tile_fma, tile_nr

# Rows of gemm_small's tiles. With AVX-512's 14-row micro-kernel tile, the small
# products attention makes (32 rows) would leave 4 rows over; 8 rows divide them.
SMALL_MR = MR
_tile_full = make_tile_fma(SMALL_MR, 2)   # SMALL_MR x NR
_tile_half = make_tile_fma(SMALL_MR, 1)   # SMALL_MR x NR/2: an N of 16 on AVX-512
_row_full = make_tile_fma(1, 2)           # one row at a time, for the rows left over
_row_half = make_tile_fma(1, 1)


@njit(cache=True, inline="always")
def _add_tile(C, i0, j0, t):
    """C[i0:i0 + rows, j0:j0 + cols] += t, for a finished (rows, cols) register tile."""
    for i in range(t.shape[0]):
        c_i = C[i0 + i, j0:j0 + t.shape[1]]
        for j in range(t.shape[1]):
            c_i[j] += t[i, j]


# --8<-- [start:gemm_small]
@njit(cache=True, fastmath=FASTMATH)
def gemm_small(A, B, C):
    """C += A @ B with register tiles read straight from A and B (no packing).

    C is covered by SMALL_MR x NR tiles, then a column strip of SMALL_MR x NR/2
    tiles where NR/2 columns or more are left, then the rows left over one row at a
    time, each a vector tile too. For each tile the loop over p (:func:`make_tile_fma`)
    loads row p of B's columns as vectors and broadcasts column p of A, read through
    A's strides (a transposed view costs nothing). B's rows must be contiguous: a B
    that is not is copied first. The last N % (NR/2) columns use the ikj loop.
    """
    if C.shape[0] == 0 or C.shape[1] == 0:
        return
    _gemm_small(A, B, C, 0, C[0, :0])      # (an empty bias: mode 0 never reads it)


@njit(cache=True, fastmath=FASTMATH)
def gemm_small_set(A, B, C, bias, has_bias):
    """C = A @ B (+ bias on every row): gemm_small for a C not yet written (np.empty).

    The tiles store into C instead of adding to it, starting from the bias when
    ``has_bias``: no pass to zero C or to fill it with the bias first.
    """
    _gemm_small(A, B, C, 2 if has_bias else 1, bias)


@njit(cache=True, inline="always")
def _gemm_small(A, B, C, mode, bias):
    """The tiles of gemm_small; mode 0: C += A @ B, 1: C = A @ B, 2: C = A @ B + bias."""
    M, K = A.shape
    N = B.shape[1]
    if N > 1 and B.strides[1] != B.itemsize:
        B = np.ascontiguousarray(B)
    NR = tile_nr(A.dtype)
    H = NR // 2
    m_full, n_full = M - M % SMALL_MR, N - N % NR
    n_vec = n_full + H if N - n_full >= H else n_full   # columns the vector tiles cover
    a_si, a_sp = A.strides[0] // A.itemsize, A.strides[1] // A.itemsize
    b_sp = B.strides[0] // B.itemsize
    ldc = C.strides[0] // C.itemsize
    direct = C.strides[1] == C.itemsize     # full tiles are written into C by the kernel
    if mode != 0:                           # what the kernel will not write: start it
        for i in range(M):
            for j in range(0 if not direct else n_vec, N):
                C[i, j] = bias[j] if mode == 2 else 0
        if not direct:
            mode = 0
    tile = _register_tile(A.dtype)
    full, half = carray(tile, (SMALL_MR, NR)), carray(tile, (SMALL_MR, H))
    for i0 in range(0, m_full, SMALL_MR):   # blocks of SMALL_MR rows
        for j0 in range(0, n_full, NR):
            if direct:
                _tile_full(A, i0 * a_si, a_si, a_sp, B, j0, b_sp, K, C, i0 * ldc + j0, ldc, mode, bias, j0)
            else:
                _tile_full(A, i0 * a_si, a_si, a_sp, B, j0, b_sp, K, tile, 0, NR, 1, bias, 0)
                _add_tile(C, i0, j0, full)
        if n_vec > n_full:
            if direct:
                _tile_half(A, i0 * a_si, a_si, a_sp, B, n_full, b_sp, K, C, i0 * ldc + n_full, ldc,
                           mode, bias, n_full)
            else:
                _tile_half(A, i0 * a_si, a_si, a_sp, B, n_full, b_sp, K, tile, 0, H, 1, bias, 0)
                _add_tile(C, i0, n_full, half)
    for i0 in range(m_full, M):             # the rows left over, one at a time
        for j0 in range(0, n_full, NR):
            if direct:
                _row_full(A, i0 * a_si, a_si, a_sp, B, j0, b_sp, K, C, i0 * ldc + j0, ldc, mode, bias, j0)
            else:
                _row_full(A, i0 * a_si, a_si, a_sp, B, j0, b_sp, K, tile, 0, NR, 1, bias, 0)
                _add_tile(C, i0, j0, full[:1])
        if n_vec > n_full:
            if direct:
                _row_half(A, i0 * a_si, a_si, a_sp, B, n_full, b_sp, K, C, i0 * ldc + n_full, ldc,
                          mode, bias, n_full)
            else:
                _row_half(A, i0 * a_si, a_si, a_sp, B, n_full, b_sp, K, tile, 0, H, 1, bias, 0)
                _add_tile(C, i0, n_full, half[:1])
    for i in range(M):                      # right strip: the last N - n_vec columns
        c_i = C[i, n_vec:]
        for p in range(K):
            a_ip = A[i, p]
            b_p = B[p, n_vec:]
            for j in range(c_i.shape[0]):
                c_i[j] += a_ip * b_p[j]
# --8<-- [end:gemm_small]


# Products whose B is at most this wide and this large skip packing even when they are
# too big for one thread (the GPT's layers: K and N of 64 to 256): B's rows stay in
# L2 for every row block of A, and A is read in place, through its strides.
DIRECT_MAX_N = 256
DIRECT_MAX_B_BYTES = 1 << 19


# --8<-- [start:gemm_direct_parallel]
@njit(cache=True, parallel=True)
def gemm_direct_parallel(A, B, C, bias, has_bias, n_threads):
    """C = A @ B (+ bias) for a C not yet written: gemm_small_set on n_threads
    threads, each on a band of C's rows."""
    M = A.shape[0]
    n_blocks = (M + SMALL_MR - 1) // SMALL_MR
    for t in prange(n_threads):
        i0 = (t * n_blocks // n_threads) * SMALL_MR
        i1 = min(M, ((t + 1) * n_blocks // n_threads) * SMALL_MR)
        if i1 > i0:
            gemm_small_set(A[i0:i1], B, C[i0:i1], bias, has_bias)
# --8<-- [end:gemm_direct_parallel]
