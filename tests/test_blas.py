"""sitp.kernels.cpu.blas against numpy on awkward sizes: odd, prime, below and above one tile.

Tile sizes depend on the target (sitp/_target.py): MR x NR = 6 x 16 with KC = 512,
MC = 60 on AVX2; 14 x 32 with KC = 384, MC = 112 on AVX-512. The shapes below cover
partial register tiles, partial panels and more than one KC slab on both.
"""

import itertools

import numba
import numpy as np
import pytest

from sitp.kernels.cpu import blas
from sitp.kernels.cpu.blas.small import (
    KD,
    SHORT_MR,
    aligned_empty,
    gemm_direct_parallel,
    gemm_small_set,
    gemm_split_k,
)

# (M, K, N): not multiples of any tile; one-element; one tile exactly; K = 0
SHAPES = [
    (33, 17, 29),
    (1, 1, 1),
    (7, 129, 65),
    (6, 16, 16),
    (14, 32, 32),
    (5, 0, 3),
    (13, 600, 37),
    (127, 389, 67),
]
SMALL_SHAPES = SHAPES[:5]  # the naive kernel only gets these
FLOATS = [np.float32, np.float64]


def rand(shape, dtype, rng):
    return rng.standard_normal(shape).astype(dtype)


def tol(dtype, k):
    """Rounding grows with the length of the sums: scale the tolerance by sqrt(K)."""
    eps = np.finfo(dtype).eps
    return dict(rtol=10 * eps * np.sqrt(max(k, 1)), atol=10 * eps * np.sqrt(max(k, 1)))


LADDER = [
    blas.gemm_naive,
    blas.gemm_ikj,
    blas.gemm_blocked,
    blas.gemm_packed,
    blas.gemm_parallel,
    blas.gemm_small,
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kernel", LADDER, ids=lambda f: f.__name__)
def test_ladder_matches_numpy(kernel, dtype):
    rng = np.random.default_rng(0)
    shapes = SMALL_SHAPES if kernel is blas.gemm_naive else SHAPES
    for M, K, N in shapes:
        A, B = rand((M, K), dtype, rng), rand((K, N), dtype, rng)
        C0 = rand((M, N), dtype, rng)
        C = C0.copy()
        kernel(A, B, C)  # accumulates: C = C0 + A @ B
        np.testing.assert_allclose(C, C0 + A @ B, **tol(dtype, K), err_msg=f"{M}x{K}x{N}")


def test_blocked_with_small_blocks():
    """Block sizes that do not divide the matrix: every edge case of the block loops."""
    rng = np.random.default_rng(1)
    A, B = rand((37, 23), np.float32, rng), rand((23, 41), np.float32, rng)
    C = np.zeros((37, 41), np.float32)
    blas.gemm_blocked(A, B, C, 8, 5, 16)
    np.testing.assert_allclose(C, A @ B, **tol(np.float32, 23))


@pytest.mark.parametrize("dtype", FLOATS)
def test_packed_more_than_one_slab_and_block(dtype):
    """K > KC and M > MC: several packed slabs and several row blocks."""
    rng = np.random.default_rng(2)
    M, K, N = blas.MC + 7, blas.KC + 3, 2 * blas.NR + 5
    A, B = rand((M, K), dtype, rng), rand((K, N), dtype, rng)
    for kernel in (blas.gemm_packed, blas.gemm_parallel):
        C = np.zeros((M, N), dtype)
        kernel(A, B, C)
        np.testing.assert_allclose(C, A @ B, **tol(dtype, K))


@pytest.mark.parametrize("n_threads", [1, 2])
def test_parallel_grid_thin_matrices(n_threads):
    """Fewer row blocks than threads: the parallel kernel splits columns instead."""
    n_threads = min(n_threads, numba.config.NUMBA_NUM_THREADS)
    old = numba.get_num_threads()
    numba.set_num_threads(n_threads)
    try:
        rng = np.random.default_rng(3)
        for M, K, N in [(1, 40, 300), (3, 70, 33), (250, 9, 2)]:
            A, B = rand((M, K), np.float32, rng), rand((K, N), np.float32, rng)
            C = np.zeros((M, N), np.float32)
            blas.gemm_parallel(A, B, C)
            np.testing.assert_allclose(C, A @ B, **tol(np.float32, K))
    finally:
        numba.set_num_threads(old)


@pytest.mark.parametrize("dtype", FLOATS)
def test_micro_kernel_full_and_edge_tiles(dtype):
    rng = np.random.default_rng(4)
    kc, nr = 9, blas.packed.NR if dtype == np.float32 else blas.packed.NR // 2
    Ap, Bp = rand((kc, blas.MR), dtype, rng), rand((kc, nr), dtype, rng)
    C = np.zeros((blas.MR + 4, nr + 3), dtype)
    blas.micro_kernel(Ap, Bp, C, 0, 0)  # a full tile at the corner
    # only a corner of this one is inside C: up to 4 rows and 5 columns (fewer where the
    # tile itself is smaller: x86-64's SSE2 tile is 4 float64 columns wide)
    blas.micro_kernel(Ap, Bp, C, blas.MR, nr - 2)
    rows, cols = min(4, blas.MR), min(5, nr)
    expected = np.zeros_like(C)
    expected[: blas.MR, :nr] += Ap.T @ Bp
    expected[blas.MR : blas.MR + rows, nr - 2 : nr - 2 + cols] += (Ap.T @ Bp)[:rows, :cols]
    np.testing.assert_allclose(C, expected, **tol(dtype, kc))


@pytest.mark.parametrize("dtype", FLOATS)
def test_saxpy_sgemv_triad(dtype):
    rng = np.random.default_rng(5)
    x, y = rand(1001, dtype, rng), rand(1001, dtype, rng)
    y0 = y.copy()
    blas.saxpy(dtype(2.5), x, y)
    np.testing.assert_allclose(y, y0 + 2.5 * x, **tol(dtype, 1))
    A, v, w = rand((37, 129), dtype, rng), rand(129, dtype, rng), rand(37, dtype, rng)
    w0 = w.copy()
    blas.sgemv(A, v, w)
    np.testing.assert_allclose(w, w0 + A @ v, **tol(dtype, 129))
    a = np.empty_like(x)
    blas.triad(a, x, y, dtype(3))
    np.testing.assert_allclose(a, x + 3 * y, **tol(dtype, 1))


@pytest.mark.parametrize("dtype", FLOATS + [np.int64])
@pytest.mark.parametrize(
    "shape",
    SHAPES + [(0, 4, 3), (4, 3, 0), (64, 70, 1), (150, 140, 130), (13, 20, 250), (201, 190, 205)],
)
def test_matmul(shape, dtype):
    M, K, N = shape
    rng = np.random.default_rng(6)
    if dtype is np.int64:
        A, B = rng.integers(-9, 9, (M, K)), rng.integers(-9, 9, (K, N))
    else:
        A, B = rand((M, K), dtype, rng), rand((K, N), dtype, rng)
    C = blas.matmul(A, B)
    assert C.shape == (M, N) and C.dtype == dtype and C.flags.c_contiguous
    if dtype is np.int64:
        np.testing.assert_array_equal(C, A @ B)
    else:
        np.testing.assert_allclose(C, A @ B, **tol(dtype, K))


def test_matmul_non_contiguous_input():
    rng = np.random.default_rng(7)
    A = rand((40, 30), np.float32, rng)
    np.testing.assert_allclose(blas.matmul(A.T, A), A.T @ A, **tol(np.float32, 40))


@pytest.mark.parametrize("dtype", FLOATS + [np.int64])
@pytest.mark.parametrize(
    "shape",
    [
        (128, 32, 16, 32),
        (256, 32, 32, 32),
        (3, 7, 5, 9),
        (1, 1, 1, 1),
        (2, 0, 3, 4),
        (4, 3, 0, 5),
        (5, 60, 50, 70),
        (1, 130, 100, 120),
    ],
)
def test_bmm(shape, dtype):
    nb, M, K, N = shape
    rng = np.random.default_rng(8)
    if dtype is np.int64:
        A, B = rng.integers(-9, 9, (nb, M, K)), rng.integers(-9, 9, (nb, K, N))
    else:
        A, B = rand((nb, M, K), dtype, rng), rand((nb, K, N), dtype, rng)
    C = blas.bmm(A, B)
    assert C.shape == (nb, M, N) and C.dtype == dtype and C.flags.c_contiguous
    np.testing.assert_allclose(C, A @ B, **tol(dtype, K) if dtype is not np.int64 else {})


@pytest.mark.parametrize(
    "fn,a_shape,b_shape",
    [
        (blas.matmul, (3, 4), (5, 6)),
        (blas.matmul, (3, 4), (4,)),
        (blas.matmul, (2, 3, 4), (2, 4, 5)),
        (blas.bmm, (2, 3, 4), (2, 5, 6)),
        (blas.bmm, (2, 3, 4), (3, 4, 5)),
        (blas.bmm, (3, 4), (4, 5)),
    ],
)
def test_shape_errors_name_both_shapes(fn, a_shape, b_shape):
    a, b = np.zeros(a_shape, np.float32), np.zeros(b_shape, np.float32)
    with pytest.raises(ValueError) as err:
        fn(a, b)
    assert str(a_shape) in str(err.value) and str(b_shape) in str(err.value)


def test_dtype_errors():
    with pytest.raises(ValueError, match="dtypes differ"):
        blas.matmul(np.zeros((2, 2), np.float32), np.zeros((2, 2), np.float64))
    with pytest.raises(TypeError):
        blas.matmul(np.zeros((2, 2), np.int8), np.zeros((2, 2), np.int8))
    with pytest.raises(TypeError):
        blas.matmul([[1.0]], [[1.0]])


def test_slp_vectorizer_is_on():
    """The micro-kernel is ~25x slower without it; sitp turns it on at import."""
    assert numba.config.SLP_VECTORIZE


# Shapes on both sides of matmul's small/packed switch (SMALL_MNK = 192^3).
MATMUL_SHAPES = [(33, 17, 29), (1, 5, 3), (7, 129, 65), (301, 257, 131), (5, 0, 3)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_reads_transposed_operands_in_place(dtype, ta, tb):
    """A transposed view is passed as the stored array plus a flag, never copied;
    the product must not notice."""
    rng = np.random.default_rng(3)
    for M, K, N in MATMUL_SHAPES:
        A = rand((K, M), dtype, rng).T if ta else rand((M, K), dtype, rng)
        B = rand((N, K), dtype, rng).T if tb else rand((K, N), dtype, rng)
        assert A.flags.f_contiguous == ta or M == 1 or K <= 1
        np.testing.assert_allclose(
            blas.matmul(A, B), A @ B, **tol(dtype, K), err_msg=f"{M}x{K}x{N} ta={ta} tb={tb}"
        )


def test_matmul_strided_operands_are_copied_correctly():
    rng = np.random.default_rng(4)
    A = rand((70, 90), np.float32, rng)[::2, 1::3]  # neither C- nor F-contiguous
    B = rand((90, 300), np.float32, rng)[::3, ::2]
    np.testing.assert_allclose(blas.matmul(A, B), A @ B, **tol(np.float32, 30))
    np.testing.assert_allclose(
        blas.matmul(np.ascontiguousarray(A), B), A @ B, **tol(np.float32, 30)
    )


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_bias_starts_the_sum(dtype):
    rng = np.random.default_rng(5)
    for M, K, N in MATMUL_SHAPES:
        A, B, b = rand((M, K), dtype, rng), rand((N, K), dtype, rng).T, rand((N,), dtype, rng)
        np.testing.assert_allclose(blas.matmul(A, B, bias=b), A @ B + b, **tol(dtype, K))


def test_matmul_bias_of_wrong_shape_is_a_clear_error():
    A, B = np.ones((3, 4), np.float32), np.ones((4, 5), np.float32)
    with pytest.raises(ValueError, match=r"bias of shape \(4,\)"):
        blas.matmul(A, B, bias=np.ones(4, np.float32))
    with pytest.raises(ValueError, match="dtype float64"):
        blas.matmul(A, B, bias=np.ones(5, np.float64))


# Rows and columns on each side of the register tile's edges (MR rows, NR and NR/2
# columns), for the tiles that store into C and end flush with its last row or column.
_MR, _NR = blas.MR, blas.NR


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", ["rows", "cols", "strided"])
def test_gemm_small_set_edges_and_layouts(dtype, layout):
    """C = A @ B (+ bias) into an uninitialised C, with A's rows contiguous, its columns
    contiguous (a transposed view, and B transposed too, or K long enough for slabs) or
    neither, on one thread and on two."""
    rng = np.random.default_rng(9)
    nr = _NR * 4 // np.dtype(dtype).itemsize
    Ms = (1, SHORT_MR - 1, SHORT_MR, SHORT_MR + 1, _MR - 1, _MR, _MR + 1, 3 * _MR + 5)
    Ns = (1, nr // 2 - 1, nr // 2, nr // 2 + 1, nr - 1, nr, nr + 1, 2 * nr + nr // 2 + 3)
    Ks = (37, 2 * KD + 7) if layout == "cols" else (37,)
    for M, N, K in itertools.product(Ms, Ns, Ks):
        if layout == "rows":
            A = rand((M, K), dtype, rng)
        elif layout == "cols":
            A = rand((K, M), dtype, rng).T
        else:
            A = rand((2 * M, 3 * K), dtype, rng)[::2, ::3]
        B, bias = rand((K, N), dtype, rng), rand((N,), dtype, rng)
        if layout == "cols" and K < KD:  # B transposed too: a layer's x @ W.T
            B = np.ascontiguousarray(B.T).T
        for has_bias in (False, True):
            want = A @ B + (bias if has_bias else 0)
            C = np.full((M, N), np.nan, dtype)
            gemm_small_set(A, B, C, bias, has_bias)
            np.testing.assert_allclose(C, want, **tol(dtype, K), err_msg=f"{M}x{K}x{N}")
            C = np.full((M, N), np.nan, dtype)
            gemm_direct_parallel(A, B, C, bias, has_bias, 2)
            np.testing.assert_allclose(C, want, **tol(dtype, K), err_msg=f"{M}x{K}x{N}, 2 threads")


@pytest.mark.parametrize("dtype", FLOATS)
def test_aligned_empty_starts_on_a_cache_line(dtype):
    """The packed strips of B start on a 64-byte boundary (a 128-byte row of a strip then
    spans two cache lines, not three), whatever numba's allocator returned."""
    for rows, cols in itertools.product((1, 3, 14, 129), (1, 5, 16, 32)):
        a = aligned_empty(rows, cols, np.dtype(dtype))
        assert a.shape == (rows, cols) and a.dtype == dtype and a.flags.c_contiguous
        assert a.ctypes.data % 64 == 0, (rows, cols, a.ctypes.data % 64)


@pytest.mark.parametrize("dtype", FLOATS)
def test_split_k_weight_gradient(dtype):
    """A weight's gradient dY^T X with K split among threads (gemm_split_k): each band's
    partial product and their sum match numpy, for bands of odd lengths, Ms and Ns that
    are not multiples of the tiles, and K shorter than a slab of KD rows in a band; the
    sum is taken in the order of the bands, so a second call gives the same bits. The
    bands are the kernel's logic, not the pool's: prange runs them on one thread here
    (the test workers' numba has one), in the same order as on several."""
    rng = np.random.default_rng(12)
    for M, K, N in [(29, 517, 37), (64, 1024, 256), (7, 131, 65), (15, 2 * KD + 9, 16)]:
        A = rand((K, M), dtype, rng).T  # dY^T: read in place, as Linear.backward does
        B = rand((K, N), dtype, rng)
        want = A.astype(np.float64) @ B.astype(np.float64)
        # the classic bound of a sum of K products: K eps times the sum of their sizes
        bound = K * np.finfo(dtype).eps * (np.abs(A).astype(np.float64) @ np.abs(B))
        for bands in (2, 3):
            C = np.full((M, N), np.nan, dtype)
            gemm_split_k(A, B, C, bands)
            assert np.all(np.abs(C - want) <= bound), f"{M}x{K}x{N} in {bands} bands"
            again = np.full((M, N), np.nan, dtype)
            gemm_split_k(A, B, again, bands)
            np.testing.assert_array_equal(again, C)


@pytest.mark.parametrize("dtype", FLOATS)
def test_few_rows_times_a_transposed_weight_give_the_tiles_bits(dtype):
    """x @ W.T for fewer rows than the shortest tile (one token through a Linear) reads W's
    rows in place (small._gemv_cols) instead of copying all of W for the tiles: each entry
    is the same sum, from the bias or 0 in the order of K with the same contraction, so the
    bits are those of the tiles run on a copy of W.T with contiguous rows."""
    rng = np.random.default_rng(11)
    Ms = (1, 2, SHORT_MR - 1, SHORT_MR, _MR - 1)
    for M, K, N in itertools.product(Ms, (1, 17, 131), (2, 7, 8, 9, 17, 65)):
        for a_cols in (False, True):
            A = rand((K, M), dtype, rng).T if a_cols else rand((M, K), dtype, rng)
            W, bias = rand((N, K), dtype, rng), rand((N,), dtype, rng)
            for has_bias in (False, True):
                got, want = (np.full((M, N), np.nan, dtype) for _ in range(2))
                gemm_small_set(A, W.T, got, bias, has_bias)
                gemm_small_set(A, np.ascontiguousarray(W.T), want, bias, has_bias)
                assert got.tobytes() == want.tobytes(), f"{M}x{K}x{N} {a_cols=} {has_bias=}"
                np.testing.assert_allclose(
                    got, A @ W.T + (bias if has_bias else 0), **tol(dtype, K)
                )


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("a_cols", [False, True])
@pytest.mark.parametrize("b_cols", [False, True])
def test_short_tiles_give_the_full_tiles_bits(dtype, a_cols, b_cols):
    """Fewer rows than a tile (SHORT_MR to MR - 1: a decode step's batch) run in tiles of
    SHORT_MR rows; each entry is the same sum in the same order whatever the tile's height, so
    its bits are those of the same rows computed among MR or more (full tiles). (Not for
    a transposed A with K over KD: full tiles then sum K in slabs, short ones do not.)"""
    rng = np.random.default_rng(13)
    Ks = (1, 17, KD - 3) if a_cols else (1, 17, KD + 3, 2 * KD + 9)
    for M, K, N in itertools.product(range(SHORT_MR, _MR), Ks, (_NR // 2, _NR + 3, 65)):
        big = rand((_MR + M, K), dtype, rng)
        if a_cols:
            big = np.ascontiguousarray(big.T).T
        W, bias = rand((N, K), dtype, rng), rand((N,), dtype, rng)
        B = W.T if b_cols else np.ascontiguousarray(W.T)
        for has_bias in (False, True):
            few, many = np.full((M, N), np.nan, dtype), np.full((_MR + M, N), np.nan, dtype)
            gemm_small_set(big[:M], B, few, bias, has_bias)
            gemm_small_set(big, B, many, bias, has_bias)
            assert few.tobytes() == many[:M].tobytes(), f"{M}x{K}x{N} {has_bias=}"
