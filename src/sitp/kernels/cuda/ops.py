"""The CUDA backend: the functions of ``sitp/kernels/interface.py``, as Numba CUDA kernels (chapter 4.3).

A tensor on the GPU keeps its storage in a flat Numba device array; every op
launches kernels on it and allocates its result on the device, so data stays
there between ops. The kernels here are the simple, general ones — one thread
per output entry (elementwise ops, copies, gathers) or per row (reductions,
softmax) — written for correctness on any strides; ``sitp.kernels.cuda`` holds the
tuned GEMM and attention kernels that chapter 4.4 and 4.6 build.

Where data does cross the bus, it is on purpose and said so:

* ``.cpu()``, ``.numpy()``, ``.item()``, ``.tolist()`` copy to the host;
* indexing with integer tensors given on the host builds and bounds-checks the
  gather plan there (index values already on the device are checked by a kernel);
* ``nonzero`` reads back its count (the size of its result depends on the data),
  and ``nonzero`` and ``multinomial`` return their (small) results on the host;
* random tensors are drawn on the host and copied (initialisation only).

Python scalars in an op (``x * 0.5``) become cached one-entry device constants,
filled by a kernel, not copied.

Like the CPU backend, this one reads an operand only through ``_storage, _shape, _strides,
_offset, dtype`` and makes results with the operand's own ``_make``; it imports neither
the CPU backend nor anything above the backends. The scalar functions of the elementwise
ops (``sitp/kernels/scalar.py``) and the layout arithmetic (``sitp/kernels/layout.py``)
are shared with the CPU backend.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from sitp.dtypes import bool_, float64, int64
from sitp.kernels import layout
from sitp.kernels import scalar as S
from sitp.kernels.cuda import gemm as G
from sitp.kernels.cuda.launch import ceil_div, simulated
from sitp.kernels.layout import (
    collapse,
    dense,
    expanded,
    inverse,
    last,
    permuted,
    reshaped,
    strides_of,
)
from sitp.strides import broadcast_shapes, broadcast_strides, contiguous_strides, numel

TPB = 128  # threads per block for the one-thread-per-entry kernels

# The scalar functions that the CPU backend compiles with njit, compiled as device functions.
_unary = cuda.jit(device=True)(S.unary)
_binary = cuda.jit(device=True)(S.binary)
_compare = cuda.jit(device=True)(S.compare)
_softmax_backward_row = cuda.jit(device=True)(S.softmax_backward_row)


def _blocks(n: int) -> int:
    return max(1, (n + TPB - 1) // TPB)


def _grid(n: int):
    """(blocks, threads per block) for one thread per entry of n: blocks of TPB threads, or
    one block of n threads when n is smaller. The simulator runs each thread in Python, so
    an op on 3 entries then costs 3 threads, not 128; a GPU does not mind either way."""
    return (_blocks(n), TPB) if n >= TPB else (1, max(n, 1))


# --8<-- [start:position]
@cuda.jit(device=True)
def _pos(i, shape, strides, offset):
    """Storage position of the i-th entry (row-major) of a strided view."""
    p = offset
    for k in range(len(shape) - 1, -1, -1):
        n = shape[k]
        p += (i % n) * strides[k]
        i //= n
    return p


@cuda.jit
def map_k(op, p0, p1, x, x_off, x_str, shape, out):
    """out[i] = f(x[i]): one thread per entry."""
    i = cuda.grid(1)
    if i < out.size:
        out[i] = _unary(op, x[_pos(i, shape, x_str, x_off)], p0, p1)


# --8<-- [end:position]


@cuda.jit
def zip_k(op, a, a_off, a_str, b, b_off, b_str, shape, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = _binary(op, a[_pos(i, shape, a_str, a_off)], b[_pos(i, shape, b_str, b_off)])


@cuda.jit
def compare_k(op, a, a_off, a_str, b, b_off, b_str, shape, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = _compare(op, a[_pos(i, shape, a_str, a_off)], b[_pos(i, shape, b_str, b_off)])


@cuda.jit
def where_k(c, c_off, c_str, a, a_off, a_str, b, b_off, b_str, shape, out):
    i = cuda.grid(1)
    if i < out.size:
        if c[_pos(i, shape, c_str, c_off)]:
            out[i] = a[_pos(i, shape, a_str, a_off)]
        else:
            out[i] = b[_pos(i, shape, b_str, b_off)]


@cuda.jit
def assign_k(dst, d_off, d_str, src, s_off, s_str, shape, n):
    i = cuda.grid(1)
    if i < n:
        dst[_pos(i, shape, d_str, d_off)] = src[_pos(i, shape, s_str, s_off)]


@cuda.jit
def fill_k(out, value):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = value


@cuda.jit
def arange_k(start, step, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = start + i * step


# --8<-- [start:reduce_rows]
@cuda.jit(device=True)
def _reduce_strided(op, x, base, step, n, zero):
    """reduce(x[base], x[base + step], ..., n entries), accumulated in zero's dtype."""
    acc = zero
    if op == S.ReduceOp.sum:
        for j in range(n):
            acc += x[base + j * step]
    elif op == S.ReduceOp.prod:
        acc = zero + 1
        for j in range(n):
            acc *= x[base + j * step]
    elif op == S.ReduceOp.max or op == S.ReduceOp.min:
        acc = zero + x[base]
        for j in range(1, n):
            v = x[base + j * step]
            if v != v or (op == S.ReduceOp.max and v > acc) or (op == S.ReduceOp.min and v < acc):
                acc = zero + v
    elif op == S.ReduceOp.any:
        for j in range(n):
            if x[base + j * step] != 0:
                acc = zero + 1
    elif op == S.ReduceOp.all:
        acc = zero + 1
        for j in range(n):
            if x[base + j * step] == 0:
                acc = zero
    return acc


@cuda.jit
def reduce_rows_k(op, x, n, zero, out):
    """out[r] = reduce(x[r*n : (r+1)*n]): one thread per row of a contiguous input."""
    r = cuda.grid(1)
    if r < out.size:
        out[r] = _reduce_strided(op, x, r * n, 1, n, zero)


@cuda.jit
def reduce_cols_k(op, x, n, zero, out):
    """out[j] = reduce(x[j], x[j + m], ..., n entries), m = out.size: the leading dims of
    a contiguous input reduced (a bias's gradient), one thread per column, the threads
    of a warp reading neighbouring entries (coalesced), with no transposed copy first."""
    j = cuda.grid(1)
    if j < out.size:
        out[j] = _reduce_strided(op, x, j, out.size, n, zero)


# --8<-- [end:reduce_rows]


@cuda.jit
def argreduce_rows_k(is_max, x, n, values, indices):
    r = cuda.grid(1)
    if r < values.size:
        base = r * n
        best = x[base]
        arg = 0
        if best == best:
            for j in range(1, n):
                v = x[base + j]
                if v != v:
                    best = v
                    arg = j
                    break
                if (is_max and v > best) or (not is_max and v < best):
                    best = v
                    arg = j
        values[r] = best
        indices[r] = arg


@cuda.jit(device=True)
def _ranks_before(v, e, largest):
    """The CPU kernel's order: ``v``, met after ``e``, goes first when larger (smaller);
    a NaN is the largest of all; a tie keeps the row's order."""
    if largest:
        return v > e or (v != v and e == e)
    return v < e or (e != e and v == v)


@cuda.jit
def topk_rows_k(x, n, k, largest, out):
    """The k largest (smallest) positions of contiguous row r, one thread per row: a sorted
    window of k positions in ``out`` itself (the CPU kernel's small-k way, and its order)."""
    r = cuda.grid(1)
    if r * k < out.size:
        base, o = r * n, r * k
        m = 0
        for j in range(n):
            v = x[base + j]
            if m == k and not _ranks_before(v, x[base + out[o + k - 1]], largest):
                continue
            p = m if m < k else k - 1
            while p > 0 and _ranks_before(v, x[base + out[o + p - 1]], largest):
                out[o + p] = out[o + p - 1]
                p -= 1
            out[o + p] = j
            if m < k:
                m += 1


@cuda.jit
def softmax_rows_k(x, n, log, out):
    """Stable (log-)softmax of each contiguous row, one thread per row."""
    r = cuda.grid(1)
    if r * n < x.size:
        base = r * n
        m = -math.inf
        for j in range(n):
            v = x[base + j]
            if v > m or v != v:
                m = v
        if m == -math.inf:
            m = 0.0
        total = 0.0
        for j in range(n):
            total += math.exp(x[base + j] - m)
        if total == 0:  # a row of -inf: NaN, as torch (and no 0/0 or log 0 in the simulator)
            total = math.nan
        ls = math.log(total)
        for j in range(n):
            if log:
                out[base + j] = (x[base + j] - m) - ls  # not x - (m + log total): rounds to m
            else:
                out[base + j] = math.exp(x[base + j] - m) / total


@cuda.jit
def softmax_backward_rows_k(y, g, n, log, out):
    r = cuda.grid(1)
    if r * n < y.size:
        _softmax_backward_row(y, g, r * n, n, log, out)


@cuda.jit
def cumsum_rows_k(x, n, out):
    r = cuda.grid(1)
    if r * n < x.size:
        acc = x[r * n] * 0
        for j in range(n):
            acc += x[r * n + j]
            out[r * n + j] = acc


# --8<-- [start:bmm_naive]
@cuda.jit
def bmm_k(A, B, C):
    """C[b] = A[b] @ B[b]: one thread per output entry (b, i, j), any dtype. Threads of a
    warp take neighbouring columns j (x, the fastest index of a block), so their loads of
    B[b, k, j] coalesce and all read one A[b, i, k]."""
    j, i, b = cuda.grid(3)
    if b < C.shape[0] and i < C.shape[1] and j < C.shape[2]:
        acc = A[b, i, 0] * 0
        for k in range(A.shape[2]):
            acc += A[b, i, k] * B[b, k, j]
        C[b, i, j] = acc


# --8<-- [end:bmm_naive]


@cuda.jit
def take_k(x, pre, table, post, out):
    """out[p, n, q] = x[pre[p] + table[n] + post[q]]."""
    i = cuda.grid(1)
    nt, nq = table.size, post.size
    if i < out.size:
        q = i % nq
        t = (i // nq) % nt
        p = i // (nq * nt)
        out[i] = x[pre[p] + table[t] + post[q]]


@cuda.jit
def put_k(x, pre, table, post, values, accumulate):
    i = cuda.grid(1)
    nt, nq = table.size, post.size
    if i < values.size:
        q = i % nq
        t = (i // nq) % nt
        p = i // (nq * nt)
        pos = pre[p] + table[t] + post[q]
        if accumulate:
            cuda.atomic.add(x, pos, values[i])
        else:
            x[pos] = values[i]


@cuda.jit
def gather_pos_k(index, i_shape, x_off, x_str, dim, size, out, bad):
    """Positions for torch.gather; an out-of-range index sets the error flag bad[0]."""
    i = cuda.grid(1)
    if i < out.size:
        v = index[i]
        if v < 0 or v >= size:
            bad[0] = 1
            v = 0
        p = x_off
        rem = i
        for k in range(len(i_shape) - 1, -1, -1):
            n = i_shape[k]
            idx = rem % n
            rem //= n
            p += (v if k == dim else idx) * x_str[k]
        out[i] = p


@cuda.jit
def gather_k(x, pos, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[pos[i]]


@cuda.jit
def scatter_add_k(x, pos, values):
    i = cuda.grid(1)
    if i < pos.size:
        cuda.atomic.add(x, pos[i], values[i])


@cuda.jit
def tri_k(x, rows, cols, diagonal, upper, out):
    o = cuda.grid(1)
    if o < out.size:
        j = o % cols
        i = (o // cols) % rows
        keep = (j - i >= diagonal) if upper else (j - i <= diagonal)
        out[o] = x[o] if keep else x[o] * 0


# ------------------------------------------------------------------ helpers
def is_device_storage(s) -> bool:
    return hasattr(s, "copy_to_host")


def _new(shape, dtype, like):
    """A new contiguous device tensor of ``shape`` (uninitialised), made by ``like._make``:
    ``like`` is an operand (the result is of its class) or, above the backends, the Tensor class."""
    shape = tuple(shape)
    return like._make(
        cuda.device_array(max(numel(shape), 0), dtype=dtype.np), shape, strides_of(shape), 0, dtype
    )


def _dense(x):
    """A device operand contiguous from offset 0: ``x`` itself, or a copy."""
    return x if x._offset == 0 and dense(x) else copy(x)


_CONSTANTS: dict = {}


def _operand(t):
    """A device tensor for an operand; a 0-d CPU tensor becomes a cached constant."""
    if is_device_storage(t._storage):
        return t
    if len(t._shape) != 0:
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, "
            f"cuda and cpu (a cpu tensor of shape {tuple(t._shape)})"
        )
    value = t._storage[t._offset].item()
    key = (t.dtype.name, value if value == value else "nan")
    c = _CONSTANTS.get(key)
    if c is None:
        if len(_CONSTANTS) > 512:
            _CONSTANTS.clear()
        c = _new((), t.dtype, t)
        fill_k[1, 1](c._storage, value)
        _CONSTANTS[key] = c
    return c


def _geom(shape, *pairs):
    """Collapsed shape and per-operand strides as tuples (kernel arguments)."""
    cshape, cstrides = collapse(shape, *[s for _, s in pairs])
    return tuple(cshape), [tuple(s) for s in cstrides]


def _b(t, shape):
    return t._strides if t._shape == shape else broadcast_strides(t._shape, t._strides, shape)


def _host_array(x):
    """The entries of host operand ``x`` as a contiguous numpy array (a copy only if strided)."""
    st, n = x._storage, numel(x._shape)
    if dense(x):
        return st[x._offset : x._offset + n]
    isz = st.itemsize
    view = np.ndarray(x._shape, st.dtype, st, x._offset * isz, tuple(s * isz for s in x._strides))
    return np.ascontiguousarray(view).reshape(-1)  # numpy as a buffer: a strided copy


def to_device(x):
    """A copy of a CPU tensor on the GPU (contiguous)."""
    shape = tuple(x._shape)
    return x._make(cuda.to_device(_host_array(x)), shape, strides_of(shape), 0, x.dtype)


def to_host(x):
    """A copy of a GPU tensor on the CPU (contiguous)."""
    check_errors()
    shape, n = tuple(x._shape), numel(x._shape)
    host = _dense(x)._storage.copy_to_host()[:n] if n else np.empty(0, x.dtype.np)
    return x._make(host, shape, strides_of(shape), 0, x.dtype)


# ------------------------------------------------------------------ the backend API
def unary(op, x, p0=math.nan, p1=math.nan, out_dtype=None):
    out = _new(x._shape, out_dtype or x.dtype, x)
    n = numel(out._shape)
    if n:
        shape, [st] = _geom(x._shape, (x, x._strides))
        map_k[_grid(n)](
            S.UNARY[op], float(p0), float(p1), x._storage, x._offset, st, shape, out._storage
        )
    return out


def binary(op, a, b, out_dtype=None):
    a, b = _operand(a), _operand(b)
    shape = broadcast_shapes(a._shape, b._shape)
    out = _new(shape, out_dtype or a.dtype, a)
    n = numel(shape)
    if n:
        cshape, [sa, sb] = _geom(shape, (a, _b(a, shape)), (b, _b(b, shape)))
        zip_k[_grid(n)](
            S.BINARY[op], a._storage, a._offset, sa, b._storage, b._offset, sb, cshape, out._storage
        )
    return out


def grad_from_output(op, y, g):
    """tanh's or sigmoid's gradient from its output: the binary op of that name."""
    return binary(op, y, g)


def binary_into(op, dst, b) -> None:
    """``dst <- dst op b`` in place: the result of :func:`binary`, written into dst."""
    assign(dst, binary(op, dst, b))


def compare(op, a, b):
    a, b = _operand(a), _operand(b)
    shape = broadcast_shapes(a._shape, b._shape)
    out = _new(shape, bool_, a)
    n = numel(shape)
    if n:
        cshape, [sa, sb] = _geom(shape, (a, _b(a, shape)), (b, _b(b, shape)))
        compare_k[_grid(n)](
            S.COMPARE[op],
            a._storage,
            a._offset,
            sa,
            b._storage,
            b._offset,
            sb,
            cshape,
            out._storage,
        )
    return out


def where(c, a, b):
    c, a, b = _operand(c), _operand(a), _operand(b)
    shape = broadcast_shapes(c._shape, a._shape, b._shape)
    out = _new(shape, a.dtype, a)
    n = numel(shape)
    if n:
        cshape, [sc, sa, sb] = _geom(shape, (c, _b(c, shape)), (a, _b(a, shape)), (b, _b(b, shape)))
        where_k[_grid(n)](
            c._storage,
            c._offset,
            sc,
            a._storage,
            a._offset,
            sa,
            b._storage,
            b._offset,
            sb,
            cshape,
            out._storage,
        )
    return out


def assign(dst, src) -> None:
    src = _operand(src)
    if src.dtype is not dst.dtype:
        src = copy(src, dst.dtype)
    shape = dst._shape
    n = numel(shape)
    if n:
        cshape, [sd, ss] = _geom(shape, (dst, dst._strides), (src, _b(src, shape)))
        assign_k[_grid(n)](dst._storage, dst._offset, sd, src._storage, src._offset, ss, cshape, n)


def copy(x, dtype=None):
    x = _operand(x)
    out = _new(x._shape, dtype or x.dtype, x)
    n = numel(x._shape)
    if n:
        cshape, [sd, ss] = _geom(x._shape, (out, out._strides), (x, x._strides))
        assign_k[_grid(n)](out._storage, 0, sd, x._storage, x._offset, ss, cshape, n)
    return out


def empty(shape, dtype):
    """A new uninitialised device storage of ``numel(shape)`` entries."""
    return cuda.device_array(max(numel(shape), 0), dtype=dtype.np)


def fill(shape, value, dtype):
    """A new device storage of ``numel(shape)`` entries, all ``value`` (filled by a kernel)."""
    out = empty(shape, dtype)
    if out.size:
        fill_k[_grid(out.size)](out, value)
    return out


def _rows(x, dims):
    """x with ``dims`` moved last and made contiguous: (kept shape, storage, n)."""
    keep = [d for d in range(len(x._shape)) if d not in dims]
    xc = _dense(permuted(x, keep + list(dims)))
    kept = tuple(x._shape[d] for d in keep)
    return kept, xc._storage, numel([x._shape[d] for d in dims])


def reduce(op, x, dims, keepdim=False, out_dtype=None):
    lead = len(dims) < len(x._shape) and set(dims) == set(range(len(dims)))
    cols = lead and x._offset == 0 and dense(x)  # leading dims of a contiguous input
    if cols:
        kept, xs, n = tuple(x._shape[len(dims) :]), x._storage, numel(x._shape[: len(dims)])
    else:
        kept, xs, n = _rows(x, dims)
    if out_dtype is None:
        out_dtype = S.reduce_dtype(op, x.dtype, bool_, int64)
    S.check_reduce(op, n, x._shape)
    acc_dtype = (
        float64
        if out_dtype.is_floating_point and op in ("sum", "prod")
        else (out_dtype if out_dtype is not bool_ else int64)
    )
    # a float result is written from the float64 accumulator by the kernel itself (the
    # same rounding as a copy afterwards, one launch fewer)
    direct = acc_dtype is out_dtype or out_dtype.is_floating_point
    tmp = _new(kept, out_dtype if direct else acc_dtype, x)
    if tmp._storage.size:
        zero = acc_dtype.np.type(0)
        kernel = reduce_cols_k if cols else reduce_rows_k
        kernel[_grid(tmp._storage.size)](S.REDUCE[op], xs, n, zero, tmp._storage)
    out = tmp if direct else copy(tmp, out_dtype)
    if keepdim:
        out = reshaped(out, tuple(1 if d in dims else x._shape[d] for d in range(len(x._shape))))
    return out


def argreduce(x, dim, is_max, keepdim=False):
    kept, xs, n = _rows(x, (dim,))
    if n == 0:
        raise IndexError(
            f"cannot compute {'max' if is_max else 'min'} over dim {dim} of size 0 "
            f"(input shape {tuple(x._shape)})"
        )
    values, indices = _new(kept, x.dtype, x), _new(kept, int64, x)
    if values._storage.size:
        argreduce_rows_k[_grid(values._storage.size)](
            is_max, xs, n, values._storage, indices._storage
        )
    if keepdim:
        shape = tuple(1 if d == dim else x._shape[d] for d in range(len(x._shape)))
        values, indices = reshaped(values, shape), reshaped(indices, shape)
    return values, indices


def topk(x, k, largest):
    kept, xs, n = _rows(x, (len(x._shape) - 1,))
    out = _new(kept + (k,), int64, x)
    if out._storage.size:
        topk_rows_k[_grid(numel(kept))](xs, n, k, largest, out._storage)
    return out


def _last(x, dim):
    """x with ``dim`` moved last, contiguous from offset 0, and the permutation."""
    perm = last(len(x._shape), dim)
    return _dense(permuted(x, perm)), perm


def _put_back(out, perm):
    """The result ``out``, made in the permuted order ``perm``, viewed in the input's order."""
    return out if perm[-1] == len(perm) - 1 else permuted(out, inverse(perm))


def _row_count(x):
    """(rows, n) of a contiguous operand seen as rows along its last dim."""
    n = x._shape[-1] if x._shape else 1
    return (numel(x._shape) // n if n else 0), n


def softmax(x, dim, log=False):
    xc, perm = _last(x, dim)
    out = _new(xc._shape, x.dtype, x)
    rows, n = _row_count(xc)
    if rows:
        softmax_rows_k[_grid(rows)](xc._storage, n, log, out._storage)
    return _put_back(out, perm)


def softmax_backward(y, g, dim, log=False):
    yc, perm = _last(y, dim)
    gc, _ = _last(g, dim)
    out = _new(yc._shape, y.dtype, y)
    rows, n = _row_count(yc)
    if rows:
        softmax_backward_rows_k[_grid(rows)](yc._storage, gc._storage, n, log, out._storage)
    return _put_back(out, perm)


# The products that go to a rung of the GEMM ladder (section 4.4) rather than bmm_k: float32,
# at least LADDER_MIN_MACS multiply-adds. Below that a launch costs more than the arithmetic.
LADDER_MIN_MACS = 1 << 18
LADDER_BATCH_MAX = 16  # a batch of up to this many products: one ladder launch each
_SMS = None


def gemm_plan(M: int, N: int, K: int) -> tuple[str, dict] | None:
    """The rung and tiling for one (M, K) @ (K, N) float32 product, or None for bmm_k.

    ``doublebuffer`` (128 x 128 tiles of C, the fastest rung on large squares) when its
    tiles keep every multiprocessor busy; else ``shared`` (32 x 32 tiles, 16 times as many
    blocks), which loses less to idle multiprocessors on a small C. Under the simulator no
    product goes to the ladder unless a test asks (its blocks of 256 Python threads are
    slow); tests/test_cuda_backend.py runs this path with small tilings.
    """
    global _SMS
    if M * N * K < LADDER_MIN_MACS or simulated():
        return None
    if _SMS is None:
        _SMS = cuda.get_current_device().MULTIPROCESSOR_COUNT
    if ceil_div(M, 128) * ceil_div(N, 128) >= _SMS:
        return "doublebuffer", {}
    return "shared", {}


def matmul(a, b):
    """(..., M, K) @ (..., K, N) with broadcast batch dims, on the device.

    When b has no batch of its own (a Linear layer's weight), a's batch folds into M: one
    (batch*M, K) @ (K, N) product. float32 products large enough run on a rung of the
    GEMM ladder (gemm_plan); the rest on bmm_k, one thread per output entry.
    """
    a, b = _operand(a), _operand(b)  # both on the device
    M, K_ = a._shape[-2:]
    K2, N = b._shape[-2:]
    if K_ != K2:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({M}x{K_} and {K2}x{N})")
    batch = broadcast_shapes(a._shape[:-2], b._shape[:-2])
    out = _new(batch + (M, N), a.dtype, a)
    if not out._storage.size:
        return out
    if not K_:
        fill_k[_grid(out._storage.size)](out._storage, 0)
        return out
    nb = numel(batch)
    a3 = _dense(expanded(a, batch + (M, K_)))
    if numel(b._shape[:-2]) == 1:  # fold the batch into M
        nb, M = 1, nb * M
        b3 = _dense(b)  # its storage is the (K, N) matrix, whatever its leading 1s
    else:
        b3 = _dense(expanded(b, batch + (K_, N)))
    A = a3._storage[: nb * M * K_].reshape(nb, M, K_)
    B = b3._storage[: nb * K_ * N].reshape(nb, K_, N)
    C = out._storage.reshape(nb, M, N)
    plan = gemm_plan(M, N, K_) if a.dtype.np == np.float32 else None
    if plan is not None and nb <= LADDER_BATCH_MAX:
        kernel, tiling = plan
        for i in range(nb):
            G.gemm_device(A[i], B[i], C[i], kernel=kernel, **tiling)
    else:
        bmm_k[((N + 15) // 16, (M + 7) // 8, nb), (16, 8, 1)](A, B, C)
    return out


# --8<-- [start:device_errors]
_ERR = None  # one device int32: set by a kernel that meets an out-of-range index


def _err():
    global _ERR
    if _ERR is None:
        _ERR = cuda.to_device(np.zeros(1, np.int32))
    return _ERR


def check_errors() -> None:
    """Raise if a kernel reported a bad index since the last check.

    Reading the flag is a copy to the host, so it happens where data comes
    back anyway (``.cpu()``, ``.item()``, ``.tolist()``), not after every op:
    like PyTorch's device-side asserts, the error surfaces at the next sync.
    """
    if _ERR is not None and _ERR.copy_to_host()[0]:
        _ERR.copy_to_device(np.zeros(1, np.int32))
        raise IndexError(
            "index out of range in a GPU gather or scatter (an index was "
            "negative or not smaller than the size of its dimension)"
        )


# --8<-- [end:device_errors]


@cuda.jit
def index_table_k(idx, sizes, strides, table, err):
    """table[n] = sum_k idx[k, n] * strides[k] (negative indices count from the end)."""
    n = cuda.grid(1)
    if n < table.size:
        t = 0
        for k in range(idx.shape[0]):
            i = idx[k, n]
            if i < 0:
                i += sizes[k]
            if i < 0 or i >= sizes[k]:
                err[0] = 1
                i = 0
            t += i * strides[k]
        table[n] = t


_PLANS: dict = {}  # (shape, strides, offset, a, k) -> the device copies of pre and post


def _plan(x, a, idx):
    """The gather plan of ``layout.plan``: pre/post walk the dims around the index arrays
    (metadata: copied once per geometry and cached), table holds each index tuple's offset."""
    if not isinstance(idx, np.ndarray):  # index values on the GPU: table by a kernel
        k = idx._shape[0]
        key = (x._shape, x._strides, x._offset, a, k)
        prepost = _PLANS.get(key)
        if prepost is None:
            pre, post = layout.pre_post(x._shape, x._strides, x._offset, a, k)
            if len(_PLANS) > 1024:
                _PLANS.clear()
            prepost = _PLANS[key] = (cuda.to_device(pre), cuda.to_device(post))
        m = idx._shape[1]
        table = cuda.device_array(max(m, 1), dtype=np.int64)[:m]
        if m:
            index_table_k[_grid(m)](
                idx._storage.reshape(k, m),
                tuple(x._shape[a : a + k]),
                tuple(x._strides[a : a + k]),
                table,
                _err(),
            )
        return prepost[0], table, prepost[1]
    pre, table, post = layout.plan(x._shape, x._strides, x._offset, a, idx)
    return cuda.to_device(pre), cuda.to_device(table), cuda.to_device(post)


def take(x, a, idx):
    pre, table, post = _plan(x, a, idx)
    n = pre.size * table.size * post.size
    out = cuda.device_array(n, dtype=x.dtype.np)
    if n:
        take_k[_grid(n)](x._storage, pre, table, post, out)
    return out


def put(x, a, idx, values, accumulate):
    pre, table, post = _plan(x, a, idx)
    v = (
        values
        if (
            is_device_storage(values._storage)
            and values.dtype is x.dtype
            and values._offset == 0
            and dense(values)
        )
        else copy(_operand(values), x.dtype)
    )
    if v._storage.size:
        put_k[_grid(v._storage.size)](x._storage, pre, table, post, v._storage, accumulate)


def _index_device(index):
    return _dense(index) if is_device_storage(index._storage) else to_device(index)


def _gather_positions(shape, strides, offset, dim, index, size):
    idx = _index_device(index)
    m = numel(index._shape)
    pos = cuda.device_array(max(m, 1), dtype=np.int64)
    if m:
        gather_pos_k[_grid(m)](
            idx._storage, tuple(index._shape), offset, tuple(strides), dim, size, pos, _err()
        )
    return pos


def gather(x, dim, index):
    pos = _gather_positions(x._shape, x._strides, x._offset, dim, index, x._shape[dim])
    out = _new(index._shape, x.dtype, x)
    if out._storage.size:
        gather_k[_grid(out._storage.size)](x._storage, pos, out._storage)
    return out


def scatter_add(shape, dim, index, src, dtype):
    src = _operand(src)
    shape = tuple(shape)
    out = src._make(fill(shape, 0, dtype), shape, strides_of(shape), 0, dtype)
    pos = _gather_positions(shape, contiguous_strides(shape), 0, dim, index, shape[dim])
    s = copy(src, dtype)
    m = numel(index._shape)
    if m:
        scatter_add_k[_grid(m)](out._storage, pos, s._storage)
    return out


def tri(x, diagonal, upper):
    xc = _dense(x)
    out = _new(x._shape, x.dtype, x)
    rows, cols = x._shape[-2:]
    if out._storage.size:
        tri_k[_grid(out._storage.size)](xc._storage, rows, cols, diagonal, upper, out._storage)
    return out


# --8<-- [start:nonzero]
@cuda.jit
def nonzero_count_k(x, x_off, x_str, shape, chunk, counts):
    """counts[t] = how many entries of chunk t (entries t*chunk ... t*chunk + chunk - 1) are nonzero."""
    t = cuda.grid(1)
    if t < counts.size:
        n = 1
        for k in range(len(shape)):
            n *= shape[k]
        c = 0
        for i in range(t * chunk, min(n, (t + 1) * chunk)):
            if x[_pos(i, shape, x_str, x_off)] != 0:
                c += 1
        counts[t] = c


@cuda.jit
def exclusive_scan_k(counts, starts):
    """starts[t] = counts[0] + ... + counts[t - 1]; starts[-1] is the total (one thread)."""
    if cuda.grid(1) == 0:
        acc = 0
        for t in range(counts.size):
            starts[t] = acc
            acc += counts[t]
        starts[counts.size] = acc


@cuda.jit
def nonzero_write_k(x, x_off, x_str, shape, chunk, starts, out):
    """Chunk t writes the ordinals of its nonzero entries from out[starts[t]] on, in order."""
    t = cuda.grid(1)
    if t < starts.size - 1:
        n = 1
        for k in range(len(shape)):
            n *= shape[k]
        c = starts[t]
        for i in range(t * chunk, min(n, (t + 1) * chunk)):
            if x[_pos(i, shape, x_str, x_off)] != 0:
                out[c] = i
                c += 1


def nonzero(x):
    """Ordinals of the nonzero entries, row-major, on the host (a numpy int64 array).

    Three kernels: each thread counts the nonzeros of one chunk of entries, one thread
    sums the counts into each chunk's first output slot, and each thread writes its
    chunk's ordinals there. The total is read back: the result's size depends on the data.
    """
    n = numel(x._shape)
    if n == 0:
        return np.empty(0, np.int64)
    threads = min(n, 4096)
    chunk = (n + threads - 1) // threads
    threads = (n + chunk - 1) // chunk
    shape, [st] = _geom(x._shape, (x, x._strides))
    counts = cuda.device_array(threads, dtype=np.int64)
    starts = cuda.device_array(threads + 1, dtype=np.int64)
    nonzero_count_k[_grid(threads)](x._storage, x._offset, st, shape, chunk, counts)
    exclusive_scan_k[1, 1](counts, starts)
    total = int(starts[threads:].copy_to_host()[0])
    out = cuda.device_array(max(total, 1), dtype=np.int64)
    nonzero_write_k[_grid(threads)](x._storage, x._offset, st, shape, chunk, starts, out)
    return out.copy_to_host()[:total]


# --8<-- [end:nonzero]


def arange(start, end, step, dtype):
    """A new device storage of the values start, start + step, ... below ``end``."""
    n = max(0, math.ceil((end - start) / step))
    out = cuda.device_array(n, dtype=dtype.np)
    if n:
        arange_k[_grid(n)](start, step, out)
    return out


def cumsum(x, dim):
    xc, perm = _last(x, dim)
    out = _new(xc._shape, x.dtype, x)
    rows, n = _row_count(xc)
    if rows:
        cumsum_rows_k[_grid(rows)](xc._storage, n, out._storage)
    return _put_back(out, perm)


@cuda.jit
def multinomial_k(w, n, u, num_samples, replacement, out, status):
    """Draw ``num_samples`` categories from row r of the weights ``w`` (one thread per row;
    the row is the thread's to change: without replacement a drawn weight becomes 0).
    ``status[r]`` becomes 1 when an entry of the row is negative, NaN or infinite, 2 when
    the row sums to 0 (and nothing is drawn), else 0."""
    r = cuda.grid(1)
    if r * n < w.size:
        base = r * n
        total = 0.0
        for j in range(n):
            x = w[base + j]
            if not (x >= 0) or x == math.inf:  # NaN fails x >= 0
                status[r] = 1
                return
            total += x
        if total == 0:
            status[r] = 2
            return
        status[r] = 0
        for s in range(num_samples):
            total = 0.0
            for j in range(n):
                total += w[base + j]
            target = u[r * num_samples + s] * total
            acc = 0.0
            pick = n - 1
            while pick > 0 and w[base + pick] == 0:
                pick -= 1
            for j in range(n):
                acc += w[base + j]
                if target < acc and w[base + j] > 0:
                    pick = j
                    break
            out[r * num_samples + s] = pick
            if not replacement:
                w[base + pick] = 0.0


def multinomial(p, num_samples, replacement, uniforms):
    """Category indices drawn on the device from rows of weights ``p``, and the weights'
    status (see the interface); returned on the host, as the CPU backend's, from the
    host's ``uniforms``."""
    w = copy(p, float64)  # the kernel's working copy of the weights
    n = p._shape[-1]
    rows = numel(p._shape) // n
    out = cuda.device_array(max(rows * num_samples, 1), dtype=np.int64)
    if not rows:
        return out.copy_to_host()[:0], 0
    status = cuda.device_array(rows, dtype=np.int32)
    multinomial_k[_grid(rows)](
        w._storage,
        n,
        cuda.to_device(np.asarray(uniforms, np.float64)),
        num_samples,
        replacement,
        out,
        status,
    )
    found = set(status.copy_to_host().tolist())
    return out.copy_to_host()[: rows * num_samples], (1 if 1 in found else max(found))
