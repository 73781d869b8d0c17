"""The GEMM ladder, rungs 4-5: packed panels, a register micro-kernel, threads.

This is the structure of BLIS and OpenBLAS (Goto's algorithm). For each slab of
KC columns of A / rows of B:

* B's slab (KC, N) is copied into *panels* of NR columns, each stored so that
  the NR values of one row are adjacent: ``Bp[jp, p, :] == B[pc + p, jp*NR:(jp+1)*NR]``.
* A block of MC rows of A's slab is copied into panels of MR rows, transposed so
  the MR values of one column are adjacent: ``Ap[ip, p, :] == A[ip*MR:(ip+1)*MR, pc + p]``.
* The micro-kernel multiplies one A panel (KC x MR) by one B panel (KC x NR) into
  an MR x NR tile of C that lives in registers for the whole KC loop.

Panels are zero-padded to full MR / NR, so the micro-kernel never sees an edge;
only the final write-back into C is clipped.
"""

import numba
import numpy as np
from llvmlite import ir
from numba import carray, njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from sitp import _target

# --8<-- [start:params]
# The register tile, sized from the target's vector registers (sitp/_target.py):
# a row of the tile is two vector registers, NR = 2 * (float32 lanes), and MR rows
# take 2 * MR accumulators. AVX2 (16 registers of 8 lanes): 6 x 16, 12 accumulators.
# AVX-512 (32 registers of 16 lanes): 14 x 32, 28 accumulators. float64 halves NR.
MR, NR = _target.tile_shape()
KC = 512 if NR <= 16 else 384  # depth of a panel: KC * NR * 4 B of B's panel stays in L1/L2
MC = (
    60 if MR == 6 else 8 * MR
)  # rows of A per block (a multiple of MR): MC * KC * 4 B of packed A sits in L2
# Fast-math flags for the micro-kernel: fuse a*b+c into one FMA ("contract"),
# but no "reassoc", which would let LLVM reorder the k-sum and spill registers.
FASTMATH = {"nnan", "ninf", "nsz", "contract", "arcp", "afn"}
# --8<-- [end:params]


@intrinsic
def _register_tile(typingctx, dtype):
    """Pointer to MR * NR elements of ``dtype`` on the stack of the calling kernel.

    numba allocates arrays on the heap; a fixed-size stack slot (``alloca``) whose
    address never escapes costs nothing to allocate, and LLVM may keep it in
    registers. :func:`tile_fma` writes its finished tile here, and the write-back
    into C reads it.
    """
    elem = dtype.dtype
    sig = types.CPointer(elem)(dtype)

    def codegen(context, builder, signature, args):
        with builder.goto_entry_block():
            return builder.alloca(
                context.get_value_type(elem), size=ir.Constant(ir.IntType(64), MR * NR)
            )

    return sig, codegen


@intrinsic
def _prefetch(typingctx, ary, i, j):
    """Hint the CPU to start loading the cache line of ``ary[i, j]`` (no effect on results).

    Used for the C tile: its rows are N elements apart, a pattern the hardware
    prefetcher does not guess, so without the hint the write-back at the end of
    the micro-kernel waits for up to MR cache misses.
    """
    sig = types.void(ary, i, j)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        arr = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, arr, [args[1], args[2]])
        i8p = ir.IntType(8).as_pointer()
        fn = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(ir.VoidType(), [i8p] + [ir.IntType(32)] * 3),
            "llvm.prefetch.p0",
        )
        i32 = ir.IntType(32)
        # rw=1 (we will write), locality=3 (keep in all cache levels), data cache
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(1), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def tile_nr(typingctx, dtype):
    """Width of the register tile for ``dtype``, as a compile-time constant.

    Two vector registers per row: on AVX2, NR = 16 for float32 and 8 for float64;
    on AVX-512, 32 and 16. Returned as an LLVM constant, so loops
    ``range(tile_nr(...))`` have fixed trip counts and unroll like ``range(NR)``.
    """
    nr = NR * 32 // dtype.dtype.bitwidth if isinstance(dtype.dtype, types.Float) else NR
    nr = min(nr, NR)

    def codegen(context, builder, signature, args):
        return context.get_constant(types.intp, nr)

    return types.intp(dtype), codegen


# --8<-- [start:tile_fma]
def make_tile_fma(rows, nvec, a_unit=None):
    """An intrinsic ``tile_fma(A, a_off, a_si, a_sp, B, b_off, b_sp, K, out, o_off, o_si,
    mode, bias, bias_off)`` for a rows x (nvec * lanes) register tile.

    It computes T[i, :] = sum over p < K of A[i, p] * B[p, :], where A's element
    (i, p) is ``A.data[a_off + i * a_si + p * a_sp]`` and row p of B starts at
    ``B.data[b_off + p * b_sp]`` (offsets and strides in elements; B's rows are
    contiguous), and writes row i of T to ``out.data[o_off + i * o_si:]``:

    * mode 0: added to what is there (``out`` is C itself, for a full tile);
    * mode 1: stored (C not yet written, or a stack buffer for a tile that C's
      edge clips; ``out`` may be a pointer);
    * mode 2: stored, with ``bias.data[bias_off:]`` added to every row (the sum
      starts from the bias: a linear layer's ``x @ W.T + b`` in one pass).

    The loop is written in LLVM IR with explicit vector types: the tile is
    rows x nvec values of type ``<lanes x float>``, carried from one step to the next
    in SSA registers (``phi`` nodes), and each step is nvec vector loads of B, rows
    broadcasts of A and rows * nvec ``llvm.fmuladd`` (an FMA where the target has
    one). Nothing is left for LLVM's vectorizers to decide, so the code is the same
    on every target: ``ymm`` registers on AVX2, ``zmm`` on AVX-512, ``xmm`` on
    baseline x86-64 and NEON.

    ``a_unit`` is for kernels that read A in place, with strides known only at run
    time (``gemm_small_set``). LLVM then walks down A's column with one pointer, an
    add per row: a chain of ``rows`` dependent adds that each step waits for, about
    as long as its FMAs take. ``a_unit="i"`` compiles the tile for ``a_si == 1`` (A
    a transposed view: the column's values lie at constant offsets from one
    pointer), ``a_unit="p"`` for ``a_sp == 1`` (A's rows contiguous: the walk starts
    afresh from the row pointers at every step, so no step waits for the one
    before); the caller passes those strides and picks the tile by A's layout. The
    micro-kernel's packed panels have constant strides already.
    """

    @intrinsic
    def tile_fma(
        typingctx, A, a_off, a_si, a_sp, B, b_off, b_sp, K, out, o_off, o_si, mode, bias, bias_off
    ):
        if not (
            isinstance(A, types.Array)
            and isinstance(B, types.Array)
            and A.ndim == B.ndim == 2
            and isinstance(A.dtype, types.Float)
            and B.dtype == A.dtype
        ):
            return None
        if not (
            (isinstance(out, (types.Array, types.CPointer)) and out.dtype == A.dtype)
            and isinstance(bias, types.Array)
            and bias.dtype == A.dtype
        ):
            return None
        sig = types.void(
            A, a_off, a_si, a_sp, B, b_off, b_sp, K, out, o_off, o_si, mode, bias, bias_off
        )
        return sig, _tile_codegen(rows, nvec, a_unit)

    return tile_fma


def _tile_codegen(rows, nvec, a_unit=None):
    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        a_off, a_si, a_sp, b_off, b_sp, k, o_off, o_si, mode, bias_off = (
            context.cast(builder, args[n], signature.args[n], types.int64)
            for n in (1, 2, 3, 5, 6, 7, 9, 10, 11, 13)
        )
        if a_unit == "p":  # the caller promises that A's rows are contiguous
            a_sp = i64(1)
        elif a_unit == "i":  # ... or that A's columns are (a transposed matrix)
            a_si = i64(1)
        dtype = signature.args[0].dtype

        def data(n):
            return context.make_array(signature.args[n])(context, builder, args[n]).data

        a_data = builder.gep(data(0), [a_off])
        b_data = builder.gep(data(4), [b_off])
        o_data = builder.gep(
            data(8) if isinstance(signature.args[8], types.Array) else args[8], [o_off]
        )
        bias_data = builder.gep(data(12), [bias_off])
        lanes = _target.vector_bits() // dtype.bitwidth
        vty = ir.VectorType(context.get_value_type(dtype), lanes)
        vptr = vty.as_pointer()
        align = dtype.bitwidth // 8
        fmuladd = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(vty, [vty] * 3),
            f"llvm.fmuladd.v{lanes}f{dtype.bitwidth}",
        )
        zero = ir.Constant(vty, None)
        undef = ir.Constant(vty, ir.Undefined)
        splat = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)
        fn = builder.function
        bias_bb, zero_bb, init_bb, loop, done, add_bb, store_bb, exit_bb = (
            fn.append_basic_block(f"tile.{n}")
            for n in ("bias", "zero", "init", "loop", "done", "add", "store", "exit")
        )

        # the tile's starting value: the bias row (mode 2) or zeros
        builder.cbranch(builder.icmp_signed("==", mode, i64(2)), bias_bb, zero_bb)
        builder.position_at_end(bias_bb)
        bias_v = [
            builder.load(
                builder.bitcast(builder.gep(bias_data, [i64(v * lanes)]), vptr), align=align
            )
            for v in range(nvec)
        ]
        builder.branch(init_bb)
        builder.position_at_end(zero_bb)
        builder.branch(init_bb)
        builder.position_at_end(init_bb)
        init = []
        for v in range(nvec):
            phi = builder.phi(vty)
            phi.add_incoming(bias_v[v], bias_bb)
            phi.add_incoming(zero, zero_bb)
            init.append(phi)
        builder.cbranch(builder.icmp_signed(">", k, i64(0)), loop, done)

        # --8<-- [start:tile_fma_step]
        builder.position_at_end(loop)  # one step p of the sum of outer products
        p = builder.phi(i64)
        tile = [[builder.phi(vty) for _ in range(nvec)] for _ in range(rows)]
        b_row = builder.gep(b_data, [builder.mul(p, b_sp)])
        b = [
            builder.load(builder.bitcast(builder.gep(b_row, [i64(v * lanes)]), vptr), align=align)
            for v in range(nvec)
        ]
        a_col = builder.mul(p, a_sp)
        new = []
        for i in range(rows):
            a = builder.load(builder.gep(a_data, [builder.add(a_col, builder.mul(i64(i), a_si))]))
            a = builder.shuffle_vector(
                builder.insert_element(undef, a, ir.IntType(32)(0)), undef, splat
            )
            new.append([builder.call(fmuladd, [a, b[v], tile[i][v]]) for v in range(nvec)])
        p_next = builder.add(p, i64(1))
        end = builder.basic_block
        p.add_incoming(i64(0), init_bb)
        p.add_incoming(p_next, end)
        for i in range(rows):
            for v in range(nvec):
                tile[i][v].add_incoming(init[v], init_bb)
                tile[i][v].add_incoming(new[i][v], end)
        builder.cbranch(builder.icmp_signed("<", p_next, k), loop, done)
        # --8<-- [end:tile_fma_step]

        builder.position_at_end(done)  # the tile, written out once
        final = []
        for i in range(rows):
            for v in range(nvec):
                f = builder.phi(vty)
                f.add_incoming(init[v], init_bb)
                f.add_incoming(new[i][v], end)
                final.append((i, v, f))
        builder.cbranch(builder.icmp_signed("==", mode, i64(0)), add_bb, store_bb)
        for bb, add in ((add_bb, True), (store_bb, False)):
            builder.position_at_end(bb)
            for i, v, f in final:
                at = builder.gep(o_data, [builder.add(builder.mul(i64(i), o_si), i64(v * lanes))])
                at = builder.bitcast(at, vptr)
                builder.store(
                    builder.fadd(builder.load(at, align=align), f) if add else f, at, align=align
                )
            builder.branch(exit_bb)
        builder.position_at_end(exit_bb)
        return context.get_dummy_value()

    return codegen


tile_fma = make_tile_fma(MR, 2)  # the micro-kernel's MR x NR tile
# --8<-- [end:tile_fma]


# --8<-- [start:pack]
@njit(cache=True)
def pack_a(A, Ap):
    """Copy A (m, kc), m <= MR * Ap.shape[0], into MR-row panels Ap (m_panels, kc, MR).

    Rows past m are filled with zeros.
    """
    m, kc = A.shape
    for ip in range(Ap.shape[0]):
        for p in range(kc):
            for i in range(MR):
                r = ip * MR + i
                Ap[ip, p, i] = A[r, p] if r < m else 0


@njit(cache=True)
def pack_b_panel(B, jp, Bp_j):
    """Copy columns jp*NR .. jp*NR+NR of B (kc, n) into one panel Bp_j (kc, NR).

    Columns past n are filled with zeros.
    """
    kc, n = B.shape
    nr = tile_nr(B.dtype)
    j0 = jp * nr
    w = min(nr, n - j0)
    for p in range(kc):
        b_p = B[p, j0 : j0 + w]
        for j in range(w):
            Bp_j[p, j] = b_p[j]
        for j in range(w, nr):
            Bp_j[p, j] = 0


# --8<-- [end:pack]


# --8<-- [start:micro_kernel]
@njit(cache=True, fastmath=FASTMATH)
def micro_kernel(Ap_i, Bp_j, C, i0, j0):
    """C[i0:i0+MR, j0:j0+NR] += Ap_i.T @ Bp_j for panels Ap_i (kc, MR), Bp_j (kc, NR).

    The MR x NR accumulators live in registers for the whole loop over p
    (:func:`tile_fma`): each step loads one row of the B panel (NR values = 2
    vector registers), broadcasts each of the MR values of the A panel's row, and
    does MR * NR multiply-adds (2 * MR vector FMAs). That is 2 * MR * NR FLOPs per
    (MR + NR) loaded values, all from L1. Only the write-back into C is clipped at
    C's edges.
    """
    NR = tile_nr(Ap_i.dtype)  # float32: 16 on AVX2, 32 on AVX-512; float64: half
    mr, nr = min(MR, C.shape[0] - i0), min(NR, C.shape[1] - j0)
    for i in range(mr):  # start fetching the C tile now, use it at the end
        _prefetch(C, i0 + i, j0)
    kc = Ap_i.shape[0]
    ldc = C.strides[0] // C.itemsize
    no_bias = C[0, :0]
    if mr == MR and nr == NR and C.strides[1] == C.itemsize:  # a full tile: added into C
        tile_fma(Ap_i, 0, 1, MR, Bp_j, 0, NR, kc, C, i0 * ldc + j0, ldc, 0, no_bias, 0)
        return
    tile = _register_tile(Ap_i.dtype)  # C's edge: the tile on the stack, then clipped
    tile_fma(Ap_i, 0, 1, MR, Bp_j, 0, NR, kc, tile, 0, NR, 1, no_bias, 0)
    acc = carray(tile, (MR, NR))
    for i in range(mr):
        for j in range(nr):
            C[i0 + i, j0 + j] += acc[i, j]


# --8<-- [end:micro_kernel]


# --8<-- [start:micro_kernel_loops]
@njit(cache=True, fastmath=FASTMATH)
def micro_kernel_loops(Ap_i, Bp_j, C, i0, j0):
    """The micro-kernel as three plain loops, leaving the vectors to LLVM (section 2.3).

    Same arguments and result as :func:`micro_kernel`. Whether the MR x NR
    accumulators end up in vector registers depends on LLVM's vectorizers and on the
    target: on AVX2 the SLP vectorizer turns the unrolled tile into 12 ``ymm``
    registers; on AVX-512 CPUs the loop vectorizer gets there first, vectorizes the
    loop over i with gathers and scatters into a tile in memory, and the kernel runs
    at a few GFLOP/s. ``python -m sitp.bench microkernel`` compares the two.
    """
    NR = tile_nr(Ap_i.dtype)
    mr, nr = min(MR, C.shape[0] - i0), min(NR, C.shape[1] - j0)
    acc = carray(_register_tile(Ap_i.dtype), (MR, NR))
    for i in range(MR):
        for j in range(NR):
            acc[i, j] = 0
    for p in range(Ap_i.shape[0]):
        for i in range(MR):
            a = Ap_i[p, i]
            for j in range(NR):
                acc[i, j] += a * Bp_j[p, j]
    for i in range(mr):
        for j in range(nr):
            C[i0 + i, j0 + j] += acc[i, j]


# --8<-- [end:micro_kernel_loops]


# --8<-- [start:gemm_packed]
@njit(cache=True)
def gemm_packed(A, B, C):
    """C += A @ B with packed panels and the MR x NR micro-kernel, one thread.

    Loops, outer to inner: pc over KC-slabs of K; pack B's slab; ic over MC-row
    blocks of A, packed; jp over B panels (one stays in L1); ip over A panels
    (the packed block stays in L2); micro-kernel.
    """
    M, K = A.shape
    N = B.shape[1]
    NR = tile_nr(A.dtype)
    n_bp = (N + NR - 1) // NR
    for pc in range(0, K, KC):
        kc = min(KC, K - pc)
        Bp = np.empty((n_bp, kc, NR), A.dtype)
        for jp in range(n_bp):
            pack_b_panel(B[pc : pc + kc], jp, Bp[jp])
        for ic in range(0, M, MC):
            m = min(MC, M - ic)
            Ap = np.empty(((m + MR - 1) // MR, kc, MR), A.dtype)
            pack_a(A[ic : ic + m, pc : pc + kc], Ap)
            for jp in range(n_bp):
                for ip in range(Ap.shape[0]):
                    i0 = ic + ip * MR
                    j0 = jp * NR
                    micro_kernel(Ap[ip], Bp[jp], C, i0, j0)


# --8<-- [end:gemm_packed]


@njit(cache=True)
def fill_rows(C, v):
    """C[i, :] = v for every row: the starting value of C += A @ B when a bias is added."""
    for i in range(C.shape[0]):
        c_i = C[i]
        for j in range(C.shape[1]):
            c_i[j] = v[j]


# --8<-- [start:stored]
def stored(X):
    """(array, transposed): X itself if C-contiguous, else X.T when that is.

    A transposed matrix (a weight ``W.T``, a gradient ``g.T``) is a C-contiguous
    array read the other way round. BLAS's answer, the ``transa``/``transb``
    flags, is to pass the stored array and a flag, and let packing read it
    either way: packing touches every entry once anyway, so a transposed
    operand costs nothing. Anything else (a slice with steps) is copied.
    """
    if X.flags.c_contiguous:
        return X, False
    if X.flags.f_contiguous:
        return X.T, True
    return np.ascontiguousarray(X), False


# --8<-- [end:stored]


def gemm_parallel(A, B, C):
    """C += A @ B on all of numba's threads (``numba.set_num_threads``).

    A and B may be transposed views (see :func:`stored`); C is C-contiguous.
    """
    (As, ta), (Bs, tb) = stored(A), stored(B)
    _gemm_parallel(As, ta, Bs, tb, C, numba.get_num_threads())


# --8<-- [start:gemm_parallel]
@njit(cache=True, parallel=True)
def _gemm_parallel(A_stored, ta, B_stored, tb, C, n_threads):
    """C += A @ B: gemm_packed with n_threads threads over blocks of C.

    A is ``A_stored.T`` when ``ta`` is set, else ``A_stored`` (B likewise): the
    packing loops read either through strides, and everything after packing is
    the same.

    Two parallel loops, so the threads meet only twice per call. First all of B
    is packed, every KC-slab at once, the (slab, panel) pairs shared among the
    threads. Then C is cut into a grid of (row block, column block) pieces, a
    multiple of the thread count, with the MR-row panels of A shared out evenly
    among the row blocks so that no thread waits for another at the end. Each
    thread walks its piece through all the slabs, packing its own rows of A for
    each. Threads write disjoint parts of C, so no locks are needed.
    """
    A = A_stored.T if ta else A_stored
    B = B_stored.T if tb else B_stored
    M, K = A.shape
    N = B.shape[1]
    NR = tile_nr(A.dtype)
    n_bp = (N + NR - 1) // NR  # NR-column panels of B
    n_ap = (M + MR - 1) // MR  # MR-row panels of A
    n_pc = (K + KC - 1) // KC  # KC-slabs of K
    # row blocks: about MC rows each, their count a multiple of n_threads
    n_ib = (M + MC - 1) // MC
    n_ib = min(n_ap, (n_ib + n_threads - 1) // n_threads * n_threads)
    # column blocks: split N too when there are fewer row blocks than threads
    n_jb = min(n_bp, max(1, n_threads // n_ib))
    pb = (n_bp + n_jb - 1) // n_jb  # B panels per column block
    Bp = np.empty((n_pc, n_bp, KC, NR), A.dtype)
    for q in prange(n_pc * n_bp):
        pc, jp = q // n_bp, q % n_bp
        kc = min(KC, K - pc * KC)
        pack_b_panel(B[pc * KC : pc * KC + kc], jp, Bp[pc, jp, :kc])
    for t in prange(n_ib * n_jb):
        ib, jb = t // n_jb, t % n_jb
        ic = (ib * n_ap // n_ib) * MR  # rows ic .. ic + m of A and C
        m = min(M, ((ib + 1) * n_ap // n_ib) * MR) - ic
        for pc in range(n_pc):
            kc = min(KC, K - pc * KC)
            Ap = np.empty(((m + MR - 1) // MR, kc, MR), A.dtype)
            pack_a(A[ic : ic + m, pc * KC : pc * KC + kc], Ap)
            for jp in range(jb * pb, min(n_bp, (jb + 1) * pb)):
                for ip in range(Ap.shape[0]):
                    micro_kernel(Ap[ip], Bp[pc, jp, :kc], C, ic + ip * MR, jp * NR)


# --8<-- [end:gemm_parallel]
