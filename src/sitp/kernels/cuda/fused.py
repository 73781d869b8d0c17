"""Fused layer norm and cross-entropy on the GPU, forward and backward (sections 4.3, 4.5).

On the CPU, ``F.layer_norm`` and ``F.cross_entropy`` run one fused numba kernel each way
(``sitp/kernels/cpu/fused/``). Composed from ops on the device, a layer norm is about ten
kernels (mean, subtract, square, mean, add, rsqrt, multiply, ...), each reading and
writing a full tensor in global memory, and each recording an autograd node. The kernels
here do a row in one launch, the way ``attention.fused_softmax_kernel`` does a row of
scores:

* **one thread block per row.** The block's NT threads stride over the row (thread t
  takes entries t, t + NT, t + 2 NT, ...), so any row length works, and adjacent threads
  read adjacent entries (coalesced). Row statistics (sum, max) go through a tree
  reduction in shared memory: NT partial values, halved log2(NT) times.
* **layer norm**, forward: the mean, then the squared deviations (two passes, as the CPU
  kernel: more accurate than E[x^2] - E[x]^2), then y = (x - mean) * rstd * w + b; it
  saves mean and rstd, one value per row. Backward, kernel 1 (a block per row): the two
  row means of the gradient formula and dx. Kernel 2 and 3: dw and db, sums over *rows*
  per column: blocks of 32 columns x 8 rows each sum one chunk of rows into a partial
  (chunk, column) array, and one thread per column adds the partials. No atomics: a
  column's sum would be 4096 atomic adds to one address for a 4096-row batch, serialised
  and in a different order every run; partial sums keep dw and db deterministic.
* **cross-entropy** over class indices, forward: the row max m, sum of exponentials s
  (plus the weighted sum of z - m for label smoothing), then the row's loss; it saves
  m and log s (two values per row) rather than the softmax (R x C): backward
  recomputes p = exp((z - m) - log s), which costs an exp per entry but no R x C write
  and read. (Not one logsumexp m + log s: beyond ~1e8 it rounds to m.)
  A one-block kernel then sums the rows' losses and weights for ``reduction='mean'`` or
  ``'sum'``; the weight total stays on the device for the backward pass.
  Backward: a block per row, dz = g * (softmax - smoothed, weighted one-hot).

Precision: float32 rows are computed in float32, and so are the per-row statistics
(each thread sums n / NT entries, then the tree adds NT partials: a blocked pairwise sum,
whose error grows with n / NT + log2 NT, not with n). The sums *across rows* -- the
loss total and weight total of a reduced loss, dw and db -- accumulate in float64: they
add up to millions of terms, and they are a small part of the work. float64 tensors are
computed in float64 throughout.

Nothing here reads data back to the host: kernel arguments are shapes, flags and Python
scalars (eps, ignore_index), the reduced loss is a one-entry device array, and the
backward pass of a reduced loss reads the upstream gradient and the weight total from
device arrays. An out-of-range target sets the backend's device error flag
(``sitp.kernels.cuda.ops.check_errors``), which raises at the next copy to the host.

This module holds the kernels and their launches, on device arrays; the autograd nodes
that call them are ``LayerNormGPU`` in ``sitp/nn/_functions/layer_norm.py`` and
``CrossEntropyGPU`` in ``sitp/nn/_functions/cross_entropy.py``.

Speed: these kernels have been run only in numba's CUDA simulator, which checks what
they compute, not how fast. Nothing here has been timed on a GPU; whether they beat the
composed ops, and by how much, is for a machine with one to say.
"""

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32, float64

from sitp.kernels.cuda import ops
from sitp.kernels.cuda.launch import ceil_div

NT = 128  # threads per block for the row kernels (a power of two: the tree halves it)
CW = 32  # dw/db partial sums: columns per block (one warp wide: coalesced reads)
CR = 8  # ... and rows per block (each thread sums every CR-th row of the chunk)
CHUNK = 64  # rows per chunk of the dw/db partial sums, at least
MAX_CHUNKS = 256  # at most this many chunks: the partials take MAX_CHUNKS x n float64

_NUMBA = {np.dtype(np.float32): float32, np.dtype(np.float64): float64}


# --8<-- [start:block_reduce]
@cuda.jit(device=True)
def _block_sum(red, v, t):
    """Sum of v over the block's threads (t = threadIdx.x), returned to every thread.

    red: a shared array with one slot per thread, NT a power of two. Each step halves
    the number of active threads; after log2(NT) steps red[0] holds the sum. The last
    barrier lets every thread read red[0] before red is reused.
    """
    red[t] = v
    cuda.syncthreads()
    stride = red.size // 2
    while stride > 0:
        if t < stride:
            red[t] += red[t + stride]
        cuda.syncthreads()
        stride //= 2
    total = red[0]
    cuda.syncthreads()
    return total


@cuda.jit(device=True)
def _block_sum2(ra, rb, a, b, t):
    """Two block sums in one tree (two shared arrays): half the barriers of two calls."""
    ra[t] = a
    rb[t] = b
    cuda.syncthreads()
    stride = ra.size // 2
    while stride > 0:
        if t < stride:
            ra[t] += ra[t + stride]
            rb[t] += rb[t + stride]
        cuda.syncthreads()
        stride //= 2
    sa = ra[0]
    sb = rb[0]
    cuda.syncthreads()
    return sa, sb


@cuda.jit(device=True)
def _block_max(red, v, t):
    """Maximum of v over the block, NaN winning (as ``max`` on the CPU kernels' rows)."""
    red[t] = v
    cuda.syncthreads()
    stride = red.size // 2
    while stride > 0:
        if t < stride:
            u = red[t + stride]
            if u > red[t] or u != u:
                red[t] = u
        cuda.syncthreads()
        stride //= 2
    m = red[0]
    cuda.syncthreads()
    return m


# --8<-- [end:block_reduce]


# --8<-- [start:layer_norm_forward]
@lru_cache(maxsize=None)
def layer_norm_forward_kernel(nt, dtype):
    """The layer norm forward kernel for blocks of nt threads and rows of ``dtype``."""
    assert nt & (nt - 1) == 0, "the tree reduction needs a power-of-two block"
    T = _NUMBA[np.dtype(dtype)]

    @cuda.jit
    def layer_norm_forward(x, n, inv_n, w, b, has_w, has_b, eps, y, mean, rstd):
        """Grid: one block per row r of n entries (x, y contiguous rows). Block: nt
        threads, thread t handles entries t, t + nt, ... Shared memory: nt values.

        Pass 1: the mean. Pass 2: the biased variance from the deviations, so
        rstd = 1 / sqrt(var + eps). Pass 3: y = (x - mean) * rstd * w + b. The row is
        read three times; passes 2 and 3 usually find it in L1/L2. Thread 0 saves
        mean[r] and rstd[r] for the backward pass.
        """
        red = cuda.shared.array(nt, T)
        t = cuda.threadIdx.x
        r = cuda.blockIdx.x
        o = r * n
        s = T(0.0)
        for j in range(t, n, nt):
            s += x[o + j]
        mu = _block_sum(red, s, t) * inv_n
        ss = T(0.0)
        for j in range(t, n, nt):
            d = x[o + j] - mu
            ss += d * d
        var = _block_sum(red, ss, t) * inv_n
        rs = T(1.0) / math.sqrt(var + eps)
        if t == 0:
            mean[r] = mu
            rstd[r] = rs
        for j in range(t, n, nt):
            v = (x[o + j] - mu) * rs
            if has_w:
                v *= w[j]
            if has_b:
                v += b[j]
            y[o + j] = v

    return layer_norm_forward


# --8<-- [end:layer_norm_forward]


# --8<-- [start:layer_norm_backward]
@lru_cache(maxsize=None)
def layer_norm_backward_kernel(nt, dtype):
    """The layer norm dx kernel for blocks of nt threads and rows of ``dtype``."""
    assert nt & (nt - 1) == 0, "the tree reduction needs a power-of-two block"
    T = _NUMBA[np.dtype(dtype)]

    @cuda.jit
    def layer_norm_backward(x, g, n, inv_n, w, has_w, mean, rstd, dx):
        """dx of one row per block. With xhat = (x - mean) * rstd and gh = g * w:

            dx = rstd * (gh - mean_j(gh) - xhat * mean_j(gh * xhat))

        Pass 1 sums gh and gh * xhat (one tree, two shared arrays); pass 2 writes dx.
        xhat is recomputed from the saved mean and rstd, not stored.
        """
        ra = cuda.shared.array(nt, T)
        rc = cuda.shared.array(nt, T)
        t = cuda.threadIdx.x
        r = cuda.blockIdx.x
        o = r * n
        mu = mean[r]
        rs = rstd[r]
        a = T(0.0)
        c = T(0.0)
        for j in range(t, n, nt):
            gh = g[o + j]
            if has_w:
                gh *= w[j]
            a += gh
            c += gh * ((x[o + j] - mu) * rs)
        a, c = _block_sum2(ra, rc, a, c, t)
        a *= inv_n
        c *= inv_n
        for j in range(t, n, nt):
            gh = g[o + j]
            if has_w:
                gh *= w[j]
            dx[o + j] = rs * (gh - a - (x[o + j] - mu) * rs * c)

    return layer_norm_backward


@cuda.jit
def layer_norm_dwdb_partial(x, g, n_rows, n, chunk, mean, rstd, pdw, pdb):
    """Partial sums of dw = sum_r g * xhat and db = sum_r g over one chunk of rows.

    Grid (ceil(n / CW), number of chunks); block (CW, CR) threads. Thread (tx, ty) of
    block (bx, k) owns column j = bx * CW + tx and sums rows k * chunk + ty, + CR, ...
    (a warp reads CW adjacent columns of one row: coalesced). The CR partials of a
    column are then added in shared memory, and pdw[k, j], pdb[k, j] written. float64
    throughout: these are sums over rows, R x n terms in all.
    """
    sw = cuda.shared.array((CR, CW), float64)
    sb = cuda.shared.array((CR, CW), float64)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    j = cuda.blockIdx.x * CW + tx
    k = cuda.blockIdx.y
    r0 = k * chunk
    r1 = min(n_rows, r0 + chunk)
    aw = 0.0
    ab = 0.0
    if j < n:
        for r in range(r0 + ty, r1, CR):
            gv = float64(g[r * n + j])
            aw += gv * ((x[r * n + j] - mean[r]) * rstd[r])
            ab += gv
    sw[ty, tx] = aw
    sb[ty, tx] = ab
    cuda.syncthreads()
    stride = CR // 2
    while stride > 0:
        if ty < stride:
            sw[ty, tx] += sw[ty + stride, tx]
            sb[ty, tx] += sb[ty + stride, tx]
        cuda.syncthreads()
        stride //= 2
    if ty == 0 and j < n:
        pdw[k, j] = sw[0, tx]
        pdb[k, j] = sb[0, tx]


@cuda.jit
def layer_norm_dwdb_finish(pdw, pdb, dw, db, has_b):
    """dw[j] = sum_k pdw[k, j] (and db): one thread per column, in float64, then cast."""
    j = cuda.grid(1)
    if j < dw.size:
        aw = 0.0
        ab = 0.0
        for k in range(pdw.shape[0]):
            aw += pdw[k, j]
            ab += pdb[k, j]
        dw[j] = aw
        if has_b:
            db[j] = ab


# --8<-- [end:layer_norm_backward]


# --8<-- [start:cross_entropy_forward]
@lru_cache(maxsize=None)
def cross_entropy_forward_kernel(nt, dtype):
    """The cross-entropy forward kernel for blocks of nt threads and logits of ``dtype``."""
    assert nt & (nt - 1) == 0, "the tree reduction needs a power-of-two block"
    T = _NUMBA[np.dtype(dtype)]

    @cuda.jit
    def cross_entropy_forward(
        z, C, target, w, has_w, w_sum, ignore_index, keep, eps_c, loss, wrow, lse, err
    ):
        """Loss of row r (a block) of C logits against class target[r]. With p = softmax(z),
        w the class weights (ones without), keep = 1 - eps and eps_c = eps / C:

            loss = keep * w[t] * (ls - (z[t] - m))  +  eps_c * (sum_c w[c] * ls - sum_c w[c] (z[c] - m))

        where m is the row max and ls = log sum_c exp(z[c] - m) (the logsumexp is m + ls,
        but formed as a sum it rounds to m for |m| >~ 1e8). Pass 1: m; pass 2: the sum
        of exponentials and, when eps > 0, the weighted sum of z - m. Thread 0 writes
        loss[r], the row's weight wrow[r] = w[t] (the mean divides by their sum), and
        lse[r] = m, lse[R + r] = ls (the backward pass rebuilds p from them). A row whose target
        is ignore_index gets loss 0 and weight 0; a target outside [0, C) sets err[0]
        (the backend raises at the next sync) and gets NaN. w_sum[0] is sum_c w[c],
        computed once by ``_sum_kernel`` (read only with weights and eps > 0).
        """
        rm = cuda.shared.array(nt, T)
        rs = cuda.shared.array(nt, T)
        t = cuda.threadIdx.x
        r = cuda.blockIdx.x
        R = cuda.gridDim.x
        o = r * C
        tg = target[r]
        if tg == ignore_index:  # the same for every thread of the block: no divergent barrier
            if t == 0:
                loss[r] = 0.0
                wrow[r] = 0.0
                lse[r] = 0.0
                lse[R + r] = 0.0
            return
        if tg < 0 or tg >= C:
            if t == 0:
                err[0] = 1
                loss[r] = math.nan
                wrow[r] = math.nan
                lse[r] = math.nan
                lse[R + r] = math.nan
            return
        m = T(-math.inf)
        for c in range(t, C, nt):
            v = z[o + c]
            if v > m or v != v:
                m = v
        m = _block_max(rm, m, t)
        s = T(0.0)
        wz = T(0.0)
        for c in range(t, C, nt):
            d = z[o + c] - m
            s += math.exp(d)
            if eps_c != 0:
                wz += w[c] * d if has_w else d
        if eps_c != 0:
            s, wz = _block_sum2(rm, rs, s, wz, t)
        else:
            s = _block_sum(rs, s, t)
        if t == 0:
            ls = math.log(s)
            wt = w[tg] if has_w else T(1.0)
            row = keep * wt * (ls - (z[o + tg] - m))
            if eps_c != 0:
                w_all = T(w_sum[0]) if has_w else T(C)
                row += eps_c * (w_all * ls - wz)
            loss[r] = row
            wrow[r] = wt
            lse[r] = m
            lse[R + r] = ls

    return cross_entropy_forward


# --8<-- [end:cross_entropy_forward]


@lru_cache(maxsize=None)
def _sum_kernel(nt):
    """One block: out[0] = sum(a[:n]), in float64 (the class weights' total)."""

    @cuda.jit
    def vector_sum(a, n, out):
        red = cuda.shared.array(nt, float64)
        t = cuda.threadIdx.x
        s = 0.0
        for i in range(t, n, nt):
            s += a[i]
        s = _block_sum(red, s, t)
        if t == 0:
            out[0] = s

    return vector_sum


# --8<-- [start:cross_entropy_reduce]
@lru_cache(maxsize=None)
def cross_entropy_reduce_kernel(nt):
    """One block: the reduced loss and the weight total, from the per-row arrays."""

    @cuda.jit
    def cross_entropy_reduce(loss, wrow, R, mean, out, denom):
        """out[0] = sum(loss), or sum(loss) / sum(wrow) for the mean (NaN when every row
        is ignored, as on the CPU); denom[0] = sum(wrow), kept on the device for the
        backward pass. One block of nt threads strides over the R rows; float64 sums.
        """
        ra = cuda.shared.array(nt, float64)
        rb = cuda.shared.array(nt, float64)
        t = cuda.threadIdx.x
        a = 0.0
        b = 0.0
        for i in range(t, R, nt):
            a += loss[i]
            b += wrow[i]
        a, b = _block_sum2(ra, rb, a, b, t)
        if t == 0:
            denom[0] = b
            if not mean:
                out[0] = a
            elif b != 0.0:
                out[0] = a / b
            else:
                out[0] = math.nan

    return cross_entropy_reduce


# --8<-- [end:cross_entropy_reduce]


# --8<-- [start:cross_entropy_backward]
@lru_cache(maxsize=None)
def cross_entropy_backward_kernel(nt, dtype):
    """The cross-entropy backward kernel for blocks of nt threads and logits of ``dtype``."""
    T = _NUMBA[np.dtype(dtype)]

    @cuda.jit
    def cross_entropy_backward(
        z, C, target, w, has_w, w_sum, ignore_index, keep, eps_c, lse, g, g_step, denom, mean, dz
    ):
        """dz of row r (a block): softmax minus the smoothed, weighted target distribution.

        With gr = g[r * g_step] (g_step = 0 for a reduced loss; divided by the weight
        total denom[0] for the mean) and p = exp((z - m) - ls) recomputed from the row's
        m = lse[r] and ls = lse[R + r]:

            dz[c] = gr * (p[c] * (keep w[t] + eps_c sum w) - eps_c w[c] - keep w[t] [c == t])

        No reductions: the row's statistics were saved by the forward pass, so every
        thread just writes its entries. Ignored (and out-of-range) rows get zeros.
        """
        t = cuda.threadIdx.x
        r = cuda.blockIdx.x
        o = r * C
        tg = target[r]
        if tg == ignore_index or tg < 0 or tg >= C:
            for c in range(t, C, nt):
                dz[o + c] = 0.0
            return
        gr = g[r * g_step]
        if mean:
            gr = T(gr / denom[0])
        wt = w[tg] if has_w else T(1.0)
        w_all = T(C)
        if has_w and eps_c != 0:
            w_all = T(w_sum[0])
        a = gr * (keep * wt + eps_c * w_all)
        b = gr * eps_c
        hit = gr * keep * wt
        m = lse[r]
        ls = lse[cuda.gridDim.x + r]
        for c in range(t, C, nt):
            wc = w[c] if has_w else T(1.0)
            v = math.exp((z[o + c] - m) - ls) * a - b * wc
            if c == tg:
                v -= hit
            dz[o + c] = v

    return cross_entropy_backward


# --8<-- [end:cross_entropy_backward]


# ------------------------------------------------------------------ launches
def block_size(n: int, nt=None) -> int:
    """Threads per block for rows of n entries: nt if given, else the smallest power of two
    that covers the row, from one warp (32) up to NT. A short row (a layer norm of 64
    features, 27 classes) then leaves no threads idle, and a long one is strided over.
    """
    if nt:
        return nt
    return min(NT, max(32, 1 << (max(n, 1) - 1).bit_length()))


def supports(dtype) -> bool:
    """Whether the kernels here take rows of numpy ``dtype`` (float32 or float64)."""
    return np.dtype(dtype) in _NUMBA


def layer_norm_forward(xs, ws, bs, n, rows, eps, nt, y):
    """Launch the layer norm forward over ``rows`` contiguous rows of n entries of the flat
    device array ``xs`` into ``y``; ``ws``, ``bs``: flat weight and bias, or None. Returns
    the device arrays (mean, rstd), one value per row in x's dtype, for the backward."""
    dt = xs.dtype
    T = dt.type
    mean = cuda.device_array(rows, dtype=dt)
    rstd = cuda.device_array(rows, dtype=dt)
    layer_norm_forward_kernel(nt, dt)[rows, nt](
        xs,
        n,
        T(1.0 / n),
        xs if ws is None else ws,
        xs if bs is None else bs,  # xs: not read
        ws is not None,
        bs is not None,
        T(eps),
        y,
        mean,
        rstd,
    )
    return mean, rstd


def layer_norm_backward(xs, gs, ws, mean, rstd, n, rows, nt, dx):
    """Launch the layer norm dx kernel (a block per row) from upstream ``gs`` into ``dx``."""
    dt = xs.dtype
    layer_norm_backward_kernel(nt, dt)[rows, nt](
        xs, gs, n, dt.type(1.0 / n), xs if ws is None else ws, ws is not None, mean, rstd, dx
    )


def layer_norm_dwdb(xs, gs, mean, rstd, n, rows, nt, dw, db):
    """dw = sum over rows of g * xhat into ``dw`` and, unless ``db`` is None, db = sum over
    rows of g: partial sums per chunk of rows, then one thread per column adds them."""
    chunk = max(CHUNK, ceil_div(rows, MAX_CHUNKS))
    n_chunks = ceil_div(rows, chunk)
    pdw = cuda.device_array((n_chunks, n), dtype=np.float64)
    pdb = cuda.device_array((n_chunks, n), dtype=np.float64)
    layer_norm_dwdb_partial[(ceil_div(n, CW), n_chunks), (CW, CR)](
        xs, gs, rows, n, chunk, mean, rstd, pdw, pdb
    )
    layer_norm_dwdb_finish[ceil_div(n, nt), nt](
        pdw, pdb, dw, dw if db is None else db, db is not None
    )


def cross_entropy_forward(zs, ts, ws, R, C, ignore_index, eps, nt, loss):
    """Launch the cross-entropy forward over R rows of C logits (flat device array ``zs``)
    against int64 classes ``ts``, with flat class weights ``ws`` or None, label smoothing
    eps, into the per-row ``loss``. An out-of-range target sets the backend's error flag.
    Returns (w_sum, wrow, lse, denom): the weights' total, each row's weight, each row's
    (m, log s), and a one-entry array for the weight total of a reduced loss, all on the
    device, for :func:`cross_entropy_reduce` and :func:`cross_entropy_backward`."""
    dt = zs.dtype
    T = dt.type
    has_w = ws is not None
    w = ws if has_w else zs  # not read without weights
    w_sum = cuda.device_array(1, dtype=np.float64)
    if has_w and eps:
        _sum_kernel(nt)[1, nt](w, C, w_sum)
    wrow = cuda.device_array(R, dtype=dt)
    lse = cuda.device_array(2 * R, dtype=dt)  # row max m, then log sum exp(z - m)
    cross_entropy_forward_kernel(nt, dt)[R, nt](
        zs,
        C,
        ts,
        w,
        has_w,
        w_sum,
        ignore_index,
        T(1.0 - eps),
        T(eps / C),
        loss,
        wrow,
        lse,
        ops._err(),
    )
    denom = cuda.device_array(1, dtype=np.float64)
    return w_sum, wrow, lse, denom


def cross_entropy_reduce(loss, wrow, R, mean, nt, out, denom):
    """out[0] = the sum (or, with ``mean``, the weighted mean) of the rows' losses; the
    weight total goes to ``denom`` (one block of nt threads)."""
    cross_entropy_reduce_kernel(nt)[1, nt](loss, wrow, R, mean, out, denom)


def cross_entropy_backward(
    zs, ts, ws, w_sum, lse, gs, g_step, denom, mean, R, C, ignore_index, eps, nt, dz
):
    """Launch the cross-entropy backward (a block per row) into ``dz``: the upstream
    gradient is gs[r * g_step] (g_step 0 for a reduced loss, divided by denom[0] for the
    mean); the other arguments as :func:`cross_entropy_forward` took and returned them."""
    dt = zs.dtype
    T = dt.type
    has_w = ws is not None
    cross_entropy_backward_kernel(nt, dt)[R, nt](
        zs,
        C,
        ts,
        ws if has_w else zs,
        has_w,
        w_sum,
        ignore_index,
        T(1.0 - eps),
        T(eps / C),
        lse,
        gs,
        g_step,
        denom,
        mean,
        dz,
    )


# ------------------------------------------------------------------------------ Adam(W)
@cuda.jit
def adam_k(p, g, m, v, lr, beta1, beta2, eps, wd, decoupled, bc1, bc2_sqrt):
    """One Adam(W) step, a thread per entry: the arithmetic of the CPU's one-pass kernel
    (``kernels/cpu/fused/adam.py``), in its order, with the same float64 scalars."""
    i = cuda.grid(1)
    if i < p.size:
        gi = g[i]
        if wd != 0.0:
            if decoupled:
                p[i] = p[i] * (1.0 - lr * wd)
            else:
                gi = gi + wd * p[i]
        m[i] = m[i] + (gi - m[i]) * (1.0 - beta1)
        v[i] = v[i] * beta2 + gi * gi * (1.0 - beta2)
        denom = math.sqrt(v[i]) / bc2_sqrt + eps
        p[i] = p[i] - (lr / bc1) * (m[i] / denom)


def adam_update(p, g, m, v, lr, beta1, beta2, eps, wd, decoupled, bc1, bc2_sqrt):
    """One Adam(W) step on flat device arrays, in one launch, where the composed step of
    ``optim/adam.py`` launches about twenty kernels per parameter (section 4.3 counts a
    GPT step's launches with ``scripts/bench_gpu_train.py --launches``)."""
    adam_k[ops._grid(p.size)](
        p, g, m, v, float(lr), beta1, beta2, eps, float(wd), bool(decoupled), bc1, bc2_sqrt
    )
