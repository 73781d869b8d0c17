"""sitp.kernels.cpu.blas: the matrix kernels of section 2.3, and the matmul behind ``Tensor.__matmul__``.

Kernels, in the order the book builds them (each accumulates into its last argument):

* level 1: :func:`saxpy` (y += alpha x), :func:`triad` (a = b + alpha c)
* level 2: :func:`sgemv` (y += A x)
* level 3, the GEMM ladder, C += A @ B: :func:`gemm_naive` (ijk), :func:`gemm_ikj`,
  :func:`gemm_blocked`, :func:`gemm_packed` (packed panels + register micro-kernel),
  :func:`gemm_parallel` (the same on all threads); :func:`gemm_small` (register
  tiles without packing, for small matrices); :func:`bmm_kernel` for batches.

The production entry points are :func:`matmul` and :func:`bmm`; they check shapes,
allocate the result and pick a kernel by size.

Example:
    >>> import numpy as np
    >>> from sitp.kernels.cpu import blas
    >>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> b = np.ones((3, 2), dtype=np.float32)
    >>> blas.matmul(a, b)
    array([[ 3.,  3.],
           [12., 12.]], dtype=float32)
"""

import numba  # noqa: E402
import numpy as np

from sitp import _env  # noqa: F401  (must run before numba compiles anything)
from sitp.kernels.cpu.blas.batched import (
    PARALLEL_BMM_MNK,
    SMALL_MNK,
    bmm_kernel,
    bmm_kernel_serial,
)
from sitp.kernels.cpu.blas.ladder import gemm_blocked, gemm_ikj, gemm_naive
from sitp.kernels.cpu.blas.level1 import saxpy, triad
from sitp.kernels.cpu.blas.level2 import sgemv
from sitp.kernels.cpu.blas.packed import (
    KC,
    MC,
    MR,
    NR,
    fill_rows,
    gemm_packed,
    gemm_parallel,
    micro_kernel,
    stored,
)
from sitp.kernels.cpu.blas.small import (
    DIRECT_MAX_B_BYTES,
    DIRECT_MAX_N,
    KD,
    SPLIT_K_MIN_MNK,
    gemm_direct_parallel,
    gemm_small,
    gemm_small_set,
    gemm_split_k,
)

__all__ = [
    "matmul",
    "bmm",
    "saxpy",
    "triad",
    "sgemv",
    "gemm_naive",
    "gemm_ikj",
    "gemm_blocked",
    "gemm_packed",
    "gemm_parallel",
    "gemm_small",
    "gemm_small_set",
    "micro_kernel",
    "bmm_kernel",
    "MR",
    "NR",
    "KC",
    "MC",
]

DTYPES = (np.float32, np.float64, np.int64)
PARALLEL_MIN_MNK = 1 << 22
# float products with N > 1 and fewer multiply-adds than this, matmul gives to
# gemm_small_set on one thread (the kernel linear_backward_small calls directly)
_ONE_THREAD_MNK = min(SMALL_MNK, PARALLEL_MIN_MNK)


def _check(a, b, ndim, name):
    """Validate operands (each kernel below decides what layouts it can read)."""
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        raise TypeError(
            f"{name} expects numpy arrays, got {type(a).__name__} and {type(b).__name__}"
        )
    if a.ndim != ndim or b.ndim != ndim:
        raise ValueError(f"{name} expects {ndim}-D arrays, got shapes {a.shape} and {b.shape}")
    if a.shape[-1] != b.shape[-2] or (ndim == 3 and a.shape[0] != b.shape[0]):
        raise ValueError(f"{name}: shapes {a.shape} and {b.shape} are not aligned")
    if a.dtype != b.dtype:
        raise ValueError(
            f"{name}: dtypes differ ({a.dtype} for shape {a.shape}, {b.dtype} for shape {b.shape})"
        )
    if a.dtype.type not in DTYPES:
        raise TypeError(f"{name} supports float32, float64 and int64, not {a.dtype}")
    return a, b


# --8<-- [start:matmul]
def matmul(a, b, bias=None):
    """Matrix product of 2-D arrays: (M, K) @ (K, N) -> new C-contiguous (M, N).

    Args:
        a: (M, K) array; float32, float64 or int64. May be a transposed view.
        b: (K, N) array of the same dtype. May be a transposed view.
        bias: optional (N,) array added to every row of the product (the
            ``+ b`` of a linear layer: C starts as the bias instead of zeros).

    Returns:
        A new (M, N) array of that dtype. K = 0 gives zeros (or the bias).

    Raises:
        ValueError: the shapes do not line up or the dtypes differ.

    Kernel choice: int64 uses the ikj loop; one-column products ``sgemv``;
    products that fit in L2 the unpacked register tiles of ``gemm_small`` (one
    thread: they take microseconds, about what it costs to wake a thread pool);
    thin products, whose B is narrow and fits in L2 (a layer's weight) or, with A
    transposed, whose slab of KD rows of B does (a weight's gradient), the same
    unpacked tiles on all threads (``gemm_direct_parallel``); a weight's gradient
    whose K (the batch's rows) is long next to M and N, on several threads, the same
    tiles on bands of K, one partial product per thread, then their sum
    (``gemm_split_k``: its round-off depends on the thread count, as torch's does); the
    rest the packed micro-kernel on all threads. Transposed operands are
    read in place (see :func:`sitp.kernels.cpu.blas.packed.stored`).
    """
    a, b = _check(a, b, 2, "matmul")
    (M, K), N = a.shape, b.shape[1]
    if bias is not None and (bias.shape != (N,) or bias.dtype != a.dtype):
        raise ValueError(
            f"matmul: bias of shape {bias.shape} and dtype {bias.dtype} does "
            f"not fit a product of shape ({M}, {N}) and dtype {a.dtype}"
        )
    mnk = M * N * K
    # the rows of B the unpacked kernels keep in cache at once: all K, or one slab of KD
    # when A is transposed and B row-major (a weight's gradient dY^T X; gemm_small_set)
    slabs = a.flags.f_contiguous and not a.flags.c_contiguous and b.flags.c_contiguous
    b_rows = min(K, KD) if slabs else K
    unpacked = (
        a.dtype != np.int64
        and N > 1
        and mnk > 0
        and (
            mnk < SMALL_MNK or (N <= DIRECT_MAX_N and b_rows * N * b.itemsize <= DIRECT_MAX_B_BYTES)
        )
    )
    if (  # a weight's gradient on several threads: K, the batch's rows, split among them
        slabs
        and mnk >= SPLIT_K_MIN_MNK
        and bias is None
        and a.dtype != np.int64
        and N > 1
        and K >= 4 * max(M, N)
    ):
        threads = numba.get_num_threads()  # (a call of about a microsecond: asked late)
        if threads > 1 and K >= 64 * threads:
            c = np.empty((M, N), dtype=a.dtype)
            gemm_split_k(a, b, c, threads)
            return c
    if unpacked:
        # the unpacked kernels read A through its strides and rows of B as vectors
        # (a transposed B, a layer's W.T, a strip of columns at a time). They write
        # every entry of C, starting from the bias: C need not be zeroed.
        a = a if a.flags.c_contiguous or a.flags.f_contiguous else np.ascontiguousarray(a)
        b = b if b.flags.c_contiguous or b.flags.f_contiguous else np.ascontiguousarray(b)
        c = np.empty((M, N), dtype=a.dtype)
        has_bias = bias is not None
        bias = np.ascontiguousarray(bias) if has_bias else c[0, :0]
        threads = 1 if mnk < PARALLEL_MIN_MNK else numba.get_num_threads()
        if threads == 1:
            gemm_small_set(a, b, c, bias, has_bias)
        else:  # a thin product: B small, A tall; threads over A's rows
            gemm_direct_parallel(a, b, c, bias, has_bias, threads)
        return c
    if bias is None:
        c = np.zeros((M, N), dtype=a.dtype)
    else:
        c = np.empty((M, N), dtype=a.dtype)
        fill_rows(c, bias)
    if mnk == 0:
        return c
    if a.dtype == np.int64:
        gemm_ikj(np.ascontiguousarray(a), np.ascontiguousarray(b), c)
    elif N == 1:
        sgemv(np.ascontiguousarray(a), b.reshape(K), c.reshape(M))
    else:
        gemm_parallel(a, b, c)
    return c


# --8<-- [end:matmul]


def bmm(a, b):
    """Batched matrix product: (batch, M, K) @ (batch, K, N) -> new (batch, M, N).

    Args:
        a: (batch, M, K) array; float32, float64 or int64.
        b: (batch, K, N) array of the same dtype.

    Returns:
        A new C-contiguous (batch, M, N) array.

    Raises:
        ValueError: batch sizes or inner dimensions differ, or the dtypes differ.

    Small products (the usual case in attention) run one per thread through
    :func:`bmm_kernel`; a batch with less than about 4 million multiply-adds in
    all stays on one thread (:func:`bmm_kernel_serial`), where starting a parallel
    region would cost more than it saves. A batch of fewer large products than
    threads instead calls :func:`matmul` per product, so each gets all the threads.
    """
    a, b = _check(a, b, 3, "bmm")
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    n_batch, M, K = a.shape
    N = b.shape[2]
    c = np.zeros((n_batch, M, N), dtype=a.dtype)
    if n_batch * M * N * K == 0:
        return c
    if a.dtype == np.int64:  # correct, not tuned: the ikj loop per product
        for i in range(n_batch):
            gemm_ikj(a[i], b[i], c[i])
        return c
    if M * N * K >= SMALL_MNK and n_batch < numba.get_num_threads():
        for i in range(n_batch):
            c[i] = matmul(a[i], b[i])
        return c
    if n_batch * M * N * K < PARALLEL_BMM_MNK:
        bmm_kernel_serial(a, b, c)
    else:
        bmm_kernel(a, b, c)
    return c
