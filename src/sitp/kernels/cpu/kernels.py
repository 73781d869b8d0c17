"""Maps, zips and reductions as numba kernels on strided storage (chapter 2.2).

Every kernel here works on *flat storage* plus positions computed from
strides, so the same kernel serves a contiguous tensor, a transpose, a slice
with steps, or a broadcast (stride 0) operand. The pattern is always:

1. In Python, view each operand with the output's shape (broadcasting gives
   stride 0), and merge adjacent dimensions that are contiguous in all
   operands, so that the last dimension (a *row*) is as long as possible.
2. :func:`row_starts` computes where each row begins in each operand's
   storage (an "odometer" over the leading dimensions; it lives in
   ``sitp/kernels/layout.py`` with the other layout helpers both backends share).
3. The kernel walks the rows, and inside a row steps by the last stride.

Which scalar function a kernel applies is an integer op code, dispatched by
``if``/``elif`` in a small inlined function (written once, in ``sitp/kernels/scalar.py``,
for both backends); one compiled kernel per dtype
signature serves every op, and all of them are cached on disk
(``cache=True``) so a second Python session starts fast.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from sitp.kernels import scalar
from sitp.kernels.cpu.vecmath import exp_f32_rounded, tanh_f32
from sitp.kernels.layout import index_table, positions, row_starts  # noqa: F401 (used by the launchers)
from sitp.kernels.scalar import BINARY, COMPARE, REDUCE, UNARY, ReduceOp  # noqa: F401 (the op codes)

# The codes of the four zips with loops of their own (zip_fast_kernel), as plain ints:
# numba compiles a global int as a constant.
_ADD, _SUB, _MUL, _DIV = BINARY["add"], BINARY["sub"], BINARY["mul"], BINARY["div"]
_TANH_B, _SIGMOID_B = BINARY["tanh_backward"], BINARY["sigmoid_backward"]
_EQ, _NE, _LT, _LE, _GT, _GE = (COMPARE[k] for k in ("eq", "ne", "lt", "le", "gt", "ge"))
assert (_EQ, _NE, _LT, _LE, _GT, _GE) == tuple(range(6))  # compare_kernel tests op <= _GE
_NEG, _ABS, _RELU, _SQUARE, _POW = (UNARY[k] for k in ("neg", "abs", "relu", "square", "pow"))
_TANH = UNARY["tanh"]

# The scalar functions of sitp/kernels/scalar.py, compiled for the CPU and inlined into
# the kernels below (the CUDA backend compiles the same functions for the GPU).
unary = njit(cache=True, inline="always")(scalar.unary)
binary = njit(cache=True, inline="always")(scalar.binary)
compare = njit(cache=True, inline="always")(scalar.compare)
_softmax_backward_row = njit(cache=True, inline="always")(scalar.softmax_backward_row)


# --8<-- [start:map_kernel]
@njit(cache=True)
def map_kernel(op, p0, p1, x, x_starts, x_step, n, out):
    """out[r, j] = f(x[r, j]) for each row r of length n; ``out`` is contiguous."""
    for r in range(x_starts.size):
        xs = x_starts[r]
        o = out[r * n : (r + 1) * n]
        if x_step == 1:  # a slice: no per-load check for negative indices
            xv = x[xs : xs + n]
            for j in range(n):
                o[j] = unary(op, xv[j], p0, p1)
        else:
            for j in range(n):
                o[j] = unary(op, x[xs + j * x_step], p0, p1)


# --8<-- [end:map_kernel]


# The same for maps: the unary ops that are a sign, a comparison or products get loops
# with the op a constant, which LLVM vectorises; the others call the C library for each
# entry (exp, log, sin) and would gain nothing from it.
@njit(cache=True, inline="always")
def _map_v(op, p0, p1, x, o):
    for j in range(o.size):
        o[j] = unary(op, x[j], p0, p1)


@njit(cache=True)
def map_fast_kernel(op, p0, p1, x, x_starts, x_step, n, out):
    """``map_kernel`` with vectorisable rows for neg, abs, relu, square and pow."""
    for r in range(x_starts.size):
        xs = x_starts[r]
        o = out[r * n : (r + 1) * n]
        if x_step == 1:
            xv = x[xs : xs + n]
            if op == _NEG:
                _map_v(_NEG, p0, p1, xv, o)
            elif op == _ABS:
                _map_v(_ABS, p0, p1, xv, o)
            elif op == _RELU:
                _map_v(_RELU, p0, p1, xv, o)
            elif op == _SQUARE:
                _map_v(_SQUARE, p0, p1, xv, o)
            elif op == _POW:
                _map_v(_POW, p0, p1, xv, o)
            else:
                _map_v(op, p0, p1, xv, o)
        else:
            for j in range(n):
                o[j] = unary(op, x[xs + j * x_step], p0, p1)


@njit(cache=True, error_model="numpy")
def f32_via_f64_kernel(op, x, x_starts, x_step, n, out):
    """``map_kernel`` for float32 ``tanh`` and ``exp``: :func:`~sitp.kernels.cpu.vecmath.tanh_f32`
    and ``exp_f32_rounded`` (computed in float64 and rounded once, the same bits on every
    CPU, and vectorised) in place of the C library's ``tanhf`` and ``expf``. Numpy's
    error model lets tanh's division vectorise: Python's would test every divisor."""
    for r in range(x_starts.size):
        xs = x_starts[r]
        o = out[r * n : (r + 1) * n]
        if x_step == 1:
            xv = x[xs : xs + n]
            if op == _TANH:
                for j in range(n):
                    o[j] = tanh_f32(xv[j])
            else:
                for j in range(n):
                    o[j] = exp_f32_rounded(xv[j])
        elif op == _TANH:
            for j in range(n):
                o[j] = tanh_f32(x[xs + j * x_step])
        else:
            for j in range(n):
                o[j] = exp_f32_rounded(x[xs + j * x_step])


# One contiguous row (x and out of one size), the launcher's lane for a contiguous
# operand: the kernels above with three arguments fewer (no row starts, step or length),
# which is a good part of a small op's launch cost. map_row_kernel calls map_fast_kernel's
# machine code: a kernel of its own with the unary switch inlined took as long to compile
# as map_fast_kernel (about 20 s a dtype on the 2-vCPU Xeon), twice over on a fresh cache.
@njit(cache=True)
def map_row_kernel(op, p0, p1, x, out):
    """``map_fast_kernel`` on one contiguous row: out[j] = f(x[j])."""
    map_fast_kernel(op, p0, p1, x, np.zeros(1, np.int64), np.int64(1), out.size, out)


@njit(cache=True, error_model="numpy")
def f32_via_f64_row_kernel(op, x, out):
    """``f32_via_f64_kernel`` on one contiguous row (float32 ``tanh`` or ``exp``)."""
    if op == _TANH:
        for j in range(out.size):
            out[j] = tanh_f32(x[j])
    else:
        for j in range(out.size):
            out[j] = exp_f32_rounded(x[j])


# --8<-- [start:zip_kernel]
@njit(cache=True)
def zip_kernel(op, a, a_starts, a_step, b, b_starts, b_step, n, out):
    """out[r, j] = f(a[r, j], b[r, j]); a broadcast operand has step 0."""
    for r in range(a_starts.size):
        as_ = a_starts[r]
        bs = b_starts[r]
        o = r * n
        for j in range(n):
            out[o + j] = binary(op, a[as_ + j * a_step], b[bs + j * b_step])


# --8<-- [end:zip_kernel]


# --8<-- [start:zip_fast]
# The hot ops get loops of their own: with the op code a compile-time constant
# and each row read through a slice (an index numba knows is never negative),
# LLVM drops the dispatch and the index checks and vectorises the loop.
@njit(cache=True, inline="always")
def _zip_vv(op, a, b, o):
    for j in range(o.size):
        o[j] = binary(op, a[j], b[j])


@njit(cache=True, inline="always")
def _zip_vs(op, a, b, o):
    for j in range(o.size):
        o[j] = binary(op, a[j], b)


@njit(cache=True)
def zip_fast_kernel(op, a, a_starts, a_step, b, b_starts, b_step, n, out):
    """``zip_kernel`` with vectorisable rows when ``a`` has step 1 and ``b`` step 1 or 0."""
    fast = a_step == 1 and b_step <= 1 and (op == _ADD or op == _SUB or op == _MUL or op == _DIV)
    for r in range(a_starts.size):
        as_ = a_starts[r]
        bs = b_starts[r]
        o = out[r * n : (r + 1) * n]
        if fast and b_step == 1:
            av, bv = a[as_ : as_ + n], b[bs : bs + n]
            if op == _ADD:
                _zip_vv(_ADD, av, bv, o)
            elif op == _SUB:
                _zip_vv(_SUB, av, bv, o)
            elif op == _MUL:
                _zip_vv(_MUL, av, bv, o)
            else:  # _DIV, the last of the four that make a row fast
                _zip_vv(_DIV, av, bv, o)
        elif fast:
            av, bv = a[as_ : as_ + n], b[bs]
            if op == _ADD:
                _zip_vs(_ADD, av, bv, o)
            elif op == _SUB:
                _zip_vs(_SUB, av, bv, o)
            elif op == _MUL:
                _zip_vs(_MUL, av, bv, o)
            else:  # _DIV, the last of the four that make a row fast
                _zip_vs(_DIV, av, bv, o)
        else:
            for j in range(n):
                o[j] = binary(op, a[as_ + j * a_step], b[bs + j * b_step])


# --8<-- [end:zip_fast]


@njit(cache=True)
def grad_from_output_kernel(op, y, g, out):
    """out = the gradient of tanh (``op`` tanh_backward) or sigmoid (sigmoid_backward)
    from their output ``y`` and the incoming gradient ``g``, all three contiguous rows of
    one length: ``zip_fast_kernel``'s vectorised loop, in a kernel of its own so that
    only the float dtypes that use it compile it."""
    if op == _TANH_B:
        _zip_vv(_TANH_B, y, g, out)
    else:
        _zip_vv(_SIGMOID_B, y, g, out)


@njit(cache=True, parallel=True)
def zip_fast_parallel(op, a, a_starts, a_step, b, b_starts, b_step, n, out, n_chunks):
    """zip_fast_kernel on n_chunks threads: bands of rows, or, with fewer rows than
    chunks (a contiguous sum collapses to one long row), bands of every row's columns."""
    rows = a_starts.size
    if rows >= n_chunks:
        for c in prange(n_chunks):
            r0, r1 = c * rows // n_chunks, (c + 1) * rows // n_chunks
            zip_fast_kernel(
                op, a, a_starts[r0:r1], a_step, b, b_starts[r0:r1], b_step, n, out[r0 * n : r1 * n]
            )
    else:
        for c in prange(n_chunks):
            j0, j1 = c * n // n_chunks, (c + 1) * n // n_chunks
            for r in range(rows):
                zip_fast_kernel(
                    op,
                    a,
                    a_starts[r : r + 1] + j0 * a_step,
                    a_step,
                    b,
                    b_starts[r : r + 1] + j0 * b_step,
                    b_step,
                    j1 - j0,
                    out[r * n + j0 : r * n + j1],
                )


# Comparisons and selects get the same treatment as the hot zips: a row read through
# slices, and for a comparison its op a compile-time constant, so that the loop is
# vectorised (a select, not a branch the CPU mispredicts on a random mask).
@njit(cache=True, inline="always")
def _compare_vv(op, a, b, o):
    for j in range(o.size):
        o[j] = compare(op, a[j], b[j])


@njit(cache=True, inline="always")
def _compare_vs(op, a, b, o):
    for j in range(o.size):
        o[j] = compare(op, a[j], b)


@njit(cache=True)
def compare_kernel(op, a, a_starts, a_step, b, b_starts, b_step, n, out):
    """out[r, j] = a[r, j] <op> b[r, j], a bool result; rows with ``a`` at step 1 and
    ``b`` at step 1 or 0 run a loop of their own for each of the six comparisons."""
    fast = a_step == 1 and b_step <= 1 and op <= _GE
    for r in range(a_starts.size):
        as_ = a_starts[r]
        bs = b_starts[r]
        o = out[r * n : (r + 1) * n]
        if fast and b_step == 1:
            av, bv = a[as_ : as_ + n], b[bs : bs + n]
            if op == _EQ:
                _compare_vv(_EQ, av, bv, o)
            elif op == _NE:
                _compare_vv(_NE, av, bv, o)
            elif op == _LT:
                _compare_vv(_LT, av, bv, o)
            elif op == _LE:
                _compare_vv(_LE, av, bv, o)
            elif op == _GT:
                _compare_vv(_GT, av, bv, o)
            else:  # _GE, the last of the six
                _compare_vv(_GE, av, bv, o)
        elif fast:
            av, y = a[as_ : as_ + n], b[bs]
            if op == _EQ:
                _compare_vs(_EQ, av, y, o)
            elif op == _NE:
                _compare_vs(_NE, av, y, o)
            elif op == _LT:
                _compare_vs(_LT, av, y, o)
            elif op == _LE:
                _compare_vs(_LE, av, y, o)
            elif op == _GT:
                _compare_vs(_GT, av, y, o)
            else:  # _GE, the last of the six
                _compare_vs(_GE, av, y, o)
        else:
            for j in range(n):
                o[j] = compare(op, a[as_ + j * a_step], b[bs + j * b_step])


@njit(cache=True, inline="always")
def _select(c, a, b, o, a_one, b_one):
    """o[j] = a[j] if c[j] else b[j]; an operand flagged ``_one`` is its first entry.

    Both entries are loaded before the choice. Written ``a[j] if c[j] else b[j]``, each
    load is conditional, and LLVM vectorises that only with masked loads, which its
    cost model for AMD's Zen 3 rejects: the loop stayed scalar there, with a branch the
    CPU mispredicts on a random mask (3.8 ns an entry against 0.18 as a blend).
    """
    if a_one and b_one:
        x, y = a[0], b[0]
        for j in range(o.size):
            o[j] = x if c[j] else y
    elif a_one:
        x = a[0]
        for j in range(o.size):
            y = b[j]
            o[j] = x if c[j] else y
    elif b_one:
        y = b[0]
        for j in range(o.size):
            x = a[j]
            o[j] = x if c[j] else y
    else:
        for j in range(o.size):
            x = a[j]
            y = b[j]
            o[j] = x if c[j] else y


@njit(cache=True)
def where_kernel(c, c_starts, c_step, a, a_starts, a_step, b, b_starts, b_step, n, out):
    """out = a where c else b, all three broadcast to out's shape; rows with ``c`` at
    step 1 and ``a``, ``b`` at step 1 or 0 (``masked_fill``'s value) run as selects."""
    fast = c_step == 1 and a_step <= 1 and b_step <= 1
    for r in range(c_starts.size):
        cs = c_starts[r]
        as_ = a_starts[r]
        bs = b_starts[r]
        o = out[r * n : (r + 1) * n]
        if fast:
            _select(
                c[cs : cs + n], a[as_ : as_ + n * a_step + 1 - a_step],
                b[bs : bs + n * b_step + 1 - b_step], o, a_step == 0, b_step == 0,
            )  # fmt: skip
        else:
            for j in range(n):
                o[j] = a[as_ + j * a_step] if c[cs + j * c_step] else b[bs + j * b_step]


# --8<-- [start:assign_kernel]
@njit(cache=True)
def assign_kernel(dst, d_starts, d_step, src, s_starts, s_step, n):
    """dst[r, j] = src[r, j] between two strided views (a copy or a cast)."""
    for r in range(d_starts.size):
        ds = d_starts[r]
        ss = s_starts[r]
        for j in range(n):
            dst[ds + j * d_step] = src[ss + j * s_step]


# --8<-- [end:assign_kernel]


@njit(cache=True)
def assign4_range(dst, d_off, d0, d1, d2, d3, src, s_off, s0, s1, s2, s3, n1, n2, n3, lo, hi):
    """dst[i, j, k, l] = src[i, j, k, l] for the (i, j) pairs lo..hi-1 of a view of at most
    four (collapsed) dims, (i, j) = divmod(pair, n1).

    Nested loops step both positions by the strides directly: no table of row starts,
    which for a transpose with short rows costs as much as the copy. When both last
    strides are 1 (rows contiguous in both, the usual case), the innermost loop runs on
    two slices, which LLVM turns into vector loads and stores.
    """
    unit = d3 == 1 and s3 == 1
    for ij in range(lo, hi):
        i, j = ij // n1, ij % n1
        dp = d_off + i * d0 + j * d1
        sp = s_off + i * s0 + j * s1
        for k in range(n2):
            if unit:
                dv = dst[dp + k * d2 : dp + k * d2 + n3]
                sv = src[sp + k * s2 : sp + k * s2 + n3]
                for m in range(n3):
                    dv[m] = sv[m]
            else:
                for m in range(n3):
                    dst[dp + k * d2 + m * d3] = src[sp + k * s2 + m * s3]


@njit(cache=True)
def assign4_kernel(dst, d_off, d0, d1, d2, d3, src, s_off, s0, s1, s2, s3, n0, n1, n2, n3):
    """dst[i, j, k, l] = src[i, j, k, l] for views of at most four (collapsed) dims."""
    assign4_range(dst, d_off, d0, d1, d2, d3, src, s_off, s0, s1, s2, s3, n1, n2, n3, 0, n0 * n1)


@njit(cache=True, parallel=True)
def assign4_parallel(
    dst, d_off, d0, d1, d2, d3, src, s_off, s0, s1, s2, s3, n0, n1, n2, n3, n_chunks
):
    """assign4_kernel with the (i, j) pairs cut into ``n_chunks`` ranges, one per thread
    (the views must not overlap: each entry of dst is written once)."""
    n = n0 * n1
    for c in prange(n_chunks):
        assign4_range(
            dst,
            d_off,
            d0,
            d1,
            d2,
            d3,
            src,
            s_off,
            s0,
            s1,
            s2,
            s3,
            n1,
            n2,
            n3,
            c * n // n_chunks,
            (c + 1) * n // n_chunks,
        )


# --8<-- [start:reduce_kernel]
@njit(cache=True)
def reduce_kernel(op, x, x_starts, x_step, n, zero, out):
    """out[r] = reduce(x[r, 0..n)); ``zero`` fixes the accumulator's type.

    Sums of float32 accumulate in float64 (pass ``zero=np.float64(0)``), so a
    long row does not lose the small terms.
    """
    for r in range(x_starts.size):
        xs = x_starts[r]
        acc = zero
        if op == ReduceOp.sum:
            for j in range(n):
                acc += x[xs + j * x_step]
        elif op == ReduceOp.prod:
            acc = zero + 1
            for j in range(n):
                acc *= x[xs + j * x_step]
        elif op == ReduceOp.max or op == ReduceOp.min:
            acc = zero + x[xs]
            for j in range(1, n):
                v = x[xs + j * x_step]
                if v != v or (op == ReduceOp.max and v > acc) or (op == ReduceOp.min and v < acc):
                    acc = zero + v
                    if v != v:
                        break
        elif op == ReduceOp.any:
            for j in range(n):
                if x[xs + j * x_step] != 0:
                    acc = zero + 1
                    break
        elif op == ReduceOp.all:
            acc = zero + 1
            for j in range(n):
                if x[xs + j * x_step] == 0:
                    acc = zero
                    break
        out[r] = acc


# --8<-- [end:reduce_kernel]


@njit(cache=True)
def argreduce_kernel(is_max, x, x_starts, x_step, n, values, indices):
    """values[r], indices[r] = max (or min) of row r and its first position.

    A NaN wins over any number, as in PyTorch.
    """
    for r in range(x_starts.size):
        xs = x_starts[r]
        best = x[xs]
        arg = 0
        if best == best:
            for j in range(1, n):
                v = x[xs + j * x_step]
                if v != v:
                    best = v
                    arg = j
                    break
                if (is_max and v > best) or (not is_max and v < best):
                    best = v
                    arg = j
        values[r] = best
        indices[r] = arg


@njit(cache=True, inline="always")
def _ranks_before(v, e, largest):
    """Whether entry ``v``, met after ``e`` in its row, goes before it in a top-k order:
    larger (``largest``) or smaller; a NaN counts as the largest of all, as in torch; a
    tie keeps the row's order."""
    if largest:
        return v > e or (v != v and e == e)
    return v < e or (e != e and v == v)


@njit(cache=True)
def topk_kernel(x, x_starts, x_step, n, k, largest, out):
    """out[r*k : r*k + k] = the positions in row r of its k largest (``largest``) or
    smallest entries, in that order, a tie in the row's order.

    A small k keeps a sorted window of k positions and inserts into it the entries that
    beat its last one (one comparison for most entries); a large k sorts the row with a
    stable merge sort (ascending, NaN last; for the largest, the reversed row's order read
    backwards).
    """
    row = np.empty(n, x.dtype)
    buf = np.empty(k, np.int64)
    for r in range(x_starts.size):
        xs = x_starts[r]
        if k > 64:
            if largest:
                for j in range(n):
                    row[j] = x[xs + (n - 1 - j) * x_step]
                order = np.argsort(row, kind="mergesort")
                for i in range(k):
                    out[r * k + i] = n - 1 - order[n - 1 - i]
            else:
                for j in range(n):
                    row[j] = x[xs + j * x_step]
                order = np.argsort(row, kind="mergesort")
                for i in range(k):
                    out[r * k + i] = order[i]
            continue
        for j in range(n):
            row[j] = x[xs + j * x_step]
        m = 0
        for j in range(n):
            v = row[j]
            if m == k and not _ranks_before(v, row[buf[k - 1]], largest):
                continue
            p = m if m < k else k - 1  # a full window drops its last position
            while p > 0 and _ranks_before(v, row[buf[p - 1]], largest):
                buf[p] = buf[p - 1]
                p -= 1
            buf[p] = j
            if m < k:
                m += 1
        for i in range(k):
            out[r * k + i] = buf[i]


# --8<-- [start:softmax_kernel]
@njit(cache=True, error_model="numpy")  # 0/0 is NaN (a fully masked row), not an exception
def softmax_kernel(x, x_starts, x_step, n, log, out):
    """Row-wise (log-)softmax, stable: subtract the row max before exp.

    softmax(x)_j = exp(x_j - m) / sum_k exp(x_k - m), with m = max_k x_k. Each
    exponential is computed once: the row's are kept in ``e`` (in the cache, not
    written to the output) for the division.
    """
    e = np.empty(n, np.float64)
    for r in range(x_starts.size):
        xs = x_starts[r]
        o = r * n
        m = -np.inf
        for j in range(n):
            v = x[xs + j * x_step]
            if v > m or v != v:
                m = v
        if m == -np.inf:  # a fully masked row: exp(-inf - (-inf)) would be NaN
            m = 0.0
        total = 0.0
        for j in range(n):
            e[j] = math.exp(x[xs + j * x_step] - m)
            total += e[j]
        if log:  # (x - m) - log(total), not x - (m + log(total)): m + log(total) rounds to m for |m| >~ 1e8
            ls = math.log(total)
            for j in range(n):
                out[o + j] = (x[xs + j * x_step] - m) - ls
        else:
            for j in range(n):
                out[o + j] = e[j] / total


# --8<-- [end:softmax_kernel]


@njit(cache=True)
def softmax_backward_kernel(y, g, n_rows, n, log, out):
    """Gradient of row-wise (log-)softmax from its output y and upstream g.

    softmax:     dx = y * (g - sum(g * y))
    log_softmax: dx = g - exp(y) * sum(g)
    All arrays are contiguous (n_rows, n).
    """
    for r in range(n_rows):
        _softmax_backward_row(y, g, r * n, n, log, out)


# --8<-- [start:take_kernel]
@njit(cache=True)
def take_kernel(x, pre, table, post, out):
    """out[p, n, q] = x[pre[p] + table[n] + post[q]] — a gather."""
    o = 0
    for p in range(pre.size):
        for t in range(table.size):
            base = pre[p] + table[t]
            for q in range(post.size):
                out[o] = x[base + post[q]]
                o += 1


@njit(cache=True)
def put_kernel(x, pre, table, post, values, accumulate):
    """x[pre[p] + table[n] + post[q]] (+)= values[p, n, q] — a scatter.

    With ``accumulate`` repeated indices add up (the backward of a gather).
    """
    o = 0
    for p in range(pre.size):
        for t in range(table.size):
            base = pre[p] + table[t]
            for q in range(post.size):
                if accumulate:
                    x[base + post[q]] += values[o]
                else:
                    x[base + post[q]] = values[o]
                o += 1


# --8<-- [end:take_kernel]


@njit(cache=True)
def gather_positions(base, index, stride, size, out):
    """out[n] = base[n] + index[n] * stride, checking 0 <= index < size.

    Returns -1, or the position of the first out-of-range index. Negative
    indices are out of range, as in ``torch.gather`` (they do not count from the end).
    """
    for n in range(base.size):
        i = index[n]
        if i < 0 or i >= size:
            return n
        out[n] = base[n] + i * stride
    return -1


@njit(cache=True)
def gather_kernel(x, pos, out):
    """out[n] = x[pos[n]]."""
    for n in range(pos.size):
        out[n] = x[pos[n]]


@njit(cache=True)
def scatter_add_kernel(x, pos, values):
    """x[pos[n]] += values[n]; repeated positions accumulate."""
    for n in range(pos.size):
        x[pos[n]] += values[n]


@njit(cache=True)
def tri_kernel(x, rows, cols, diagonal, upper, out):
    """Keep the lower (or upper) triangle of each (rows, cols) matrix.

    lower: keep entry (i, j) when j - i <= diagonal; upper: when j - i >= diagonal.
    ``x`` and ``out`` are contiguous stacks of matrices.
    """
    per = rows * cols
    for b in range(x.size // per if per > 0 else 0):
        for i in range(rows):
            for j in range(cols):
                o = b * per + i * cols + j
                keep = (j - i >= diagonal) if upper else (j - i <= diagonal)
                out[o] = x[o] if keep else x[o] * 0


@njit(cache=True)
def nonzero_kernel(x, x_starts, x_step, n, out):
    """Row-major ordinals of the nonzero entries; returns how many."""
    c = 0
    for r in range(x_starts.size):
        xs = x_starts[r]
        for j in range(n):
            if x[xs + j * x_step] != 0:
                out[c] = r * n + j
                c += 1
    return c


@njit(cache=True)
def arange_kernel(start, step, out):
    """out[i] = start + i * step."""
    for i in range(out.size):
        out[i] = start + i * step


@njit(cache=True)
def cumsum_kernel(x, x_starts, x_step, n, out):
    """Running sum along each row."""
    for r in range(x_starts.size):
        xs = x_starts[r]
        acc = x[xs] * 0
        for j in range(n):
            acc += x[xs + j * x_step]
            out[r * n + j] = acc


@njit(cache=True)
def multinomial_kernel(p, n_rows, n, u, num_samples, replacement, out):
    """Draw ``num_samples`` category indices per row of unnormalised weights.

    ``u`` holds uniform numbers in [0, 1), one per draw. Without replacement a
    drawn category's weight is set to zero before the next draw. The weights are
    checked first, and nothing is drawn unless all of them pass: the result is 0, or
    1 when an entry is negative, NaN or infinite, or 2 when a row sums to 0.
    """
    for i in range(n_rows * n):
        x = p[i]
        if not (x >= 0) or x == np.inf:  # NaN fails x >= 0
            return 1
    for r in range(n_rows):
        total = 0.0
        for j in range(n):
            total += p[r * n + j]
        if total == 0:
            return 2
    w = np.empty(n, np.float64)
    for r in range(n_rows):
        for j in range(n):
            w[j] = p[r * n + j]
        for s in range(num_samples):
            total = 0.0
            for j in range(n):
                total += w[j]
            target = u[r * num_samples + s] * total
            acc = 0.0
            pick = n - 1
            while pick > 0 and w[pick] == 0:
                pick -= 1
            for j in range(n):
                acc += w[j]
                if target < acc and w[j] > 0:
                    pick = j
                    break
            out[r * num_samples + s] = pick
            if not replacement:
                w[pick] = 0.0
    return 0
