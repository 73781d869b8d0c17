"""The GPU GEMM ladder: C = A @ B in float32 with Numba CUDA, one rung per kernel (section 4.4).

Each rung changes one thing about the previous one, following Simon Boehm's "How to
Optimize a CUDA Matmul Kernel for cuBLAS-like Performance" (written in CUDA C):

1. ``naive``        one thread per C[i, j]; neighbouring threads take neighbouring *rows*
2. ``coalesced``    neighbouring threads take neighbouring *columns*: loads coalesce
3. ``shared``       BS x BS tiles of A and B staged in shared memory
4. ``blocktile1d``  each thread computes TM results of a column of C (registers)
5. ``blocktile2d``  each thread computes a TM x TN patch of C (outer products in registers)
6. ``transposed``   rung 5 with the A tile stored transposed, so a thread's TM values of A
                    sit side by side in shared memory. Boehm's rung 6 also loads 4 floats
                    per instruction (float4); Numba has no way to ask for that.
7. ``warptile``     a block's tile is split into warp tiles, a warp's into thread patches
8. ``doublebuffer`` rung 6 with two shared buffers: the next tiles are fetched into
                    registers while the current ones are used; one barrier per step

and, from section 4.5, ``swizzled``: rung 6 with its transposed tile stored through an
XOR swizzle, which removes the bank conflicts of the transposed store.

Tile sizes must be known when a kernel is compiled (they size shared and local arrays),
so each rung is a *kernel factory*: ``blocktile2d(BM=128, BN=128, BK=8, TM=8, TN=8)``
returns a kernel compiled for that tiling (cached). The tests use tiny tilings, which
the CUDA simulator runs in seconds; the defaults are for a real GPU.

Every kernel writes C = A @ B (it does not accumulate, unlike sitp.kernels.cpu.blas on the CPU),
handles any M, N, K (tiles past the edge are padded with zeros in shared memory and
never written back), and takes C-contiguous float32 device arrays.
"""

import inspect
from functools import lru_cache

import numpy as np
from numba import cuda, float32

from sitp.kernels.cuda.launch import ceil_div, grid_2d, jit_bounded, to_device


# --8<-- [start:naive]
@lru_cache(maxsize=None)
def naive(BS=32):
    @cuda.jit
    def gemm_naive(A, B, C):
        """Rung 1. Block: BS x BS threads; thread (x, y) computes C[i, j] with
        i = blockIdx.x * BS + x, j = blockIdx.y * BS + y. Shared memory: none.

        The 32 threads of a warp have consecutive x, hence consecutive rows i: they
        read A[i, k] K floats apart and write C[i, j] N floats apart (uncoalesced).
        """
        i = cuda.blockIdx.x * BS + cuda.threadIdx.x  # row of C
        j = cuda.blockIdx.y * BS + cuda.threadIdx.y  # column of C
        M, K = A.shape
        N = B.shape[1]
        if i < M and j < N:
            acc = float32(0.0)
            for k in range(K):
                acc += A[i, k] * B[k, j]
            C[i, j] = acc

    return gemm_naive


# --8<-- [end:naive]


# --8<-- [start:coalesced]
@lru_cache(maxsize=None)
def coalesced(BS=32):
    @cuda.jit
    def gemm_coalesced(A, B, C):
        """Rung 2. Block: BS x BS threads; thread (x, y) computes C[i, j] with
        j = blockIdx.x * BS + x, i = blockIdx.y * BS + y. Shared memory: none.

        Now a warp's consecutive x are consecutive columns j: one 128-byte transaction
        serves its 32 loads of B[k, j] and its 32 stores of C[i, j]; A[i, k] is the same
        address for the whole warp (a broadcast).
        """
        j = cuda.blockIdx.x * BS + cuda.threadIdx.x  # column of C: fastest across a warp
        i = cuda.blockIdx.y * BS + cuda.threadIdx.y  # row of C
        M, K = A.shape
        N = B.shape[1]
        if i < M and j < N:
            acc = float32(0.0)
            for k in range(K):
                acc += A[i, k] * B[k, j]
            C[i, j] = acc

    return gemm_coalesced


# --8<-- [end:coalesced]


# --8<-- [start:shared]
@lru_cache(maxsize=None)
def shared(BS=32):
    @cuda.jit
    def gemm_shared(A, B, C):
        """Rung 3. Block: BS x BS threads, one per C[i, j] of a BS x BS tile of C.
        Shared memory: a BS x BS tile of A and one of B (2 * BS * BS floats).

        The K loop advances BS at a time: every thread loads one element of each tile,
        the block waits (syncthreads), then each thread reads 2 * BS values from shared
        memory. Each global element is now loaded once per block instead of BS times.
        """
        As = cuda.shared.array((BS, BS), float32)
        Bs = cuda.shared.array((BS, BS), float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        j = cuda.blockIdx.x * BS + tx
        i = cuda.blockIdx.y * BS + ty
        M, K = A.shape
        N = B.shape[1]
        acc = float32(0.0)
        for k0 in range(0, K, BS):
            # zero padding past the edges keeps the inner loop free of checks
            As[ty, tx] = A[i, k0 + tx] if i < M and k0 + tx < K else float32(0.0)
            Bs[ty, tx] = B[k0 + ty, j] if k0 + ty < K and j < N else float32(0.0)
            cuda.syncthreads()  # the tiles are complete
            for kk in range(BS):
                acc += As[ty, kk] * Bs[kk, tx]
            cuda.syncthreads()  # everyone is done with the tiles before they are overwritten
        if i < M and j < N:
            C[i, j] = acc

    return gemm_shared


# --8<-- [end:shared]


# --8<-- [start:blocktile1d]
@lru_cache(maxsize=None)
def blocktile1d(BM=64, BN=64, BK=8, TM=8):
    NT = BM * BN // TM  # threads per block

    @jit_bounded(NT)
    def gemm_blocktile1d(A, B, C):
        """Rung 4. Block: BM * BN / TM threads (1-D) for a BM x BN tile of C.
        Thread t computes TM results of one column: C[row0 + r, col0 + t % BN] for
        r in (t // BN) * TM + [0, TM). Shared memory: A tile BM x BK, B tile BK x BN.
        Registers: TM accumulators.

        One value of B from shared memory now feeds TM multiply-adds.
        """
        As = cuda.shared.array((BM, BK), float32)
        Bs = cuda.shared.array((BK, BN), float32)
        acc = cuda.local.array(TM, float32)
        t = cuda.threadIdx.x
        row0 = cuda.blockIdx.y * BM
        col0 = cuda.blockIdx.x * BN
        tr = (t // BN) * TM  # first row of this thread within the tile
        tc = t % BN  # its column within the tile
        M, K = A.shape
        N = B.shape[1]
        for r in range(TM):
            acc[r] = 0.0
        for k0 in range(0, K, BK):
            for idx in range(t, BM * BK, NT):  # the block copies the tiles together
                r = idx // BK
                c = idx % BK
                ok = row0 + r < M and k0 + c < K
                As[r, c] = A[row0 + r, k0 + c] if ok else float32(0.0)
            for idx in range(t, BK * BN, NT):
                r = idx // BN
                c = idx % BN
                ok = k0 + r < K and col0 + c < N
                Bs[r, c] = B[k0 + r, col0 + c] if ok else float32(0.0)
            cuda.syncthreads()
            for kk in range(BK):
                b = Bs[kk, tc]  # one shared load ...
                for r in range(TM):
                    acc[r] += As[tr + r, kk] * b  # ... TM multiply-adds
            cuda.syncthreads()
        for r in range(TM):
            if row0 + tr + r < M and col0 + tc < N:
                C[row0 + tr + r, col0 + tc] = acc[r]

    return gemm_blocktile1d


# --8<-- [end:blocktile1d]


# --8<-- [start:blocktile2d]
@lru_cache(maxsize=None)
def blocktile2d(BM=128, BN=128, BK=8, TM=8, TN=8):
    NT = (BM // TM) * (BN // TN)

    @jit_bounded(NT)
    def gemm_blocktile2d(A, B, C):
        """Rung 5. Block: (BM / TM) * (BN / TN) threads (1-D) for a BM x BN tile of C.
        Thread t computes the TM x TN patch at rows (t // (BN / TN)) * TM, columns
        (t % (BN / TN)) * TN of the tile. Shared memory: A tile BM x BK, B tile BK x BN.
        Registers: TM x TN accumulators, TM values of A and TN of B per step of k.

        Per step of k a thread loads TM + TN values from shared memory and does TM * TN
        multiply-adds (an outer product), instead of 1 + TM for TM of them in rung 4.
        """
        As = cuda.shared.array((BM, BK), float32)
        Bs = cuda.shared.array((BK, BN), float32)
        acc = cuda.local.array((TM, TN), float32)
        regM = cuda.local.array(TM, float32)
        regN = cuda.local.array(TN, float32)
        t = cuda.threadIdx.x
        row0 = cuda.blockIdx.y * BM
        col0 = cuda.blockIdx.x * BN
        tr = (t // (BN // TN)) * TM
        tc = (t % (BN // TN)) * TN
        M, K = A.shape
        N = B.shape[1]
        for r in range(TM):
            for c in range(TN):
                acc[r, c] = 0.0
        for k0 in range(0, K, BK):
            for idx in range(t, BM * BK, NT):
                r = idx // BK
                c = idx % BK
                ok = row0 + r < M and k0 + c < K
                As[r, c] = A[row0 + r, k0 + c] if ok else float32(0.0)
            for idx in range(t, BK * BN, NT):
                r = idx // BN
                c = idx % BN
                ok = k0 + r < K and col0 + c < N
                Bs[r, c] = B[k0 + r, col0 + c] if ok else float32(0.0)
            cuda.syncthreads()
            for kk in range(BK):
                for r in range(TM):
                    regM[r] = As[tr + r, kk]
                for c in range(TN):
                    regN[c] = Bs[kk, tc + c]
                for r in range(TM):
                    for c in range(TN):
                        acc[r, c] += regM[r] * regN[c]
            cuda.syncthreads()
        for r in range(TM):
            for c in range(TN):
                if row0 + tr + r < M and col0 + tc + c < N:
                    C[row0 + tr + r, col0 + tc + c] = acc[r, c]

    return gemm_blocktile2d


# --8<-- [end:blocktile2d]


# --8<-- [start:transposed]
@lru_cache(maxsize=None)
def transposed(BM=128, BN=128, BK=8, TM=8, TN=8):
    NT = (BM // TM) * (BN // TN)

    @jit_bounded(NT)
    def gemm_transposed(A, B, C):
        """Rung 6. As rung 5, but the A tile is stored transposed, AsT[k, m] (BK x BM),
        so that a thread's TM values of A for one k are adjacent in shared memory, like
        its TN values of B. In CUDA C this is what lets both be read with 128-bit loads
        (float4); Numba has vector types but no way to load one from a float32 array.
        """
        AsT = cuda.shared.array((BK, BM), float32)
        Bs = cuda.shared.array((BK, BN), float32)
        acc = cuda.local.array((TM, TN), float32)
        regM = cuda.local.array(TM, float32)
        regN = cuda.local.array(TN, float32)
        t = cuda.threadIdx.x
        row0 = cuda.blockIdx.y * BM
        col0 = cuda.blockIdx.x * BN
        tr = (t // (BN // TN)) * TM
        tc = (t % (BN // TN)) * TN
        M, K = A.shape
        N = B.shape[1]
        for r in range(TM):
            for c in range(TN):
                acc[r, c] = 0.0
        for k0 in range(0, K, BK):
            for idx in range(t, BM * BK, NT):
                r = idx // BK
                c = idx % BK
                ok = row0 + r < M and k0 + c < K
                AsT[c, r] = A[row0 + r, k0 + c] if ok else float32(0.0)  # transposed store
            for idx in range(t, BK * BN, NT):
                r = idx // BN
                c = idx % BN
                ok = k0 + r < K and col0 + c < N
                Bs[r, c] = B[k0 + r, col0 + c] if ok else float32(0.0)
            cuda.syncthreads()
            for kk in range(BK):
                for r in range(TM):
                    regM[r] = AsT[kk, tr + r]  # contiguous now
                for c in range(TN):
                    regN[c] = Bs[kk, tc + c]
                for r in range(TM):
                    for c in range(TN):
                        acc[r, c] += regM[r] * regN[c]
            cuda.syncthreads()
        for r in range(TM):
            for c in range(TN):
                if row0 + tr + r < M and col0 + tc + c < N:
                    C[row0 + tr + r, col0 + tc + c] = acc[r, c]

    return gemm_transposed


# --8<-- [end:transposed]


# --8<-- [start:warptile]
@lru_cache(maxsize=None)
def warptile(BM=128, BN=128, BK=16, WM=64, WN=64, WNITER=4, TM=8, TN=4):
    WARP = 32
    NT = (BM // WM) * (BN // WN) * WARP  # one warp per WM x WN warp tile
    WMITER = (WM * WN) // (WARP * TM * TN * WNITER)
    assert BM % WM == 0 and BN % WN == 0, "warp tiles must tile the block tile"
    assert WMITER >= 1, "a warp's 32 threads must cover a warp sub-tile exactly"
    WSUBM = WM // WMITER  # a warp tile is WMITER x WNITER sub-tiles
    WSUBN = WN // WNITER  # of WSUBM x WSUBN, each covered by the
    TCOLS = WSUBN // TN  # warp's 32 threads as a grid of
    assert (WSUBM // TM) * TCOLS == WARP, (
        "a warp's 32 threads must cover a warp sub-tile exactly"
    )  # (32 / TCOLS) x TCOLS
    RM, RN = WMITER * TM, WNITER * TN  # a thread's accumulators: RM x RN

    @jit_bounded(NT)
    def gemm_warptile(A, B, C):
        """Rung 7. Block: NT threads, i.e. (BM / WM) * (BN / WN) warps, for a BM x BN tile.
        Warp w owns the WM x WN warp tile at (w // (BN / WN), w % (BN / WN)); lane l owns,
        in each of the warp's WMITER x WNITER sub-tiles, the TM x TN patch at
        (l // TCOLS, l % TCOLS). Shared memory: AsT (BK x BM) and Bs (BK x BN).
        Registers: RM x RN accumulators, RM = WMITER * TM and RN = WNITER * TN.

        The three levels (block, warp, thread) mirror the hardware's three levels of
        memory (shared, a warp's register file, a thread's registers); a warp reads a
        compact region of shared memory at every step of k.
        """
        AsT = cuda.shared.array((BK, BM), float32)
        Bs = cuda.shared.array((BK, BN), float32)
        acc = cuda.local.array((RM, RN), float32)
        regM = cuda.local.array(RM, float32)
        regN = cuda.local.array(RN, float32)
        t = cuda.threadIdx.x
        warp = t // WARP
        lane = t % WARP
        wr = (warp // (BN // WN)) * WM  # warp tile's first row within the block tile
        wc = (warp % (BN // WN)) * WN  # and first column
        tr = (lane // TCOLS) * TM  # thread patch within a warp sub-tile
        tc = (lane % TCOLS) * TN
        row0 = cuda.blockIdx.y * BM
        col0 = cuda.blockIdx.x * BN
        M, K = A.shape
        N = B.shape[1]
        for r in range(RM):
            for c in range(RN):
                acc[r, c] = 0.0
        for k0 in range(0, K, BK):
            for idx in range(t, BM * BK, NT):
                r = idx // BK
                c = idx % BK
                ok = row0 + r < M and k0 + c < K
                AsT[c, r] = A[row0 + r, k0 + c] if ok else float32(0.0)
            for idx in range(t, BK * BN, NT):
                r = idx // BN
                c = idx % BN
                ok = k0 + r < K and col0 + c < N
                Bs[r, c] = B[k0 + r, col0 + c] if ok else float32(0.0)
            cuda.syncthreads()
            for kk in range(BK):
                for wm in range(WMITER):
                    for r in range(TM):
                        regM[wm * TM + r] = AsT[kk, wr + wm * WSUBM + tr + r]
                for wn in range(WNITER):
                    for c in range(TN):
                        regN[wn * TN + c] = Bs[kk, wc + wn * WSUBN + tc + c]
                for r in range(RM):
                    for c in range(RN):
                        acc[r, c] += regM[r] * regN[c]
            cuda.syncthreads()
        for wm in range(WMITER):
            for wn in range(WNITER):
                for r in range(TM):
                    for c in range(TN):
                        i = row0 + wr + wm * WSUBM + tr + r
                        j = col0 + wc + wn * WSUBN + tc + c
                        if i < M and j < N:
                            C[i, j] = acc[wm * TM + r, wn * TN + c]

    return gemm_warptile


# --8<-- [end:warptile]


# --8<-- [start:doublebuffer]
@lru_cache(maxsize=None)
def doublebuffer(BM=128, BN=128, BK=8, TM=8, TN=8):
    NT = (BM // TM) * (BN // TN)
    LA = (BM * BK + NT - 1) // NT  # elements of the A tile each thread copies
    LB = (BK * BN + NT - 1) // NT  # and of the B tile

    @jit_bounded(NT)
    def gemm_doublebuffer(A, B, C):
        """Rung 8. Tiling as rung 6, with two copies of each shared tile. At step s the
        block computes on buffer s % 2 while each thread holds its share of the next
        tiles in registers (LA + LB values); after the arithmetic it stores them into
        buffer (s + 1) % 2. The loads from global memory are in flight during the
        multiply-adds, and one barrier per step suffices instead of two.
        """
        AsT = cuda.shared.array((2, BK, BM), float32)
        Bs = cuda.shared.array((2, BK, BN), float32)
        acc = cuda.local.array((TM, TN), float32)
        regM = cuda.local.array(TM, float32)
        regN = cuda.local.array(TN, float32)
        nextA = cuda.local.array(LA, float32)
        nextB = cuda.local.array(LB, float32)
        t = cuda.threadIdx.x
        row0 = cuda.blockIdx.y * BM
        col0 = cuda.blockIdx.x * BN
        tr = (t // (BN // TN)) * TM
        tc = (t % (BN // TN)) * TN
        M, K = A.shape
        N = B.shape[1]
        for r in range(TM):
            for c in range(TN):
                acc[r, c] = 0.0
        # prologue: tiles for k0 = 0 into buffer 0
        for e in range(LA):
            idx = t + e * NT
            if idx < BM * BK:
                r = idx // BK
                c = idx % BK
                AsT[0, c, r] = A[row0 + r, c] if row0 + r < M and c < K else float32(0.0)
        for e in range(LB):
            idx = t + e * NT
            if idx < BK * BN:
                r = idx // BN
                c = idx % BN
                Bs[0, r, c] = B[r, col0 + c] if r < K and col0 + c < N else float32(0.0)
        cuda.syncthreads()
        steps = (K + BK - 1) // BK
        for s in range(steps):
            cur = s % 2
            k1 = (s + 1) * BK  # next tile's first k
            if s + 1 < steps:  # issue the next loads, into registers
                for e in range(LA):
                    idx = t + e * NT
                    r = idx // BK
                    c = idx % BK
                    ok = idx < BM * BK and row0 + r < M and k1 + c < K
                    nextA[e] = A[row0 + r, k1 + c] if ok else float32(0.0)
                for e in range(LB):
                    idx = t + e * NT
                    r = idx // BN
                    c = idx % BN
                    ok = idx < BK * BN and k1 + r < K and col0 + c < N
                    nextB[e] = B[k1 + r, col0 + c] if ok else float32(0.0)
            for kk in range(BK):  # compute on the current buffer meanwhile
                for r in range(TM):
                    regM[r] = AsT[cur, kk, tr + r]
                for c in range(TN):
                    regN[c] = Bs[cur, kk, tc + c]
                for r in range(TM):
                    for c in range(TN):
                        acc[r, c] += regM[r] * regN[c]
            if s + 1 < steps:  # park the next tiles in the other buffer
                for e in range(LA):
                    idx = t + e * NT
                    if idx < BM * BK:
                        AsT[1 - cur, idx % BK, idx // BK] = nextA[e]
                for e in range(LB):
                    idx = t + e * NT
                    if idx < BK * BN:
                        Bs[1 - cur, idx // BN, idx % BN] = nextB[e]
            cuda.syncthreads()  # buffer 1 - cur is full and nobody reads buffer cur any more
        for r in range(TM):
            for c in range(TN):
                if row0 + tr + r < M and col0 + tc + c < N:
                    C[row0 + tr + r, col0 + tc + c] = acc[r, c]

    return gemm_doublebuffer


# --8<-- [end:doublebuffer]


# --8<-- [start:swizzled]
@lru_cache(maxsize=None)
def swizzled(BM=128, BN=128, BK=8, TM=8, TN=8):
    NT = (BM // TM) * (BN // TN)
    assert BM & (BM - 1) == 0 and BK & (BK - 1) == 0 and BM >= 32 and BK <= 32, (
        "the swizzle needs powers of two, BM >= 32 and BK <= 32"
    )
    BASE = (32 // BK).bit_length() - 1  # bits of r = lane // BK in one warp's store
    BITS = BK.bit_length() - 1  # bits of the tile row c = lane % BK
    SHIFT = BM.bit_length() - 1 - BASE  # moves c (bits log2 BM and up) down to BASE
    MASK = ((1 << BITS) - 1) << BASE  # section 4.5's swizzle(BITS, BASE, SHIFT)
    WORDS = BK * BM  # the A tile, flat

    @jit_bounded(NT)
    def gemm_swizzled(A, B, C):
        """Rung 6 with the swizzle of section 4.5 on the transposed A tile. Tiling as
        rung 6; shared memory holds AsT flat, element (c, r) at word
        w ^ ((w >> SHIFT) & MASK) with w = c * BM + r. The transposed store, an 8-way
        bank conflict with the defaults, becomes conflict-free, and the reads stay so.
        """
        AsT = cuda.shared.array(WORDS, float32)
        Bs = cuda.shared.array((BK, BN), float32)
        acc = cuda.local.array((TM, TN), float32)
        regM = cuda.local.array(TM, float32)
        regN = cuda.local.array(TN, float32)
        t = cuda.threadIdx.x
        row0 = cuda.blockIdx.y * BM
        col0 = cuda.blockIdx.x * BN
        tr = (t // (BN // TN)) * TM
        tc = (t % (BN // TN)) * TN
        M, K = A.shape
        N = B.shape[1]
        for r in range(TM):
            for c in range(TN):
                acc[r, c] = 0.0
        for k0 in range(0, K, BK):
            for idx in range(t, BM * BK, NT):
                r = idx // BK
                c = idx % BK
                ok = row0 + r < M and k0 + c < K
                w = c * BM + r
                AsT[w ^ ((w >> SHIFT) & MASK)] = A[row0 + r, k0 + c] if ok else float32(0.0)
            for idx in range(t, BK * BN, NT):
                r = idx // BN
                c = idx % BN
                ok = k0 + r < K and col0 + c < N
                Bs[r, c] = B[k0 + r, col0 + c] if ok else float32(0.0)
            cuda.syncthreads()
            for kk in range(BK):
                for r in range(TM):
                    w = kk * BM + tr + r
                    regM[r] = AsT[w ^ ((w >> SHIFT) & MASK)]
                for c in range(TN):
                    regN[c] = Bs[kk, tc + c]
                for r in range(TM):
                    for c in range(TN):
                        acc[r, c] += regM[r] * regN[c]
            cuda.syncthreads()
        for r in range(TM):
            for c in range(TN):
                if row0 + tr + r < M and col0 + tc + c < N:
                    C[row0 + tr + r, col0 + tc + c] = acc[r, c]

    return gemm_swizzled


# --8<-- [end:swizzled]


LADDER = {
    f.__name__: f
    for f in (
        naive,
        coalesced,
        shared,
        blocktile1d,
        blocktile2d,
        transposed,
        warptile,
        doublebuffer,
        swizzled,
    )
}
KERNELS = tuple(LADDER)  # in the order of the ladder


def launch_config(kernel, M, N, **tiling):
    """(grid, block) of a rung for an M x N product, from its tiling (defaults filled in).

    >>> launch_config("shared", 33, 29, BS=8)
    ((4, 5), (8, 8))
    >>> launch_config("blocktile2d", 1024, 1024)
    ((8, 8), 256)
    """
    params = inspect.signature(LADDER[kernel].__wrapped__).parameters
    t = {name: p.default for name, p in params.items()} | tiling
    if "BS" in t:  # rungs 1-3: a BS x BS block of threads, one per element of C
        block = (t["BS"], t["BS"])
        if kernel == "naive":  # blockIdx.x runs over rows of C here, on purpose
            return (ceil_div(M, t["BS"]), ceil_div(N, t["BS"])), block
        return grid_2d(M, N, t["BS"], t["BS"]), block
    if kernel == "blocktile1d":
        threads = t["BM"] * t["BN"] // t["TM"]
    elif kernel == "warptile":
        threads = (t["BM"] // t["WM"]) * (t["BN"] // t["WN"]) * 32
    else:
        threads = (t["BM"] // t["TM"]) * (t["BN"] // t["TN"])
    return grid_2d(M, N, t["BM"], t["BN"]), threads


# --8<-- [start:launch]
def gemm_device(A, B, C=None, kernel="warptile", **tiling):
    """C = A @ B on device arrays with one rung of the ladder; returns C (on the device).

    Args:
        A: (M, K) float32 device array. B: (K, N) float32 device array.
        C: optional (M, N) float32 device array to write into (allocated if None).
        kernel: a name in ``KERNELS``. tiling: the rung's tile sizes (BS, BM, BN, ...).
    """
    M, K = A.shape
    K2, N = B.shape
    if K != K2:
        raise ValueError(f"gemm: inner sizes differ: A is {M}x{K}, B is {K2}x{N}")
    if kernel not in LADDER:
        raise ValueError(f"gemm: unknown kernel {kernel!r}; choose one of {', '.join(KERNELS)}")
    if C is None:
        C = cuda.device_array((M, N), dtype=np.float32)
    grid, block = launch_config(kernel, M, N, **tiling)
    LADDER[kernel](**tiling)[grid, block](A, B, C)
    return C


def gemm(A, B, kernel="warptile", **tiling):
    """C = A @ B for host (numpy) arrays: copy to the GPU, run one rung, copy back."""
    A = np.asarray(A)
    B = np.asarray(B)
    if A.ndim != 2 or B.ndim != 2:
        raise ValueError(f"gemm: expected two matrices, got shapes {A.shape} and {B.shape}")
    d_C = gemm_device(to_device(A), to_device(B), kernel=kernel, **tiling)
    return d_C.copy_to_host()


# --8<-- [end:launch]
