"""Batched GEMM: many independent products C[b] += A[b] @ B[b] (section 2.3).

Attention multiplies, for every (batch, head) pair, a (T, K) matrix by a (K, T)
one: often a hundred products of 32 x 32 matrices. Each is too small to split
across threads (a parallel region costs microseconds), so the batch itself is
the parallel loop: one thread per matrix product, one kernel call per product,
no Python in between.
"""

from numba import njit, prange

from sitp.kernels.cpu.blas.packed import gemm_packed
from sitp.kernels.cpu.blas.small import gemm_small

# Products with fewer multiply-adds than this skip packing (gemm_small): while B
# fits in L2, packing costs more than it saves. Measured crossover: about 200^3.
SMALL_MNK = 192 * 192 * 192
# Below this many multiply-adds in the whole batch (about 100 us of work on one
# core) bmm stays on one thread: on a machine whose cores are busy with other
# jobs, a parallel region can wait a whole scheduler time slice (milliseconds)
# for its second thread.
PARALLEL_BMM_MNK = 1 << 22


# --8<-- [start:bmm]
@njit(cache=True, parallel=True)
def bmm_kernel(A, B, C):
    """C[b] += A[b] @ B[b] for A (batch, M, K), B (batch, K, N), C (batch, M, N).

    Threads split the batch (``prange``); each product runs on one thread with
    the unpacked register-tile kernel when small, the packed one when large.
    """
    n_batch, M, K = A.shape
    N = B.shape[2]
    small = M * N * K < SMALL_MNK
    for b in prange(n_batch):
        if small:
            gemm_small(A[b], B[b], C[b])
        else:
            gemm_packed(A[b], B[b], C[b])


# --8<-- [end:bmm]


@njit(cache=True)
def bmm_kernel_serial(A, B, C):
    """bmm_kernel on the calling thread only (same arguments)."""
    n_batch, M, K = A.shape
    N = B.shape[2]
    small = M * N * K < SMALL_MNK
    for b in range(n_batch):
        if small:
            gemm_small(A[b], B[b], C[b])
        else:
            gemm_packed(A[b], B[b], C[b])
