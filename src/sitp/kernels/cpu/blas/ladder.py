"""The GEMM ladder, rungs 1-3: C += A @ B with plain loops (section 2.3).

Each kernel takes C-contiguous arrays A (M, K), B (K, N), C (M, N) of one dtype and
accumulates into C, like BLAS's ``gemm`` with alpha = beta = 1. They differ only
in the order in which they visit the M * N * K multiply-adds.
"""

from numba import njit


# --8<-- [start:gemm_naive]
@njit(cache=True)
def gemm_naive(A, B, C):
    """C += A @ B, loop order i, j, k: the textbook definition.

    C[i, j] is a dot product of row i of A with column j of B. The innermost loop
    walks down a column of B, jumping N elements at every step, so almost every
    load of B misses the cache line brought in by the previous one.
    """
    M, K = A.shape
    N = B.shape[1]
    for i in range(M):
        for j in range(N):
            s = C[i, j]
            for k in range(K):
                s += A[i, k] * B[k, j]
            C[i, j] = s


# --8<-- [end:gemm_naive]


# --8<-- [start:gemm_ikj]
@njit(cache=True)
def gemm_ikj(A, B, C):
    """C += A @ B, loop order i, k, j.

    For a fixed (i, k) the inner loop adds A[i, k] times row k of B to row i of C:
    a saxpy on two contiguous rows, which LLVM vectorizes. Same FLOPs as the naive
    loop, but every access in the inner loop is now unit-stride.
    """
    M, K = A.shape
    for i in range(M):
        c_i = C[i]
        for k in range(K):
            a_ik = A[i, k]
            b_k = B[k]
            for j in range(c_i.shape[0]):
                c_i[j] += a_ik * b_k[j]


# --8<-- [end:gemm_ikj]


# --8<-- [start:gemm_blocked]
@njit(cache=True)
def gemm_blocked(A, B, C, MB=128, KB=64, NB=512):
    """C += A @ B, ikj loops on (MB, KB) x (KB, NB) blocks.

    The three outer loops pick a block of rows of C and A (MB), a block of the
    shared dimension (KB) and a block of columns of C and B (NB). The inner ikj
    loops then reuse the KB x NB block of B (128 KiB in float32 with the defaults,
    it stays in L2) MB times, instead of streaming all of B from memory for
    every row of A. Row views like ``B[k, j0:j1]`` keep the inner loop unit-stride
    (a 2-D slice would not tell numba that its rows are contiguous).
    """
    M, K = A.shape
    N = B.shape[1]
    for i0 in range(0, M, MB):
        for k0 in range(0, K, KB):
            for j0 in range(0, N, NB):
                j1 = min(j0 + NB, N)
                for i in range(i0, min(i0 + MB, M)):
                    c_i = C[i, j0:j1]
                    for k in range(k0, min(k0 + KB, K)):
                        a_ik = A[i, k]
                        b_k = B[k, j0:j1]
                        for j in range(c_i.shape[0]):
                            c_i[j] += a_ik * b_k[j]


# --8<-- [end:gemm_blocked]
