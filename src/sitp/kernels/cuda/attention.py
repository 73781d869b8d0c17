"""Attention on the GPU, three ways, for (B, H, T, D) float32 tensors (section 4.6).

    O = softmax(scale * Q K^T + mask) V,   scale = 1 / sqrt(D)

1. ``naive``: three kernels and two T x T matrices in global memory: scores S, then
   probabilities P (row softmax), then O = P V.
2. ``fused``: one kernel computes a row of scores and its softmax together (one block
   per row, reductions in shared memory), so S never exists apart from P; then O = P V.
3. ``flash``: one kernel streams tiles of K and V through shared memory and keeps, per
   query row, a running maximum m, a running sum l and an unnormalised output (the
   online softmax). Nothing T x T is stored; the only extra memory is the logsumexp
   L = m + log l of each row (O(T)), which the backward pass uses to recompute P.

Names: Q_BHTD is (B, H, T, D); i indexes queries, j keys, d the head width.
Causal masking (``causal=True``) lets query i see keys j <= i.

Like the GEMM ladder, the flash kernels are factories: D (the head width) and the tile
sizes BR (query rows per block) and BC (key rows per tile) size local and shared
arrays, so they are fixed when the kernel is compiled.
"""

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32

from sitp.kernels.cuda.launch import ceil_div, to_device

NEG_INF = -math.inf


# --8<-- [start:naive]
@lru_cache(maxsize=None)
def scores_kernel(BS=16):
    @cuda.jit
    def attn_scores(Q, K, S, scale, causal):
        """Naive, kernel 1 of 3. Grid (T / BS, T / BS, B * H), block BS x BS threads;
        thread (x, y) computes S[b, h, i, j] = scale * Q[b, h, i] . K[b, h, j] for
        j = blockIdx.x * BS + x, i = blockIdx.y * BS + y; -inf where the mask hides j.
        """
        j = cuda.blockIdx.x * BS + cuda.threadIdx.x
        i = cuda.blockIdx.y * BS + cuda.threadIdx.y
        H = Q.shape[1]
        b = cuda.blockIdx.z // H
        h = cuda.blockIdx.z % H
        T = Q.shape[2]
        if i < T and j < T:
            if causal and j > i:
                S[b, h, i, j] = NEG_INF
            else:
                s = float32(0.0)
                for d in range(Q.shape[3]):
                    s += Q[b, h, i, d] * K[b, h, j, d]
                S[b, h, i, j] = s * scale

    return attn_scores


@cuda.jit
def softmax_rows(S, P):
    """Naive, kernel 2 of 3. One thread per row (b, h, i) of S, 1-D grid over B * H * T
    rows: three passes over the row (max, sum of exponentials, normalise) into P.
    """
    row = cuda.grid(1)
    B, H, T, _ = S.shape
    if row < B * H * T:
        b = row // (H * T)
        h = (row // T) % H
        i = row % T
        m = float32(NEG_INF)
        for j in range(T):
            m = max(m, S[b, h, i, j])
        total = float32(0.0)
        for j in range(T):
            total += math.exp(S[b, h, i, j] - m)
        for j in range(T):
            P[b, h, i, j] = math.exp(S[b, h, i, j] - m) / total


@lru_cache(maxsize=None)
def weighted_sum_kernel(BS=16):
    @cuda.jit
    def attn_weighted_sum(P, V, O):
        """Naive, kernel 3 of 3 (also used by ``fused``). Grid (D / BS, T / BS, B * H),
        block BS x BS; thread (x, y) computes O[b, h, i, d] = sum_j P[b, h, i, j] V[b, h, j, d]
        with d = blockIdx.x * BS + x, i = blockIdx.y * BS + y.
        """
        d = cuda.blockIdx.x * BS + cuda.threadIdx.x
        i = cuda.blockIdx.y * BS + cuda.threadIdx.y
        H = P.shape[1]
        b = cuda.blockIdx.z // H
        h = cuda.blockIdx.z % H
        T = P.shape[2]
        if i < T and d < V.shape[3]:
            acc = float32(0.0)
            for j in range(T):
                acc += P[b, h, i, j] * V[b, h, j, d]
            O[b, h, i, d] = acc

    return attn_weighted_sum


# --8<-- [end:naive]


# --8<-- [start:fused]
@lru_cache(maxsize=None)
def fused_softmax_kernel(NT=128):
    assert NT & (NT - 1) == 0, "the tree reduction needs a power-of-two block"

    @cuda.jit
    def attn_fused_softmax(Q, K, P, scale, causal):
        """Scores, mask and softmax of one row in one kernel. Grid (T, B * H): block
        (i, bh) owns query row i. Block: NT threads; thread t handles keys j = t, t + NT, ...
        Shared memory: NT floats for the two reductions (row max, then row sum).

        The row of scores is written to P once, then rescaled in place by the same
        threads, so no separate S is stored and no second kernel re-reads it.
        """
        red = cuda.shared.array(NT, float32)
        t = cuda.threadIdx.x
        i = cuda.blockIdx.x
        H = Q.shape[1]
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        T = Q.shape[2]
        m = float32(NEG_INF)
        for j in range(t, T, NT):  # scores, and this thread's max
            s = float32(NEG_INF)
            if not (causal and j > i):
                s = float32(0.0)
                for d in range(Q.shape[3]):
                    s += Q[b, h, i, d] * K[b, h, j, d]
                s *= scale
            P[b, h, i, j] = s
            m = max(m, s)
        red[t] = m
        cuda.syncthreads()
        stride = NT // 2
        while stride > 0:  # tree reduction: the row max ends in red[0]
            if t < stride:
                red[t] = max(red[t], red[t + stride])
            cuda.syncthreads()
            stride //= 2
        m = red[0]
        cuda.syncthreads()  # all have read red[0] before it is reused
        total = float32(0.0)
        for j in range(t, T, NT):
            e = math.exp(P[b, h, i, j] - m)
            P[b, h, i, j] = e
            total += e
        red[t] = total
        cuda.syncthreads()
        stride = NT // 2
        while stride > 0:  # the row sum ends in red[0]
            if t < stride:
                red[t] += red[t + stride]
            cuda.syncthreads()
            stride //= 2
        total = red[0]
        for j in range(t, T, NT):
            P[b, h, i, j] /= total

    return attn_fused_softmax


# --8<-- [end:fused]


# --8<-- [start:flash_forward]
@lru_cache(maxsize=None)
def flash_forward_kernel(D, BR=64, BC=32):
    @cuda.jit
    def flash_forward(Q, K, V, O, L, scale, causal):
        """Flash attention forward. Grid (T / BR, B * H); block: BR threads, thread t owns
        query row i = blockIdx.x * BR + t. Shared memory: a BC x D tile of K and one of V,
        loaded by the whole block. Registers/local: q (D), the output accumulator (D),
        the tile's BC scores, and the running max m and sum l of the online softmax.

        After the last tile, O[i] = acc / l and L[i] = m + log(l) (the logsumexp of row i).
        With causal masking, tiles entirely right of the block's last row are skipped.
        """
        Ks = cuda.shared.array((BC, D), float32)
        Vs = cuda.shared.array((BC, D), float32)
        q = cuda.local.array(D, float32)
        acc = cuda.local.array(D, float32)
        s_tile = cuda.local.array(BC, float32)
        t = cuda.threadIdx.x
        i = cuda.blockIdx.x * BR + t
        H = Q.shape[1]
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        T = Q.shape[2]
        if i < T:
            for d in range(D):
                q[d] = Q[b, h, i, d] * scale  # fold the scale into q once
                acc[d] = 0.0
        m = float32(NEG_INF)
        l = float32(0.0)
        kv_end = T
        if causal:  # keys beyond the block's last query row are masked for all its rows
            kv_end = min(T, (cuda.blockIdx.x + 1) * BR)
        for j0 in range(0, kv_end, BC):
            for idx in range(t, BC * D, BR):  # the block loads the K and V tiles together
                jj = idx // D
                d = idx % D
                inside = j0 + jj < T
                Ks[jj, d] = K[b, h, j0 + jj, d] if inside else float32(0.0)
                Vs[jj, d] = V[b, h, j0 + jj, d] if inside else float32(0.0)
            cuda.syncthreads()
            if i < T:
                m_tile = float32(NEG_INF)
                for jj in range(BC):  # scores of this tile
                    j = j0 + jj
                    s = float32(NEG_INF)
                    if j < T and not (causal and j > i):
                        s = float32(0.0)
                        for d in range(D):
                            s += q[d] * Ks[jj, d]
                    s_tile[jj] = s
                    m_tile = max(m_tile, s)
                m_new = max(m, m_tile)
                if m_new != NEG_INF:  # some key of this tile is visible
                    alpha = math.exp(m - m_new)  # rescale what was summed so far
                    l *= alpha
                    for d in range(D):
                        acc[d] *= alpha
                    for jj in range(BC):
                        p = math.exp(s_tile[jj] - m_new)  # exp(-inf) = 0 for masked keys
                        l += p
                        for d in range(D):
                            acc[d] += p * Vs[jj, d]
                    m = m_new
            cuda.syncthreads()  # the tiles are overwritten next
        if i < T:
            for d in range(D):
                O[b, h, i, d] = acc[d] / l
            L[b, h, i] = m + math.log(l)

    return flash_forward


# --8<-- [end:flash_forward]


# --8<-- [start:flash_backward]
# --8<-- [start:bwd_row_dot]
@cuda.jit
def row_dot(dO, O, Dd):
    """Backward, step 1. One thread per row (b, h, i): Dd[b, h, i] = dO[b, h, i] . O[b, h, i],
    which equals sum_j P_ij dP_ij, the term every row of the softmax backward needs.
    """
    row = cuda.grid(1)
    B, H, T, D = O.shape
    if row < B * H * T:
        b = row // (H * T)
        h = (row // T) % H
        i = row % T
        s = float32(0.0)
        for d in range(D):
            s += dO[b, h, i, d] * O[b, h, i, d]
        Dd[b, h, i] = s


# --8<-- [end:bwd_row_dot]


@lru_cache(maxsize=None)
def flash_backward_dkdv_kernel(D, BR=32, BC=32):
    @cuda.jit
    def flash_backward_dkdv(Q, K, V, dO, L, Dd, dK, dV, scale, causal):
        """Backward, step 2: dK and dV. Grid (T / BC, B * H); block: BC threads, thread t
        owns key row j = blockIdx.x * BC + t. Shared memory: BR x D tiles of Q and dO and
        BR values of L and Dd, for query rows i0 .. i0 + BR. For every visible (i, j):

            p = exp(scale q_i . k_j - L_i)          (P recomputed, never stored)
            dV_j += p dO_i,   dp = dO_i . v_j,   dK_j += scale * p (dp - Dd_i) q_i
        """
        # --8<-- [start:bwd_dkdv_memory]
        Qs = cuda.shared.array((BR, D), float32)
        dOs = cuda.shared.array((BR, D), float32)
        Ls = cuda.shared.array(BR, float32)
        Ds = cuda.shared.array(BR, float32)
        k = cuda.local.array(D, float32)
        v = cuda.local.array(D, float32)
        dk = cuda.local.array(D, float32)
        dv = cuda.local.array(D, float32)
        # --8<-- [end:bwd_dkdv_memory]
        t = cuda.threadIdx.x
        j = cuda.blockIdx.x * BC + t
        H = Q.shape[1]
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        T = Q.shape[2]
        if j < T:
            for d in range(D):
                k[d] = K[b, h, j, d]
                v[d] = V[b, h, j, d]
                dk[d] = 0.0
                dv[d] = 0.0
        # --8<-- [start:bwd_dkdv_causal]
        i_start = 0
        if causal:  # queries before the block's first key see none of its keys
            i_start = (cuda.blockIdx.x * BC // BR) * BR
        # --8<-- [end:bwd_dkdv_causal]
        for i0 in range(i_start, T, BR):
            # --8<-- [start:bwd_dkdv_tile]
            for idx in range(t, BR * D, BC):
                ii = idx // D
                d = idx % D
                inside = i0 + ii < T
                Qs[ii, d] = Q[b, h, i0 + ii, d] if inside else float32(0.0)
                dOs[ii, d] = dO[b, h, i0 + ii, d] if inside else float32(0.0)
            for ii in range(t, BR, BC):
                Ls[ii] = L[b, h, i0 + ii] if i0 + ii < T else float32(0.0)
                Ds[ii] = Dd[b, h, i0 + ii] if i0 + ii < T else float32(0.0)
            cuda.syncthreads()
            # --8<-- [end:bwd_dkdv_tile]
            if j < T:
                # --8<-- [start:bwd_dkdv_math]
                for ii in range(BR):
                    i = i0 + ii
                    if i < T and not (causal and j > i):
                        s = float32(0.0)
                        dp = float32(0.0)
                        for d in range(D):
                            s += Qs[ii, d] * k[d]
                            dp += dOs[ii, d] * v[d]
                        p = math.exp(s * scale - Ls[ii])
                        ds = p * (dp - Ds[ii])
                        for d in range(D):
                            dv[d] += p * dOs[ii, d]
                            dk[d] += scale * ds * Qs[ii, d]
                # --8<-- [end:bwd_dkdv_math]
            cuda.syncthreads()
        if j < T:
            for d in range(D):
                dK[b, h, j, d] = dk[d]
                dV[b, h, j, d] = dv[d]

    return flash_backward_dkdv


@lru_cache(maxsize=None)
def flash_backward_dq_kernel(D, BR=32, BC=32):
    @cuda.jit
    def flash_backward_dq(Q, K, V, dO, L, Dd, dQ, scale, causal):
        """Backward, step 3: dQ. Grid (T / BR, B * H); block: BR threads, thread t owns
        query row i = blockIdx.x * BR + t. Shared memory: BC x D tiles of K and V.
        For every visible j: dQ_i += scale * p (dO_i . v_j - Dd_i) k_j, p recomputed.
        Splitting dK/dV (a thread per key) from dQ (a thread per query) means every
        thread owns what it writes: no atomics.
        """
        Ks = cuda.shared.array((BC, D), float32)
        Vs = cuda.shared.array((BC, D), float32)
        q = cuda.local.array(D, float32)
        do = cuda.local.array(D, float32)
        dq = cuda.local.array(D, float32)
        t = cuda.threadIdx.x
        i = cuda.blockIdx.x * BR + t
        H = Q.shape[1]
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        T = Q.shape[2]
        Li = float32(0.0)
        Di = float32(0.0)
        if i < T:
            for d in range(D):
                q[d] = Q[b, h, i, d]
                do[d] = dO[b, h, i, d]
                dq[d] = 0.0
            Li = L[b, h, i]
            Di = Dd[b, h, i]
        # --8<-- [start:bwd_dq_causal]
        kv_end = T
        if causal:
            kv_end = min(T, (cuda.blockIdx.x + 1) * BR)
        # --8<-- [end:bwd_dq_causal]
        for j0 in range(0, kv_end, BC):
            for idx in range(t, BC * D, BR):
                jj = idx // D
                d = idx % D
                inside = j0 + jj < T
                Ks[jj, d] = K[b, h, j0 + jj, d] if inside else float32(0.0)
                Vs[jj, d] = V[b, h, j0 + jj, d] if inside else float32(0.0)
            cuda.syncthreads()
            if i < T:
                # --8<-- [start:bwd_dq_math]
                for jj in range(BC):
                    j = j0 + jj
                    if j < T and not (causal and j > i):
                        s = float32(0.0)
                        dp = float32(0.0)
                        for d in range(D):
                            s += q[d] * Ks[jj, d]
                            dp += do[d] * Vs[jj, d]
                        p = math.exp(s * scale - Li)
                        ds = p * (dp - Di)
                        for d in range(D):
                            dq[d] += scale * ds * Ks[jj, d]
                # --8<-- [end:bwd_dq_math]
            cuda.syncthreads()
        if i < T:
            for d in range(D):
                dQ[b, h, i, d] = dq[d]

    return flash_backward_dq


# --8<-- [end:flash_backward]


# --8<-- [start:reference]
def reference(Q, K, V, causal=False, scale=None):
    """numpy, in float64: O = softmax(scale Q K^T + mask) V and the row logsumexp L.

    The oracle the kernels are checked against; it builds the full (B, H, T, T) matrix.
    """
    T, D = Q.shape[-2:]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    S = scale * (Q.astype(np.float64) @ np.swapaxes(K, -1, -2))  # (B, H, T, T)
    if causal:
        S = np.where(np.tril(np.ones((T, T), dtype=bool)), S, -np.inf)
    m = S.max(axis=-1, keepdims=True)
    P = np.exp(S - m)
    l = P.sum(axis=-1, keepdims=True)
    return (P / l) @ V, (m + np.log(l))[..., 0]


# --8<-- [end:reference]


def _check(Q, K, V):
    if Q.ndim != 4 or Q.shape != K.shape or Q.shape != V.shape:
        raise ValueError(
            f"attention: Q, K, V must share one (B, H, T, D) shape, got "
            f"{tuple(Q.shape)}, {tuple(K.shape)}, {tuple(V.shape)}"
        )
    return Q.shape


# --8<-- [start:host]
def _buffer(buffers, name, shape):
    """buffers[name] if the caller keeps one of that shape, else a new device array."""
    if buffers is None:
        return cuda.device_array(shape, dtype=np.float32)
    if name not in buffers or buffers[name].shape != shape:
        buffers[name] = cuda.device_array(shape, dtype=np.float32)
    return buffers[name]


def attention_device(Q, K, V, causal=False, method="flash", scale=None, buffers=None, **tiling):
    """O = softmax(scale Q K^T + mask) V on (B, H, T, D) float32 device arrays.

    method: "naive" (3 kernels, S and P in memory), "fused" (2 kernels, P in memory) or
    "flash" (1 kernel, O(T) extra memory). Returns O; for "flash", (O, L) where L is the
    (B, H, T) logsumexp that ``flash_backward_device`` needs. buffers: an optional dict
    in which the outputs and scratch arrays are kept and reused from call to call (the
    benchmark passes one, so that it times kernels, not cudaMalloc).
    """
    B, H, T, D = _check(Q, K, V)
    scale = np.float32(1.0 / math.sqrt(D) if scale is None else scale)
    O = _buffer(buffers, "O", (B, H, T, D))
    if method == "flash":
        BR, BC = tiling.get("BR", 64), tiling.get("BC", 32)
        L = _buffer(buffers, "L", (B, H, T))
        flash_forward_kernel(D, BR, BC)[(ceil_div(T, BR), B * H), BR](Q, K, V, O, L, scale, causal)
        return O, L
    BS = tiling.get("BS", 16)
    P = _buffer(buffers, "P", (B, H, T, T))
    if method == "naive":
        S = _buffer(buffers, "S", (B, H, T, T))
        scores_kernel(BS)[(ceil_div(T, BS), ceil_div(T, BS), B * H), (BS, BS)](
            Q, K, S, scale, causal
        )
        rows = B * H * T
        NT = tiling.get("NT", 128)
        softmax_rows[ceil_div(rows, NT), NT](S, P)
    elif method == "fused":
        NT = tiling.get("NT", 128)
        fused_softmax_kernel(NT)[(T, B * H), NT](Q, K, P, scale, causal)
    else:
        raise ValueError(f"attention: unknown method {method!r}; choose naive, fused or flash")
    weighted_sum_kernel(BS)[(ceil_div(D, BS), ceil_div(T, BS), B * H), (BS, BS)](P, V, O)
    return O


def flash_backward_device(Q, K, V, O, L, dO, causal=False, scale=None, BR=32, BC=32, buffers=None):
    """Gradients (dQ, dK, dV) of flash attention, recomputing P from the saved L.
    Only O(T) scratch: Dd, one value per row. buffers: as in ``attention_device``."""
    B, H, T, D = _check(Q, K, V)
    scale = np.float32(1.0 / math.sqrt(D) if scale is None else scale)
    Dd = _buffer(buffers, "Dd", (B, H, T))
    dQ = _buffer(buffers, "dQ", (B, H, T, D))
    dK = _buffer(buffers, "dK", (B, H, T, D))
    dV = _buffer(buffers, "dV", (B, H, T, D))
    rows = B * H * T
    row_dot[ceil_div(rows, 128), 128](dO, O, Dd)
    flash_backward_dkdv_kernel(D, BR, BC)[(ceil_div(T, BC), B * H), BC](
        Q, K, V, dO, L, Dd, dK, dV, scale, causal
    )
    flash_backward_dq_kernel(D, BR, BC)[(ceil_div(T, BR), B * H), BR](
        Q, K, V, dO, L, Dd, dQ, scale, causal
    )
    return dQ, dK, dV


def attention(Q, K, V, causal=False, method="flash", scale=None, **tiling):
    """Host version of ``attention_device``: numpy (B, H, T, D) in, numpy O out."""
    out = attention_device(
        to_device(Q), to_device(K), to_device(V), causal, method, scale, **tiling
    )
    O = out[0] if method == "flash" else out
    return O.copy_to_host()


def attention_backward(Q, K, V, dO, causal=False, scale=None, **tiling):
    """Host gradients (dQ, dK, dV) of flash attention for output gradient dO (numpy)."""
    dQ_, dK_, dV_ = (to_device(x) for x in (Q, K, V))
    fwd = {key: tiling[key] for key in ("BR", "BC") if key in tiling}
    O, L = attention_device(dQ_, dK_, dV_, causal, "flash", scale, **fwd)
    grads = flash_backward_device(dQ_, dK_, dV_, O, L, to_device(dO), causal, scale, **fwd)
    return tuple(g.copy_to_host() for g in grads)


# --8<-- [end:host]
