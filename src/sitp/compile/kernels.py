"""Matrix products with an epilogue: the kernels of the lowered layers (6.2).

A layer's GEMM writes its result one block of rows at a time (``gemm_small_set``'s
register tiles, ``SMALL_MR`` rows by ``NR`` columns). When the next op works on those
rows, it can run on that block while the block is still in L1, instead of in a pass of
its own that reads the whole result back from memory. The generated GEMMs of
``rules.py`` (``codegen.generate_gemm``) call this file's two helpers, :func:`_pack_wt`
and :func:`_row_block`, around a pointwise epilogue; the one hand-written epilogue left
is :func:`linear_residual_norm`, s = r + x W^T + b and the layer norm of s, whose
epilogue reduces each row (a pointwise rule cannot express it). And one that is not a
product: :func:`cross_entropy_rows`, the loss of a row of logits with its exps
vectorised.

The tiles are the CPU backend's (``sitp.kernels.cpu.blas.small``): the same blocks,
the same sums in the same order, so the products are those of eager sitp's
``matmul``.

When the rows do not divide into blocks, the last block ends flush with the matrix's
edge, as in ``_gemm_set``, and overlaps the block before: its tiles store (not add) the
product, so the rows it shares are written afresh.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from sitp.kernels.cpu.blas.packed import tile_nr
from sitp.kernels.cpu.blas.small import (
    SMALL_MR,
    _column_tiles,
    _tile,
    aligned_empty,
    gemm_small_set,
)
from sitp.kernels.cpu.fused.gelu import _is_float32
from sitp.kernels.cpu.fused.layer_norm import layer_norm_kernel
from sitp.kernels.cpu.vecmath import FASTMATH, exp_f32


@njit(cache=True, inline="always")
def _pack_wt(w, j_tiles, full, NR):
    """w^T (w is (N, K), row-major) in strips of NR columns, each (K, NR) with its rows
    contiguous, as ``_gemm_set`` packs a transposed B."""
    N, K = w.shape
    bp = aligned_empty(j_tiles.size * K, NR, w.dtype)
    for t in range(j_tiles.size):
        j0, width = j_tiles[t], NR if full[t] else NR // 2
        for p in range(K):
            dst = bp[t * K + p]
            for jj in range(width):
                dst[jj] = w[j0 + jj, p]
    return bp


@njit(cache=True, inline="always")
def _row_block(x, i0, bp, j_tiles, full, NR, h, mode, bias):
    """Rows i0 .. i0 + SMALL_MR of h = x w^T (+ bias), from the packed strips bp."""
    K = x.shape[1]
    N = h.shape[1]
    for t in range(j_tiles.size):
        j0 = j_tiles[t]
        _tile(full[t], x, i0 * K, K, 1, bp, t * K * NR, NR, K, h, i0 * N + j0, N, mode, bias, j0)


# --8<-- [start:cross_entropy_rows]
@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def cross_entropy_rows(z, R, C, target, ignore_index, loss, p, stats):
    """The backend's ``cross_entropy_kernel`` without class weights or label smoothing,
    with its exps vectorised (``exp_f32`` for float32): per row of logits, the max m,
    p = exp(z - m) and their sum s (in float64), p / s, and the loss log s - (z[t] - m).
    ``stats`` gets (sum of the losses, rows counted). Returns -1, or the first row whose
    target is out of [0, C)."""
    total, counted = 0.0, 0.0
    for r in range(R):
        t = target[r]
        if t == ignore_index:
            loss[r] = 0.0
            continue
        if t < 0 or t >= C:
            return r
        zr, pr = z[r * C : (r + 1) * C], p[r * C : (r + 1) * C]
        m = zr[0]
        for c in range(1, C):
            v = zr[c]
            if v > m or v != v:
                m = v
        if _is_float32(z):
            for c in range(C):
                pr[c] = exp_f32(np.float32(zr[c] - m))
        else:
            for c in range(C):
                pr[c] = math.exp(zr[c] - m)
        s = 0.0
        for c in range(C):
            s += pr[c]
        inv = 1.0 / s
        for c in range(C):
            pr[c] = pr[c] * inv
        row = math.log(s) - (np.float64(zr[t]) - np.float64(m))
        loss[r] = row
        total += row
        counted += 1.0
    stats[0] = total
    stats[1] = counted
    return -1


# --8<-- [end:cross_entropy_rows]


# --8<-- [start:linear_residual_norm]
@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def linear_residual_norm(x, w, bias, has_bias, r, s, lw, lb, has_lw, has_lb, eps, y, mean, rstd):
    """s = r + (x w^T + bias) and y = layer_norm(s) over its rows of N (gain lw, shift lb),
    with each row's mean and rstd, for C-contiguous x (M, K), w (N, K), r, s, y (M, N):
    a block's residual sum and its norm while the block is in L1 (the backend's
    ``layer_norm_kernel`` on the block's rows)."""
    M, K = x.shape
    N = w.shape[0]
    NR = tile_nr(x.dtype)
    sf, rf, yf = s.reshape(-1), r.reshape(-1), y.reshape(-1)
    if M < SMALL_MR or N < NR // 2:
        gemm_small_set(x, w.T, s, bias, has_bias)
        for i in range(M * N):
            sf[i] = sf[i] + rf[i]
        layer_norm_kernel(sf, M, N, lw, lb, has_lw, has_lb, eps, yf, mean, rstd)
        return
    mode = 2 if has_bias else 1
    j_tiles, full = _column_tiles(N, NR)
    bp = _pack_wt(w, j_tiles, full, NR)
    for i in range(0, M, SMALL_MR):
        i0 = min(i, M - SMALL_MR)
        _row_block(x, i0, bp, j_tiles, full, NR, s, mode, bias)
        lo, hi = i0 * N, (i0 + SMALL_MR) * N
        sb, rb = sf[lo:hi], rf[lo:hi]
        for j in range(sb.size):  # (rf + the product: eager's add, r + out)
            sb[j] = rb[j] + sb[j]
        layer_norm_kernel(
            sb,
            SMALL_MR,
            N,
            lw,
            lb,
            has_lw,
            has_lb,
            eps,
            yf[lo:hi],
            mean[i0 : i0 + SMALL_MR],
            rstd[i0 : i0 + SMALL_MR],
        )


# --8<-- [end:linear_residual_norm]
