"""GEMM for small matrices: register tiles without packing (section 2.3).

When A, B and C together fit in L1 (attention's 32 x 16 @ 16 x 32 blocks, a
small layer), packing costs as much as the product. This kernel keeps the
register tiles of the micro-kernel but reads its operands where they are: a row
segment of B is contiguous already, and the values of A are broadcast from rows of
A. Narrower tiles cover the edges; only the last few columns use the ikj loop.
"""

import numpy as np
from numba import njit, prange

from sitp.kernels.cpu.anylayout import any_layout
from sitp.kernels.cpu.blas.packed import FASTMATH, MR, make_tile_fma, tile_nr

# Rows of gemm_small's tiles. With AVX-512's 14-row micro-kernel tile, the small
# products attention makes (32 rows) would leave 4 rows over; 8 rows divide them.
SMALL_MR = MR
# gemm_small_set's tiles, compiled for an A whose rows are contiguous ("p": a_sp is 1)
# and for one whose columns are ("i": a transposed view). With A's strides unknown,
# LLVM walks down A's column with a chain of dependent adds, one per row, about as
# long as the step's FMAs take (make_tile_fma).
_tile_full = make_tile_fma(SMALL_MR, 2)  # SMALL_MR x NR
_tile_half = make_tile_fma(SMALL_MR, 1)  # SMALL_MR x NR/2: an N of 16 on AVX-512
_tile_full_rows = make_tile_fma(SMALL_MR, 2, a_unit="p")  # A's rows contiguous
_tile_half_rows = make_tile_fma(SMALL_MR, 1, a_unit="p")
_tile_full_cols = make_tile_fma(SMALL_MR, 2, a_unit="i")  # A's columns contiguous (A.T)
_tile_half_cols = make_tile_fma(SMALL_MR, 1, a_unit="i")
_row_full = make_tile_fma(1, 2)  # one row at a time, for the rows left over
_row_half = make_tile_fma(1, 1)
# Shorter tiles, of SHORT_MR rows, for products of SHORT_MR to SMALL_MR - 1 rows (a
# decode step's batch of 8 sequences, when SMALL_MR is AVX-512's 14; 4 on AVX2, whose
# SMALL_MR is 6): one such tile reads each row of B once for all its rows, where tiles
# of one row read it once a row, and a one-row tile's two accumulators wait on each
# other's FMAs.
SHORT_MR = 8 if SMALL_MR > 8 else 4
_short_full_rows = make_tile_fma(SHORT_MR, 2, a_unit="p")
_short_half_rows = make_tile_fma(SHORT_MR, 1, a_unit="p")
_short_full_cols = make_tile_fma(SHORT_MR, 2, a_unit="i")
_short_half_cols = make_tile_fma(SHORT_MR, 1, a_unit="i")


@njit(cache=True)
def _tile(full, A, a_off, a_si, a_sp, B, b_off, b_sp, K, C, c_off, ldc, mode, bias, bias_off):
    """One SMALL_MR x NR tile (``full``) or SMALL_MR x NR/2 tile of C from A and B in
    place, for an A whose rows are contiguous (``a_sp`` 1) or else whose columns are."""
    if full and a_sp == 1:
        _tile_full_rows(A, a_off, a_si, 1, B, b_off, b_sp, K, C, c_off, ldc, mode, bias, bias_off)
    elif full:
        _tile_full_cols(A, a_off, 1, a_sp, B, b_off, b_sp, K, C, c_off, ldc, mode, bias, bias_off)
    elif a_sp == 1:
        _tile_half_rows(A, a_off, a_si, 1, B, b_off, b_sp, K, C, c_off, ldc, mode, bias, bias_off)
    else:
        _tile_half_cols(A, a_off, 1, a_sp, B, b_off, b_sp, K, C, c_off, ldc, mode, bias, bias_off)


@njit(cache=True)
def _tile_mr(
    mr, full, A, a_off, a_si, a_sp, B, b_off, b_sp, K, C, c_off, ldc, mode, bias, bias_off
):
    """_tile for a tile of ``mr`` rows: SMALL_MR, or SHORT_MR (the short tiles)."""
    if mr == SMALL_MR:
        _tile(full, A, a_off, a_si, a_sp, B, b_off, b_sp, K, C, c_off, ldc, mode, bias, bias_off)
    elif a_sp == 1:  # A's rows contiguous
        if full:
            _short_full_rows(
                A, a_off, a_si, 1, B, b_off, b_sp, K, C, c_off, ldc, mode, bias, bias_off
            )
        else:
            _short_half_rows(
                A, a_off, a_si, 1, B, b_off, b_sp, K, C, c_off, ldc, mode, bias, bias_off
            )
    elif full:  # A's columns contiguous
        _short_full_cols(A, a_off, 1, a_sp, B, b_off, b_sp, K, C, c_off, ldc, mode, bias, bias_off)
    else:
        _short_half_cols(A, a_off, 1, a_sp, B, b_off, b_sp, K, C, c_off, ldc, mode, bias, bias_off)


# --8<-- [start:gemm_small]
@any_layout  # compiled once per dtype, whatever the layouts of A, B and C
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
    if C.strides[1] != C.itemsize:  # C's rows are not contiguous: work on a copy
        Cc = np.ascontiguousarray(C)
        _gemm_small(A, B, Cc, 0, Cc[0, :0])
        C[:] = Cc
        return
    _gemm_small(A, B, C, 0, C[0, :0])  # (an empty bias: mode 0 never reads it)


@any_layout
@njit(cache=True, fastmath=FASTMATH)
def gemm_small_set(A, B, C, bias, has_bias):
    """C = A @ B (+ bias on every row): gemm_small for a C not yet written (np.empty).

    The tiles store into C instead of adding to it, starting from the bias when
    ``has_bias``: no pass to zero C or to fill it with the bias first.
    """
    mode = 2 if has_bias else 1
    if C.shape[1] > 1 and C.strides[1] != C.itemsize:  # C's rows are not contiguous
        Cc = np.empty(C.shape, C.dtype)
        _gemm_small(A, B, Cc, mode, bias)
        C[:] = Cc
        return
    M, N = C.shape
    a_si, a_sp = A.strides[0] // A.itemsize, A.strides[1] // A.itemsize
    if M < SHORT_MR and N > 1 and B.strides[0] == B.itemsize and B.strides[1] != B.itemsize:
        _gemv_cols(A, B, C, mode, bias)  # a row or few times a layer's W.T
        return
    if M < SHORT_MR or N < tile_nr(A.dtype) // 2 or (a_sp != 1 and a_si != 1):
        _gemm_small(A, B, C, mode, bias)
    else:
        mr = SMALL_MR if M >= SMALL_MR else SHORT_MR
        _gemm_set(A, B, C, mode, bias, mr)


@njit(cache=True, fastmath=FASTMATH)
def _gemv_cols(A, B, C, mode, bias):
    """C = A @ B (mode 1) or A @ B + bias (mode 2) for fewer rows than a tile's, with B's
    columns contiguous: a layer's ``x @ W.T`` when x is one token (decoding, sampling).

    The tiles read B by rows, so they would first copy all of B (the whole weight, at
    every call) to use one or two of their rows. Here each column of B, a row of W, is
    read in place, eight at a time: eight sums run side by side, one value of A times
    one value of each of eight rows of W a step. Each sum starts from the bias (or 0)
    and adds the products in the order of p, with the tiles' contraction (an FMA where
    the target has one): the bits are those of the tiles.
    """
    M, K = A.shape
    N = B.shape[1]
    W = B.T  # (N, K), rows contiguous
    zero = np.zeros(1, C.dtype)[0]  # (C is not written yet: no C[j] * 0)
    for i in range(M):
        a = A[i]
        c = C[i]
        j = 0
        while j + 8 <= N:
            w0, w1, w2, w3 = W[j], W[j + 1], W[j + 2], W[j + 3]
            w4, w5, w6, w7 = W[j + 4], W[j + 5], W[j + 6], W[j + 7]
            if mode == 2:
                s0, s1, s2, s3 = bias[j], bias[j + 1], bias[j + 2], bias[j + 3]
                s4, s5, s6, s7 = bias[j + 4], bias[j + 5], bias[j + 6], bias[j + 7]
            else:
                s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = zero
            for p in range(K):
                x = a[p]
                s0 += x * w0[p]
                s1 += x * w1[p]
                s2 += x * w2[p]
                s3 += x * w3[p]
                s4 += x * w4[p]
                s5 += x * w5[p]
                s6 += x * w6[p]
                s7 += x * w7[p]
            c[j], c[j + 1], c[j + 2], c[j + 3] = s0, s1, s2, s3
            c[j + 4], c[j + 5], c[j + 6], c[j + 7] = s4, s5, s6, s7
            j += 8
        for jj in range(j, N):
            w = W[jj]
            s = bias[jj] if mode == 2 else zero
            for p in range(K):
                s += a[p] * w[p]
            c[jj] = s


@njit(cache=True)
def _gemm_set(A, B, C, mode, bias, mr):
    """C = A @ B (mode 1) or A @ B + bias (mode 2), all in full register tiles of ``mr``
    rows (SMALL_MR, or SHORT_MR for a C of fewer rows: :func:`_tile_mr`).

    A tile that stores (rather than adds) may overlap one already written: it
    writes the same values again, every entry being the same sum in the same order.
    So the last SMALL_MR rows and the last NR (or NR/2) columns of C are one more
    tile each, placed flush with C's edge, instead of rows one at a time and an
    ikj strip. For a C at least mr x NR/2, with contiguous rows, and an A
    whose rows or columns are contiguous (gemm_small_set sends the rest to
    :func:`_gemm_small`).

    B's rows are read as vectors. A B whose columns are contiguous instead (a
    layer's weight read transposed, ``W.T``) is first copied into strips of NR
    columns, each (K, NR) with its rows contiguous: each row of B.T is read once,
    in order (numpy's copy of a transposed array takes about three times as long).
    """
    M, K = A.shape
    N = B.shape[1]
    NR = tile_nr(A.dtype)
    a_si, a_sp = A.strides[0] // A.itemsize, A.strides[1] // A.itemsize
    ldc = C.strides[0] // C.itemsize
    j_tiles, full = _column_tiles(N, NR)
    if N == 1 or B.strides[1] == B.itemsize:  # B's rows contiguous: read in place
        b_sp = B.strides[0] // B.itemsize
        # A transposed, and long: slabs of K (the full tiles only)
        if a_si == 1 and a_sp != 1 and K > KD and mr == SMALL_MR:
            _gemm_set_slabs(A, a_sp, B, b_sp, C, ldc, mode, bias, j_tiles, full)
            return
        _set_tiles(A, a_si, a_sp, B, 0, b_sp, K, C, ldc, mode, bias, j_tiles, full, mr)
        return
    Bs = np.ascontiguousarray(B.T) if B.strides[0] != B.itemsize else B.T  # rows: B's columns
    Bp = aligned_empty(j_tiles.size * K, NR, A.dtype)  # strip t: rows t * K .. (t + 1) * K
    for t in range(j_tiles.size):
        j0, w = j_tiles[t], NR if full[t] else NR // 2
        for p in range(K):  # Bp[t * K + p, :w] = B[p, j0:j0 + w], a row at a time
            dst = Bp[t * K + p]
            for jj in range(w):
                dst[jj] = Bs[j0 + jj, p]
    _set_tiles(A, a_si, a_sp, Bp, K * NR, NR, K, C, ldc, mode, bias, j_tiles, full, mr)


@njit(cache=True)
def _set_tiles(A, a_si, a_sp, B, strip, b_sp, K, C, ldc, mode, bias, j_tiles, full, mr):
    """_gemm_set's tiles: blocks of ``mr`` rows of C, the last one flush with C's edge, each
    across the column tiles. Tile t reads B from element ``t * strip`` (B packed in strips)
    or, when ``strip`` is 0, from column ``j_tiles[t]`` (B read in place)."""
    M = C.shape[0]
    for i in range(0, M, mr):
        i0 = min(i, M - mr)  # the last block of rows ends at C's edge
        a0, c0 = i0 * a_si, i0 * ldc
        for t in range(j_tiles.size):
            j0 = j_tiles[t]
            b0 = t * strip if strip else j0
            if mr == SMALL_MR:  # (through _tile_mr, these took about 15% longer)
                _tile(full[t], A, a0, a_si, a_sp, B, b0, b_sp, K, C, c0 + j0, ldc, mode, bias, j0)
            else:
                _tile_mr(
                    mr, full[t], A, a0, a_si, a_sp, B, b0, b_sp, K, C, c0 + j0, ldc, mode, bias, j0
                )


@njit(cache=True)
def aligned_empty(rows, cols, dtype):
    """An uninitialised C-contiguous (rows, cols) array whose data starts on a 64-byte
    boundary. numba's ``np.empty`` may start 32 bytes into a cache line; then each
    128-byte row of a packed strip of B (NR float32 on AVX-512) spans three cache lines
    instead of two, and a 512 x 128 layer's product took 5-8% longer."""
    raw = np.empty(rows * cols + 16, dtype)  # 16 spare: 64 bytes of float32, 128 of float64
    skip = np.int64(raw.ctypes.data % 64)
    skip = (64 - skip) % 64 // raw.itemsize
    return raw[skip : skip + rows * cols].reshape(rows, cols)


# Depth of the slabs of K that _gemm_set_slabs cuts a long product with a transposed A
# into (a weight's gradient dY^T X, K = the batch's B * T rows): one slab of a block of
# A's rows (KD x MR) and of a strip of B (KD x NR) stay in L1 together.
KD = 128


@njit(cache=True)
def _gemm_set_slabs(A, a_sp, B, b_sp, C, ldc, mode, bias, j_tiles, full):
    """_gemm_set's tiles for an A whose columns are contiguous, over slabs of KD of K.

    Read in place, a block of A's rows is one run of MR values per step p, at a new
    cache line each step; over K = 768 steps that is more than L1 holds, and so is
    the strip of B, so every step waited on L2. Cut into slabs, each tile's slab of
    A and B stays in L1 while the tiles of the slab run; the first slab stores into
    C (with the bias), the others add to it. Tiles that overlap others (the last
    rows and columns when C's edge is ragged) cannot add twice: they run last, over
    the whole of K at once, and store.
    """
    M, K = A.shape
    NR = tile_nr(A.dtype)
    m_full = M - M % SMALL_MR  # row blocks that overlap no other
    nt_clean = (C.shape[1] - C.shape[1] % NR) // NR  # column tiles that overlap no other
    for pc in range(0, K, KD):
        kc = min(KD, K - pc)
        m = mode if pc == 0 else 0
        for i0 in range(0, m_full, SMALL_MR):
            for t in range(nt_clean):
                j0 = j_tiles[t]
                a0, b0, c0 = i0 + pc * a_sp, j0 + pc * b_sp, i0 * ldc + j0
                _tile(True, A, a0, 1, a_sp, B, b0, b_sp, kc, C, c0, ldc, m, bias, j0)
    for i in range(0, M, SMALL_MR):  # the tiles at a ragged edge, over all of K
        i0 = min(i, M - SMALL_MR)
        for t in range(j_tiles.size):
            if i0 + SMALL_MR > m_full or t >= nt_clean:
                j0 = j_tiles[t]
                _tile(
                    full[t], A, i0, 1, a_sp, B, j0, b_sp, K, C, i0 * ldc + j0, ldc, mode, bias, j0
                )


@njit(cache=True)
def _column_tiles(N, NR):
    """First columns of the tiles that cover N >= NR/2 columns, and whether each is a
    full (NR-wide) tile or a half one: full tiles, then one more tile (or two halves)
    ending flush with column N."""
    H = NR // 2
    n_full = N - N % NR
    r = N - n_full  # columns past the full tiles
    n = n_full // NR + (2 if (r > H and N < NR) else 1 if r > 0 else 0)
    j_tiles = np.empty(n, np.int64)
    full = np.empty(n, np.bool_)
    for t in range(n_full // NR):
        j_tiles[t], full[t] = t * NR, True
    t = n_full // NR
    if r > H and N >= NR:  # one more full tile, ending at column N
        j_tiles[t], full[t] = N - NR, True
    elif r > H:  # H < N < NR: two half tiles, the second ending at column N
        j_tiles[t], full[t] = 0, False
        j_tiles[t + 1], full[t + 1] = N - H, False
    elif r > 0:  # a half tile ending at column N
        j_tiles[t], full[t] = N - H, False
    return j_tiles, full


@njit(cache=True, inline="always")
def _gemm_small(A, B, C, mode, bias):
    """The tiles of gemm_small, on a C whose rows are contiguous.

    mode 0: C += A @ B, 1: C = A @ B, 2: C = A @ B + bias. The tiles write C
    themselves (make_tile_fma's modes); only the ikj strip at the right adds to C.
    """
    M, K = A.shape
    N = B.shape[1]
    if N > 1 and B.strides[1] != B.itemsize:
        B = np.ascontiguousarray(B)
    NR = tile_nr(A.dtype)
    H = NR // 2
    m_full, n_full = M - M % SMALL_MR, N - N % NR
    n_vec = n_full + H if N - n_full >= H else n_full  # columns the vector tiles cover
    a_si, a_sp = A.strides[0] // A.itemsize, A.strides[1] // A.itemsize
    b_sp = B.strides[0] // B.itemsize
    ldc = C.strides[0] // C.itemsize
    if mode != 0:  # the strip the ikj loop adds to: start it
        for i in range(M):
            for j in range(n_vec, N):
                C[i, j] = bias[j] if mode == 2 else 0
    for i0 in range(0, m_full, SMALL_MR):  # blocks of SMALL_MR rows
        for j0 in range(0, n_full, NR):
            _tile_full(
                A, i0 * a_si, a_si, a_sp, B, j0, b_sp, K, C, i0 * ldc + j0, ldc, mode, bias, j0
            )
        if n_vec > n_full:
            _tile_half(
                A,
                i0 * a_si,
                a_si,
                a_sp,
                B,
                n_full,
                b_sp,
                K,
                C,
                i0 * ldc + n_full,
                ldc,
                mode,
                bias,
                n_full,
            )
    for i0 in range(m_full, M):  # the rows left over, one at a time
        for j0 in range(0, n_full, NR):
            _row_full(
                A, i0 * a_si, a_si, a_sp, B, j0, b_sp, K, C, i0 * ldc + j0, ldc, mode, bias, j0
            )
        if n_vec > n_full:
            _row_half(
                A,
                i0 * a_si,
                a_si,
                a_sp,
                B,
                n_full,
                b_sp,
                K,
                C,
                i0 * ldc + n_full,
                ldc,
                mode,
                bias,
                n_full,
            )
    for i in range(M):  # right strip: the last N - n_vec columns
        c_i = C[i, n_vec:]
        for p in range(K):
            a_ip = A[i, p]
            b_p = B[p, n_vec:]
            for j in range(c_i.shape[0]):
                c_i[j] += a_ip * b_p[j]


# --8<-- [end:gemm_small]


# Products whose B is at most this wide and this large skip packing even when they are
# too big for one thread (the GPT's layers: K of 64 to 512, N up to 4 * 256): B's rows
# stay in L2 for every row block of A, and A is read in place, through its strides.
DIRECT_MAX_N = 1024
DIRECT_MAX_B_BYTES = 1 << 19


# --8<-- [start:gemm_direct_parallel]
@any_layout
@njit(cache=True, parallel=True)
def gemm_direct_parallel(A, B, C, bias, has_bias, n_threads):
    """C = A @ B (+ bias) for a C not yet written: gemm_small_set on n_threads
    threads, each on a band of C's rows or, when C is wider than tall, of its columns.

    Each thread reads all of the operand it does not split: a band of rows reads all
    of B, a band of columns all of A. Splitting the longer side of C halves the
    larger share (a weight's gradient dY^T X, 128 x 512 for a GPT's MLP, reads its
    768 x 512 dY once between the threads instead of once each).
    """
    M, N = C.shape
    if N > M:  # bands of whole tiles of columns
        NR = tile_nr(A.dtype)
        n_blocks = (N + NR - 1) // NR
        for t in prange(n_threads):
            j0 = (t * n_blocks // n_threads) * NR
            j1 = min(N, ((t + 1) * n_blocks // n_threads) * NR)
            if j1 > j0:
                b = bias[j0:j1] if has_bias else bias
                gemm_small_set(A, B[:, j0:j1], C[:, j0:j1], b, has_bias)
        return
    n_blocks = (M + SMALL_MR - 1) // SMALL_MR
    for t in prange(n_threads):
        i0 = (t * n_blocks // n_threads) * SMALL_MR
        i1 = min(M, ((t + 1) * n_blocks // n_threads) * SMALL_MR)
        if i1 > i0:
            gemm_small_set(A[i0:i1], B, C[i0:i1], bias, has_bias)


# --8<-- [end:gemm_direct_parallel]


# A weight's gradient dY^T X is a product with a long K (the batch's rows, 1024 in the
# GPT of 3.5) and a small C (the weight's entries): split into bands of C, each thread
# would read all of the K rows of the operand it does not split. Split along K instead,
# each thread reads its own band of rows of both operands once, into a partial C of its
# own; the partials are then added in the order of the bands, so that the result is the
# same for every run on the same number of threads (on one thread there is one band).
SPLIT_K_MIN_MNK = 1 << 22  # below this, waking the other threads costs more than it saves


# --8<-- [start:gemm_split_k]
@any_layout
@njit(cache=True, parallel=True, fastmath=FASTMATH)
def gemm_split_k(A, B, C, n_threads):
    """C = A @ B for a C not yet written, K split into ``n_threads`` bands of rows: one
    partial product per thread (gemm_small_set on its band), then their sum."""
    M, N = C.shape
    K = A.shape[1]
    parts = np.empty((n_threads, M, N), C.dtype)
    no_bias = C[0, :0]
    for t in prange(n_threads):
        k0 = t * K // n_threads
        k1 = (t + 1) * K // n_threads
        gemm_small_set(A[:, k0:k1], B[k0:k1], parts[t], no_bias, False)
    for i in prange(M):
        for j in range(N):
            s = parts[0, i, j]
            for t in range(1, n_threads):
                s += parts[t, i, j]
            C[i, j] = s


# --8<-- [end:gemm_split_k]
