"""The CPU backend: from strided operands to kernel launches.

Each function here implements one function of ``sitp/kernels/interface.py`` (no autograd:
that is ``sitp/autograd/derivatives.py``'s job): it views every operand with the output's
shape, merges dimensions that are contiguous in all operands, computes row starts and
calls one kernel of ``sitp.kernels.cpu.kernels``. An operand is read only through its
``_storage, _shape, _strides, _offset, dtype``; a result is a new contiguous tensor made by
an operand's own ``_make`` (or, with no operand, a bare storage).
"""

from __future__ import annotations

import math

import numpy as np
from numba import get_num_threads

from sitp.dtypes import bool_, float32, int64
from sitp.kernels import layout
from sitp.kernels import scalar as S
from sitp.kernels.cpu import blas
from sitp.kernels.cpu import kernels as K
from sitp.kernels.cpu.fused import linear as fused_linear
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

_I64 = np.int64
_NAN = math.nan
_ZERO_START = np.zeros(1, _I64)  # the row start of a one-row operand at offset 0 (never written)
_F32 = np.dtype(np.float32)
_UNARY = K.UNARY  # op name -> op code


def _new(shape, dtype, like):
    """A new contiguous tensor of ``shape`` (uninitialised), made by ``like._make``: ``like``
    is an operand (the result is of its class) or, above the backends, the Tensor class."""
    if not isinstance(shape, tuple):  # a Size (a tuple) is kept: _make would remake it
        shape = tuple(shape)
    return like._make(np.empty(numel(shape), dtype.np), shape, strides_of(shape), 0, dtype)


def _dense(x):
    """``x`` itself when it is contiguous, else a contiguous copy (as ``x.contiguous()``)."""
    return x if dense(x) else copy(x)


# Row starts are read, never written, by every kernel, so small tables are memoised: a
# model launches the same few layouts over and over. Keys are (shape, strides, offset);
# tables over _MEMO_MAX_ROWS rows are not kept, and a full memo is cleared.
_STARTS: dict = {}
_MEMO_ENTRIES = 1024
_MEMO_MAX_ROWS = 4096


def _positions(shape, strides, offset):
    """``K.positions`` of (shape, strides, offset), tuples of ints, memoised when small."""
    key = (shape, strides, offset)
    starts = _STARTS.get(key)
    if starts is None:
        starts = K.positions(np.asarray(shape, _I64), np.asarray(strides, _I64), offset)
        if starts.size <= _MEMO_MAX_ROWS:
            if len(_STARTS) >= _MEMO_ENTRIES:
                _STARTS.clear()
            _STARTS[key] = starts
    return starts


def _start_at(offset):
    """The row start of a one-row operand at ``offset``."""
    return _ZERO_START if offset == 0 else _positions((), (), offset)


def _launch_args(shape, *tensors_and_strides):
    """([(storage, starts, step), ...], n) for a row-wise kernel."""
    # The common case first: every operand is contiguous in the output's shape, or one
    # entry broadcast (all strides 0). Then the whole op is one row of numel(shape)
    # entries, which is what collapse() would find, without its loops.
    dense_st = strides_of(shape)
    for _, st in tensors_and_strides:
        if st != dense_st and any(st):
            break
    else:
        return [
            (t._storage, _start_at(t._offset), 1 if st == dense_st else 0)
            for t, st in tensors_and_strides
        ], numel(shape)
    strides = [s for _, s in tensors_and_strides]
    cshape, cstrides = collapse(shape, *strides)
    if len(cshape) == 1:  # one row: no odometer needed
        return [
            (t._storage, _start_at(t._offset), st[0])
            for (t, _), st in zip(tensors_and_strides, cstrides)
        ], cshape[0]
    lead = tuple(cshape[:-1])
    args = []
    for (t, _), st in zip(tensors_and_strides, cstrides):
        args.append((t._storage, _positions(lead, tuple(st[:-1]), t._offset), st[-1]))
    return args, cshape[-1]


def _bstrides(t, shape):
    if t._shape == shape:
        return t._strides
    return broadcast_strides(t._shape, t._strides, shape)


# --8<-- [start:unary_launch]
def unary(op: str, x, p0=_NAN, p1=_NAN, out_dtype=None):
    """A new tensor f(x) for the unary op named ``op``."""
    shape, dtype = x._shape, out_dtype or x.dtype
    out = x._make(np.empty(math.prod(shape), dtype.np), shape, strides_of(shape), 0, dtype)
    o = out._storage
    n = o.size
    code = _UNARY[op]
    # float32 tanh and exp: vecmath's, not the C library's
    via_f64 = (op == "tanh" or op == "exp") and x._storage.dtype == o.dtype == _F32
    if n and x._strides == out._strides:  # x contiguous: one row of all n entries
        xs, off = x._storage, x._offset
        if off or xs.size != n:
            xs = xs[off : off + n]
        if via_f64:
            K.f32_via_f64_row_kernel(code, xs, o)
        else:
            K.map_row_kernel(code, float(p0), float(p1), xs, o)
    elif n:
        [(xs, starts, step)], n = _launch_args(shape, (x, x._strides))
        if via_f64:
            K.f32_via_f64_kernel(code, xs, starts, step, n, o)
        else:
            K.map_fast_kernel(code, float(p0), float(p1), xs, starts, step, n, o)
    return out


# --8<-- [end:unary_launch]


# Zips and copies of at least this many entries (about 20 us on one core) split their
# rows among numba's threads.
_PARALLEL_COPY_MIN = 1 << 16


def _threads_for(n: int) -> int:
    """numba's thread count for a zip or copy of n entries, 1 below _PARALLEL_COPY_MIN."""
    return get_num_threads() if n >= _PARALLEL_COPY_MIN else 1


# --8<-- [start:binary_launch]
def binary(op: str, a, b, out_dtype=None):
    """A new tensor f(a, b) with broadcasting; a and b share a dtype."""
    shape = a._shape if a._shape == b._shape else broadcast_shapes(a._shape, b._shape)
    out = _new(shape, out_dtype or a.dtype, a)
    n = out._storage.size
    if (  # the common case: contiguous operands of one shape, or b a single entry
        0 < n < _PARALLEL_COPY_MIN
        and a._strides == out._strides
        and (b._strides == out._strides if b._shape == a._shape else not b._shape)
    ):  # one row of all n entries (b's step 0 when it is one entry)
        bstep = 1 if b._shape else 0
        K.zip_fast_kernel(
            K.BINARY[op], a._storage, _start_at(a._offset), 1,
            b._storage, _start_at(b._offset), bstep, n, out._storage,
        )  # fmt: skip
    elif 0 < n < _PARALLEL_COPY_MIN and not a._shape and b._strides == out._strides:
        # a single entry on the left (``1 - z``): one row too, a at step 0; a sum or a
        # product swaps its operands so that the vectorised lane applies
        a_args = (a._storage, _start_at(a._offset), 0)
        b_args = (b._storage, _start_at(b._offset), 1)
        if op in ("add", "mul"):
            a_args, b_args = b_args, a_args
        K.zip_fast_kernel(K.BINARY[op], *a_args, *b_args, n, out._storage)
    elif n:
        [(as_, sa, pa), (bs, sb, pb)], n = _launch_args(
            shape, (a, _bstrides(a, shape)), (b, _bstrides(b, shape))
        )
        if pa == 0 and pb == 1 and op in ("add", "mul"):  # a broadcast left operand:
            as_, sa, pa, bs, sb, pb = bs, sb, pb, as_, sa, pa  # swap so the fast path applies
        args = (K.BINARY[op], as_, sa, pa, bs, sb, pb, n, out._storage)
        threads = _threads_for(out._storage.size)
        if threads > 1:  # large: rows (or pieces of one row) on numba's threads
            K.zip_fast_parallel(*args, threads)
        else:
            K.zip_fast_kernel(*args)
    return out


# --8<-- [end:binary_launch]


def grad_from_output(op: str, y, g):
    """The gradient of tanh (``op`` "tanh_backward") or sigmoid ("sigmoid_backward") from
    its output ``y`` and the incoming gradient ``g`` of y's shape and dtype: one pass (the
    binary op of that name), vectorised when both are contiguous."""
    out = _new(y._shape, y.dtype, y)
    n = out._storage.size
    if n and y._strides == out._strides == g._strides:
        yo, go = y._offset, g._offset
        K.grad_from_output_kernel(
            K.BINARY[op], y._storage[yo : yo + n], g._storage[go : go + n], out._storage
        )
        return out
    return binary(op, y, g)


def binary_into(op: str, dst, b) -> None:
    """``dst <- dst op b`` in place (``x.add_(y)``); b shares dst's dtype and broadcasts to it."""
    n = numel(dst._shape)
    if (
        0 < n < _PARALLEL_COPY_MIN
        and dst._strides == strides_of(dst._shape)
        and (b._strides == dst._strides if b._shape == dst._shape else not b._shape)
        # b reads no entry that dst writes before b reads it: another buffer, or b is dst
        and (b._storage is not dst._storage or (b._offset == dst._offset and b._shape))
    ):  # one row of all n entries, written straight into dst's storage
        o = dst._offset
        out = dst._storage if o == 0 and dst._storage.size == n else dst._storage[o : o + n]
        K.zip_fast_kernel(
            K.BINARY[op], dst._storage, _start_at(o), 1,
            b._storage, _start_at(b._offset), 1 if b._shape else 0, n, out,
        )  # fmt: skip
    elif n:
        assign(dst, binary(op, dst, b))


def compare(op: str, a, b):
    """A new bool tensor a <op> b with broadcasting."""
    shape = broadcast_shapes(a._shape, b._shape)
    out = _new(shape, bool_, a)
    if out._storage.size:
        [(as_, sa, pa), (bs, sb, pb)], n = _launch_args(
            shape, (a, _bstrides(a, shape)), (b, _bstrides(b, shape))
        )
        K.compare_kernel(K.COMPARE[op], as_, sa, pa, bs, sb, pb, n, out._storage)
    return out


def where(c, a, b):
    shape = broadcast_shapes(c._shape, a._shape, b._shape)
    out = _new(shape, a.dtype, a)
    if out._storage.size:
        [(cs, sc, pc), (as_, sa, pa), (bs, sb, pb)], n = _launch_args(
            shape, (c, _bstrides(c, shape)), (a, _bstrides(a, shape)), (b, _bstrides(b, shape))
        )
        K.where_kernel(cs, sc, pc, as_, sa, pa, bs, sb, pb, n, out._storage)
    return out


def assign(dst, src) -> None:
    """Copy ``src`` (broadcast to dst's shape, cast to its dtype) into ``dst``."""
    shape = dst._shape
    if numel(shape) == 0:
        return
    sstr = _bstrides(src, shape)
    if (
        len(shape) == 2
        and shape[0] > 1
        and shape[1] > 1
        and shape[0] * shape[1] < _PARALLEL_COPY_MIN
    ):
        # a matrix whose rows do not merge into one run in both views (a window of a
        # wider matrix: cat's and stack's pieces) is what collapse() would leave it
        (d0, d1), (s0, s1) = dst._strides, sstr
        if d0 != shape[1] * d1 or s0 != shape[1] * s1:
            K.assign4_kernel(
                dst._storage, dst._offset, 0, 0, d0, d1,
                src._storage, src._offset, 0, 0, s0, s1, 1, 1, shape[0], shape[1],
            )  # fmt: skip
            return
    cshape, (cd, cs) = collapse(shape, dst._strides, sstr)
    if 1 < len(cshape) <= 4:  # a few dims: nested loops, no row-start table
        pad = 4 - len(cshape)
        cshape, cd, cs = [1] * pad + cshape, [0] * pad + cd, [0] * pad + cs
        args = (dst._storage, dst._offset, *cd, src._storage, src._offset, *cs, *cshape)
        threads = _threads_for(numel(shape))
        if threads > 1 and cshape[0] * cshape[1] > 1 and dst._storage is not src._storage:
            K.assign4_parallel(*args, min(threads, cshape[0] * cshape[1]))
        else:
            K.assign4_kernel(*args)
        return
    [(ds, sd, pd), (ss, s_s, ps)], n = _launch_args(shape, (dst, dst._strides), (src, sstr))
    K.assign_kernel(ds, sd, pd, ss, s_s, ps, n)


def copy(x, dtype=None):
    """A contiguous copy of ``x`` (optionally cast)."""
    out = _new(x._shape, dtype or x.dtype, x)
    assign(out, x)
    return out


# --8<-- [start:reduce_launch]
def _rows_last(x, dims):
    """Move ``dims`` to the end and return (kept_shape, x viewed as rows).

    The reduced dims become one row per output entry; when they are not
    contiguous with each other the input is copied first.
    """
    if len(dims) == 1:  # one dim: every row is a run along it, at its stride
        d = dims[0]
        kept = x._shape[:d] + x._shape[d + 1 :]
        starts = _positions(kept, x._strides[:d] + x._strides[d + 1 :], x._offset)
        return kept, x._storage, starts, x._strides[d], x._shape[d]
    keep = [d for d in range(len(x._shape)) if d not in dims]
    perm = keep + list(dims)
    shape = tuple(x._shape[d] for d in perm)
    strides = tuple(x._strides[d] for d in perm)
    kept = shape[: len(keep)]
    n = numel(shape[len(keep) :])
    cshape, [cstr] = collapse(shape[len(keep) :] or (1,), strides[len(keep) :] or (0,))
    if len(cshape) == 1 or n == 0:
        starts = _positions(kept, strides[: len(keep)], x._offset)
        return kept, x._storage, starts, cstr[-1], n
    # Not one run: copy into a contiguous (kept..., reduced...) buffer.
    c = copy(x._make(x._storage, shape, strides, x._offset, x.dtype))
    starts = np.arange(numel(kept), dtype=_I64) * n
    return kept, c._storage, starts, 1, n


def reduce(op: str, x, dims, keepdim=False, out_dtype=None):
    """Reduce ``x`` over ``dims`` (a tuple of normalized dims)."""
    kept, xs, starts, step, n = _rows_last(x, dims)
    if out_dtype is None:
        out_dtype = S.reduce_dtype(op, x.dtype, bool_, int64)
    S.check_reduce(op, n, x._shape)
    out = _new(kept, out_dtype, x)
    zero = (
        np.float64(0)
        if out_dtype.is_floating_point
        else (np.int64(0) if out_dtype is int64 else np.int64(0))
    )
    if out_dtype is bool_:
        tmp = np.empty(out._storage.size, np.int64)
        K.reduce_kernel(K.REDUCE[op], xs, starts, step, n, zero, tmp)
        out._storage[:] = tmp != 0
    elif op in ("max", "min"):
        K.reduce_kernel(K.REDUCE[op], xs, starts, step, n, xs.dtype.type(0), out._storage)
    else:
        K.reduce_kernel(K.REDUCE[op], xs, starts, step, n, zero, out._storage)
    if keepdim:
        out = reshaped(out, tuple(1 if d in dims else x._shape[d] for d in range(len(x._shape))))
    return out


# --8<-- [end:reduce_launch]


def argreduce(x, dim, is_max, keepdim=False):
    """(values, indices) of the max/min along ``dim``."""
    kept, xs, starts, step, n = _rows_last(x, (dim,))
    if n == 0:
        raise IndexError(
            f"cannot compute {'max' if is_max else 'min'} over dim {dim} of size 0 "
            f"(input shape {tuple(x._shape)})"
        )
    values = _new(kept, x.dtype, x)
    indices = _new(kept, int64, x)
    K.argreduce_kernel(is_max, xs, starts, step, n, values._storage, indices._storage)
    if keepdim:
        shape = tuple(1 if d == dim else x._shape[d] for d in range(len(x._shape)))
        values, indices = reshaped(values, shape), reshaped(indices, shape)
    return values, indices


def topk(x, k, largest):
    """The positions of the k largest (smallest) entries of each row along the last dim."""
    kept, xs, starts, step, n = _rows_last(x, (len(x._shape) - 1,))
    out = _new(kept + (k,), int64, x)
    if k and starts.size:
        K.topk_kernel(xs, starts, step, n, k, largest, out._storage)
    return out


def _move_last(x, dim):
    """A view of x with ``dim`` moved last (rows along it), and the permutation (None when
    ``dim`` is already last: x itself, no view to make)."""
    if dim == len(x._shape) - 1:
        return x, None
    perm = last(len(x._shape), dim)
    return permuted(x, perm), perm


def _put_back(out, perm):
    """The result ``out``, made in the permuted order ``perm``, viewed in the input's order."""
    return out if perm is None or perm[-1] == len(perm) - 1 else permuted(out, inverse(perm))


def softmax(x, dim, log=False):
    """Row-wise softmax (or log-softmax) along ``dim``; a new tensor."""
    xt, perm = _move_last(x, dim)
    out = _new(xt._shape, x.dtype, x)
    if out._storage.size:
        starts = _positions(xt._shape[:-1], xt._strides[:-1], xt._offset)
        K.softmax_kernel(xt._storage, starts, xt._strides[-1], xt._shape[-1], log, out._storage)
    return _put_back(out, perm)


def softmax_backward(y, g, dim, log=False):
    """Gradient of (log-)softmax along ``dim`` given its output ``y``."""
    yt, perm = _move_last(y, dim)
    gt, _ = _move_last(g, dim)
    yc, gc = _dense(yt), _dense(gt)
    out = _new(yc._shape, y.dtype, y)
    n = yc._shape[-1] if yc._shape else 1
    if out._storage.size:
        K.softmax_backward_kernel(
            yc._storage[yc._offset :],
            gc._storage[gc._offset :],
            out._storage.size // n,
            n,
            log,
            out._storage,
        )
    return _put_back(out, perm)


# --8<-- [start:matmul_launch]
def matmul(a, b):
    """(..., M, K) @ (..., K, N) with broadcast batch dims; both at least 2-D."""
    M, K_ = a._shape[-2:]
    K2, N = b._shape[-2:]
    if K_ != K2:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({_mm_shape(a)} and {_mm_shape(b)})"
        )
    if len(a._shape) == 2 and len(b._shape) == 2:
        # operands are read where they are, transposed or not
        return _wrap2(blas.matmul(as_numpy(a), as_numpy(b)), a)
    batch = broadcast_shapes(a._shape[:-2], b._shape[:-2])
    if len(b._shape) == 2 and len(a._shape) > 2:
        # (..., M, K) @ (K, N): one (prod(...) * M, K) @ (K, N) product, not a batch of
        # small ones with copies of b.
        out = matmul(_rows_of(a), b)
        return reshaped(out, batch + (M, N))
    nb = numel(batch)
    A = flat(_dense(expanded(a, batch + (M, K_)))).reshape(nb, M, K_)
    B = flat(_dense(expanded(b, batch + (K_, N)))).reshape(nb, K_, N)
    C = blas.matmul(A[0], B[0]) if nb == 1 else blas.bmm(A, B)
    shape = batch + (M, N)
    return a._make(C.reshape(-1), shape, strides_of(shape), 0, a.dtype)


# --8<-- [end:matmul_launch]


def _rows_of(a):
    """(..., K) viewed as a matrix (prod(...), K), as ``a.reshape(-1, K)``: a view when the
    leading dims merge into one, else a contiguous copy."""
    lead, [st] = collapse(a._shape[:-1], a._strides[:-1])
    K_ = a._shape[-1]
    if len(lead) == 1:
        return a._make(a._storage, (lead[0], K_), (st[0], a._strides[-1]), a._offset, a.dtype)
    return reshaped(copy(a), (numel(lead), K_))


def flat(t):
    """The entries of a contiguous CPU tensor as a 1-D view of its storage (no copy)."""
    return t._storage[t._offset : t._offset + numel(t._shape)]


def as_numpy(t):
    """A numpy view of tensor ``t``'s entries (its shape and strides, no copy)."""
    st, shape, strides = t._storage, t._shape, t._strides
    if len(shape) == 2:  # the matrices of a product: dense, row-major or transposed
        M, N = shape
        if strides == (N, 1) or strides == (1, M):
            n, off = M * N, t._offset
            dense = st if off == 0 and st.shape[0] == n else st[off : off + n]
            return dense.reshape(shape) if strides[1] == 1 else dense.reshape(N, M).T
    isz = st.itemsize
    return np.ndarray(shape, st.dtype, st, t._offset * isz, tuple([s * isz for s in strides]))


def _wrap2(C, like):
    """A tensor (of operand ``like``'s class and dtype) over the new C-contiguous 2-D array ``C``."""
    return like._make(C.reshape(-1), C.shape, (C.shape[1], 1), 0, like.dtype)


def linear(x, w, bias=None):
    """x @ w.T + bias for 2-D x (M, K) and w (N, K): one GEMM that starts from the bias."""
    return _wrap2(
        blas.matmul(as_numpy(x), as_numpy(w).T, None if bias is None else as_numpy(bias)), x
    )


def linear_backward_small(g, x, w, need_x, need_w, need_b):
    """(dx, dw, db) of ``linear(x, w, b)`` from its output's gradient ``g`` (M, N)
    (contiguous) in one kernel call (``fused.linear.backward_small``), each None where not
    needed; or None, when the layer is too large for that kernel or an operand is not
    dense: then the caller runs the products one by one. Same bits either way."""
    (M, N), K = g._shape, w._shape[1]
    mnk = M * N * K
    if not (0 < mnk < blas._ONE_THREAD_MNK and N > 1 and K > 1) or g.dtype.np not in _FLOATS:
        return None
    G, W, X = as_numpy(g), as_numpy(w), as_numpy(x)
    if not (W.flags.c_contiguous and (X.flags.c_contiguous or X.flags.f_contiguous)):
        return None
    dx = _new((M, K), g.dtype, g) if need_x else None
    dw = _new((N, K), g.dtype, g) if need_w else None
    db = _new((N,), g.dtype, g) if need_b else None
    empty2 = G[:0, :0]
    fused_linear.backward_small(
        G, W, X,
        empty2 if dx is None else dx._storage.reshape(M, K),
        empty2 if dw is None else dw._storage.reshape(N, K),
        G[0, :0] if db is None else db._storage,
        need_x, need_w, need_b,
    )  # fmt: skip
    return dx, dw, db


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _mm_shape(t):
    s = t._shape
    return f"{s[-2]}x{s[-1]}" if len(s) == 2 else str(tuple(s))


# --8<-- [start:index_launch]
def take(x, a, idx):
    """A flat array of x's entries picked by index tuples on dims a..a+k."""
    pre, table, post = layout.plan(x._shape, x._strides, x._offset, a, idx)
    out = np.empty(pre.size * table.size * post.size, x.dtype.np)
    K.take_kernel(x._storage, pre, table, post, out)
    return out


def put(x, a, idx, values, accumulate):
    """The inverse of :func:`take`: write (or add) ``values`` into x in place.

    ``values`` is a tensor with the taken shape (it is made contiguous).
    """
    pre, table, post = layout.plan(x._shape, x._strides, x._offset, a, idx)
    K.put_kernel(x._storage, pre, table, post, flat(_dense(values)), accumulate)


# --8<-- [end:index_launch]


def gather(x, dim, index):
    """torch.gather: out[..., j, ...] = x[..., index[..., j, ...], ...] along dim."""
    istr = list(x._strides)
    istr[dim] = 0
    base = K.positions(np.asarray(index._shape, _I64), np.asarray(istr, _I64), x._offset)
    idx = _dense(index)
    pos = np.empty(base.size, _I64)
    bad = K.gather_positions(base, idx._storage[idx._offset :], x._strides[dim], x._shape[dim], pos)
    if bad >= 0:
        raise RuntimeError(  # torch's type for gather (IndexError is for x[i])
            f"gather(): index {int(idx._storage[idx._offset + bad])} is out of bounds for "
            f"dimension {dim} with size {x._shape[dim]}"
        )
    out = _new(index._shape, x.dtype, x)
    K.gather_kernel(x._storage, pos, out._storage)
    return out


def scatter_add(shape, dim, index, src, dtype):
    """zeros(shape).scatter_add_(dim, index, src): the backward of gather."""
    out = _new(shape, dtype, src)
    out._storage.fill(0)
    strides = list(contiguous_strides(shape))
    dstride = strides[dim]
    strides[dim] = 0
    base = K.positions(np.asarray(index._shape, _I64), np.asarray(strides, _I64), 0)
    idx = _dense(index)
    pos = np.empty(base.size, _I64)
    bad = K.gather_positions(base, idx._storage[idx._offset :], dstride, shape[dim], pos)
    if bad >= 0:
        raise RuntimeError(
            f"scatter_add(): index out of bounds for dimension {dim} with size {shape[dim]}"
        )
    K.scatter_add_kernel(out._storage, pos, flat(_dense(src)))
    return out


def tri(x, diagonal, upper):
    out = _new(x._shape, x.dtype, x)
    rows, cols = x._shape[-2:]
    K.tri_kernel(flat(_dense(x)), rows, cols, diagonal, upper, out._storage)
    return out


def nonzero(x):
    """(count, ordinals) of the nonzero entries of x, row-major."""
    out = np.empty(max(numel(x._shape), 1), _I64)
    if numel(x._shape) == 0:
        return out[:0]
    [(xs, starts, step)], n = _launch_args(x._shape, (x, x._strides))
    c = K.nonzero_kernel(xs, starts, step, n, out)
    return out[:c]


def arange(start, end, step, dtype):
    """A new storage of the values start, start + step, ... below ``end`` (a numpy array)."""
    n = max(0, math.ceil((end - start) / step))
    out = np.empty(n, dtype.np)
    K.arange_kernel(dtype.np.type(start) if dtype is not float32 else np.float64(start), step, out)
    return out


def cumsum(x, dim):
    xt, perm = _move_last(x, dim)
    out = _new(xt._shape, x.dtype, x)
    if out._storage.size:
        starts = K.positions(
            np.asarray(xt._shape[:-1], _I64), np.asarray(xt._strides[:-1], _I64), xt._offset
        )
        K.cumsum_kernel(xt._storage, starts, xt._strides[-1], xt._shape[-1], out._storage)
    return _put_back(out, perm)


def multinomial(p, num_samples, replacement, uniforms):
    pc = p if dense(p) else copy(p, p.dtype)  # float32 or float64, read as it is
    n = pc._shape[-1]
    n_rows = numel(pc._shape) // n
    out = np.empty(n_rows * num_samples, _I64)
    status = K.multinomial_kernel(
        pc._storage[pc._offset :], n_rows, n, uniforms, num_samples, replacement, out
    )
    return out, status


def fill(shape, value, dtype):
    """A new storage of ``numel(shape)`` entries, all ``value`` (a numpy array)."""
    out = np.empty(numel(shape), dtype.np)
    out.fill(value)  # a memset: numpy as a buffer
    return out


def empty(shape, dtype):
    """A new uninitialised storage of ``numel(shape)`` entries (a numpy array)."""
    return np.empty(numel(shape), dtype.np)


def to_device(x):
    """A contiguous copy of the host tensor ``x`` in this backend's memory: the host's."""
    return copy(x)


def to_host(x):
    """A contiguous copy of ``x`` in host memory (this backend's memory is the host's)."""
    return copy(x)


def check_errors() -> None:
    """Nothing to check: a CPU kernel that meets a bad index raises at once."""
