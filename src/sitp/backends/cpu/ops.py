"""The CPU backend: from tensors to kernel launches.

Each function here takes tensors (no autograd: that is ``sitp/autograd/derivatives.py``'s
job), views every operand with the output's shape, merges dimensions that
are contiguous in all operands, computes row starts and calls one kernel of
``sitp.backends.cpu.kernels``. Outputs are always new contiguous tensors.
"""

from __future__ import annotations

import math

import numpy as np

from sitp.backends.cpu import blas
from sitp.backends.cpu import kernels as K
from sitp.dtypes import bool_, float32, float64, int64
from sitp.strides import broadcast_shapes, broadcast_strides, contiguous_strides, numel

_I64 = np.int64
_NAN = math.nan
_ZERO_START = np.zeros(1, _I64)  # the row start of a one-row operand at offset 0 (never written)


_STRIDES: dict = {}  # shape -> contiguous strides, memoised: ops make the same shapes again and again


def _new(shape, dtype):
    shape = tuple(shape)
    strides = _STRIDES.get(shape)
    if strides is None:
        if len(_STRIDES) > 4096:
            _STRIDES.clear()
        strides = _STRIDES[shape] = contiguous_strides(shape)
    return _tensor()._make(np.empty(numel(shape), dtype.np), shape, strides, 0, dtype)


def _tensor():
    """The Tensor class (imported late: sitp._tensor.tensor imports this module)."""
    global _Tensor
    if _Tensor is None:
        from sitp._tensor.tensor import Tensor as _Tensor
    return _Tensor


_Tensor = None


# --8<-- [start:collapse]
def collapse(shape, *strides_list):
    """Merge adjacent dims that are contiguous with each other in every operand.

    A (4, 5, 6) contiguous tensor plus a (6,) bias broadcast to it becomes a
    (20, 6) problem: rows of 6, and 20 of them. Returns the new shape and the
    new strides of each operand (always at least one dim).
    """
    shape = list(shape) or [1]
    strides_list = [list(s) or [0] for s in strides_list]
    out_shape = [shape[-1]]
    out_strides = [[s[-1]] for s in strides_list]
    for k in range(len(shape) - 2, -1, -1):
        n = shape[k]
        if n == 1:  # a size-1 dim never moves: drop it
            continue
        inner = out_shape[0]
        merge = True
        for s, o in zip(strides_list, out_strides):
            if s[k] != o[0] * inner:
                merge = False
                break
        if merge:
            out_shape[0] = inner * n  # the merged dim keeps the inner step
        else:
            out_shape.insert(0, n)
            for s, o in zip(strides_list, out_strides):
                o.insert(0, s[k])
    return out_shape, out_strides
# --8<-- [end:collapse]


def _launch_args(shape, *tensors_and_strides):
    """([(storage, starts, step), ...], n) for a row-wise kernel."""
    strides = [s for _, s in tensors_and_strides]
    cshape, cstrides = collapse(shape, *strides)
    if len(cshape) == 1:  # one row: no odometer needed
        return [(t._storage, _ZERO_START if t._offset == 0 else np.full(1, t._offset, _I64), st[0])
                for (t, _), st in zip(tensors_and_strides, cstrides)], cshape[0]
    shp = np.asarray(cshape[:-1], _I64)
    args = []
    for (t, _), st in zip(tensors_and_strides, cstrides):
        starts = K.positions(shp, np.asarray(st[:-1], _I64), t._offset)
        args.append((t._storage, starts, st[-1]))
    return args, cshape[-1]


def _bstrides(t, shape):
    if t._shape == shape:
        return t._strides
    return broadcast_strides(t._shape, t._strides, shape)


# --8<-- [start:unary_launch]
def unary(op: str, x, p0=_NAN, p1=_NAN, out_dtype=None):
    """A new tensor f(x) for the unary op named ``op``."""
    out = _new(x._shape, out_dtype or x.dtype)
    if out._storage.size:
        [(xs, starts, step)], n = _launch_args(x._shape, (x, x._strides))
        K.map_kernel(K.UNARY[op], float(p0), float(p1), xs, starts, step, n, out._storage)
    return out
# --8<-- [end:unary_launch]


# --8<-- [start:binary_launch]
def binary(op: str, a, b, out_dtype=None):
    """A new tensor f(a, b) with broadcasting; a and b share a dtype."""
    shape = a._shape if a._shape == b._shape else broadcast_shapes(a._shape, b._shape)
    out = _new(shape, out_dtype or a.dtype)
    if out._storage.size:
        [(as_, sa, pa), (bs, sb, pb)], n = _launch_args(
            shape, (a, _bstrides(a, shape)), (b, _bstrides(b, shape)))
        if pa == 0 and pb == 1 and op in ("add", "mul"):  # a broadcast left operand:
            as_, sa, pa, bs, sb, pb = bs, sb, pb, as_, sa, pa  # swap so the fast path applies
        K.zip_fast_kernel(K.BINARY[op], as_, sa, pa, bs, sb, pb, n, out._storage)
    return out
# --8<-- [end:binary_launch]


def compare(op: str, a, b):
    """A new bool tensor a <op> b with broadcasting."""
    shape = broadcast_shapes(a._shape, b._shape)
    out = _new(shape, bool_)
    if out._storage.size:
        [(as_, sa, pa), (bs, sb, pb)], n = _launch_args(
            shape, (a, _bstrides(a, shape)), (b, _bstrides(b, shape)))
        K.compare_kernel(K.COMPARE[op], as_, sa, pa, bs, sb, pb, n, out._storage)
    return out


def where(c, a, b):
    shape = broadcast_shapes(c._shape, a._shape, b._shape)
    out = _new(shape, a.dtype)
    if out._storage.size:
        [(cs, sc, pc), (as_, sa, pa), (bs, sb, pb)], n = _launch_args(
            shape, (c, _bstrides(c, shape)), (a, _bstrides(a, shape)), (b, _bstrides(b, shape)))
        K.where_kernel(cs, sc, pc, as_, sa, pa, bs, sb, pb, n, out._storage)
    return out


def assign(dst, src) -> None:
    """Copy ``src`` (broadcast to dst's shape, cast to its dtype) into ``dst``."""
    shape = dst._shape
    if numel(shape) == 0:
        return
    sstr = _bstrides(src, shape)
    cshape, (cd, cs) = collapse(shape, dst._strides, sstr)
    if 1 < len(cshape) <= 4:  # a few dims: nested loops, no row-start table
        pad = 4 - len(cshape)
        cshape, cd, cs = [1] * pad + cshape, [0] * pad + cd, [0] * pad + cs
        K.assign4_kernel(dst._storage, dst._offset, *cd, src._storage, src._offset, *cs, *cshape)
        return
    [(ds, sd, pd), (ss, s_s, ps)], n = _launch_args(shape, (dst, dst._strides), (src, sstr))
    K.assign_kernel(ds, sd, pd, ss, s_s, ps, n)


def copy(x, dtype=None):
    """A contiguous copy of ``x`` (optionally cast)."""
    out = _new(x._shape, dtype or x.dtype)
    assign(out, x)
    return out


# --8<-- [start:reduce_launch]
def _rows_last(x, dims):
    """Move ``dims`` to the end and return (kept_shape, x viewed as rows).

    The reduced dims become one row per output entry; when they are not
    contiguous with each other the input is copied first.
    """
    keep = [d for d in range(x.ndim) if d not in dims]
    perm = keep + list(dims)
    shape = tuple(x._shape[d] for d in perm)
    strides = tuple(x._strides[d] for d in perm)
    kept = shape[: len(keep)]
    n = numel(shape[len(keep):])
    cshape, [cstr] = collapse(shape[len(keep):] or (1,), strides[len(keep):] or (0,))
    if len(cshape) == 1 or n == 0:
        starts = K.positions(np.asarray(kept, _I64), np.asarray(strides[: len(keep)], _I64), x._offset)
        return kept, x._storage, starts, cstr[-1], n
    # Not one run: copy into a contiguous (kept..., reduced...) buffer.
    from sitp._tensor.tensor import Tensor

    view = Tensor._make(x._storage, shape, strides, x._offset, x.dtype)
    c = copy(view)
    starts = np.arange(numel(kept), dtype=_I64) * n
    return kept, c._storage, starts, 1, n


def reduce(op: str, x, dims, keepdim=False, out_dtype=None):
    """Reduce ``x`` over ``dims`` (a tuple of normalized dims)."""
    kept, xs, starts, step, n = _rows_last(x, dims)
    if out_dtype is None:
        out_dtype = bool_ if op in ("any", "all") else (int64 if x.dtype in (bool_, int64) and op in ("sum", "prod") else x.dtype)
    if n == 0 and op in ("max", "min"):
        raise IndexError(
            f"{op}(): cannot reduce over a dimension of size 0 (input shape {tuple(x._shape)})")
    out = _new(kept, out_dtype)
    zero = np.float64(0) if out_dtype.is_floating_point else (np.int64(0) if out_dtype is int64 else np.int64(0))
    if out_dtype is bool_:
        tmp = np.empty(out._storage.size, np.int64)
        K.reduce_kernel(K.REDUCE[op], xs, starts, step, n, zero, tmp)
        out._storage[:] = tmp != 0
    elif op in ("max", "min"):
        K.reduce_kernel(K.REDUCE[op], xs, starts, step, n, xs.dtype.type(0), out._storage)
    else:
        K.reduce_kernel(K.REDUCE[op], xs, starts, step, n, zero, out._storage)
    if keepdim:
        out = out.view(tuple(1 if d in dims else x._shape[d] for d in range(x.ndim)))
    return out
# --8<-- [end:reduce_launch]


def argreduce(x, dim, is_max, keepdim=False):
    """(values, indices) of the max/min along ``dim``."""
    kept, xs, starts, step, n = _rows_last(x, (dim,))
    if n == 0:
        raise IndexError(
            f"cannot compute {'max' if is_max else 'min'} over dim {dim} of size 0 "
            f"(input shape {tuple(x._shape)})")
    values = _new(kept, x.dtype)
    indices = _new(kept, int64)
    K.argreduce_kernel(is_max, xs, starts, step, n, values._storage, indices._storage)
    if keepdim:
        shape = tuple(1 if d == dim else x._shape[d] for d in range(x.ndim))
        values, indices = values.view(shape), indices.view(shape)
    return values, indices


def _move_last(x, dim):
    """x with ``dim`` moved last, as rows; returns (rows-tensor args, shape)."""
    perm = [d for d in range(x.ndim) if d != dim] + [dim]
    return x.permute(perm), perm


def softmax(x, dim, log=False):
    """Row-wise softmax (or log-softmax) along ``dim``; a new tensor."""
    xt, perm = _move_last(x, dim)
    out = _new(xt._shape, x.dtype)
    if out._storage.size:
        starts = K.positions(np.asarray(xt._shape[:-1], _I64), np.asarray(xt._strides[:-1], _I64), xt._offset)
        K.softmax_kernel(xt._storage, starts, xt._strides[-1], xt._shape[-1], log, out._storage)
    return out.permute(_inverse(perm))


def softmax_backward(y, g, dim, log=False):
    """Gradient of (log-)softmax along ``dim`` given its output ``y``."""
    yt, perm = _move_last(y, dim)
    gt, _ = _move_last(g, dim)
    yc, gc = yt.contiguous(), gt.contiguous()
    out = _new(yc._shape, y.dtype)
    n = yc._shape[-1] if yc.ndim else 1
    if out._storage.size:
        K.softmax_backward_kernel(yc._storage[yc._offset:], gc._storage[gc._offset:], out._storage.size // n, n, log, out._storage)
    return out.permute(_inverse(perm))


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


# --8<-- [start:matmul_launch]
def matmul(a, b):
    """(..., M, K) @ (..., K, N) with broadcast batch dims; both at least 2-D."""
    M, K_ = a._shape[-2:]
    K2, N = b._shape[-2:]
    if K_ != K2:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({_mm_shape(a)} and {_mm_shape(b)})")
    batch = broadcast_shapes(a._shape[:-2], b._shape[:-2])
    if b.ndim == 2 and a.ndim > 2:
        # (..., M, K) @ (K, N): one (prod(...) * M, K) @ (K, N) product, not a batch of
        # small ones with copies of b.
        out = matmul(a.reshape(-1, K_), b)
        return out.view(batch + (M, N))
    if a.ndim == 2 and b.ndim == 2:  # operands are read where they are, transposed or not
        return _wrap2(blas.matmul(as_numpy(a), as_numpy(b)), a.dtype)
    a3 = a.expand(batch + (M, K_)).contiguous().view(-1, M, K_)
    b3 = b.expand(batch + (K_, N)).contiguous().view(-1, K_, N)
    A = a3._storage[a3._offset:a3._offset + a3.numel()].reshape(a3._shape)
    B = b3._storage[b3._offset:b3._offset + b3.numel()].reshape(b3._shape)
    C = blas.matmul(A[0], B[0]) if A.shape[0] == 1 else blas.bmm(A, B)
    from sitp._tensor.tensor import Tensor

    shape = batch + (M, N)
    return Tensor._make(C.reshape(-1), shape, contiguous_strides(shape), 0, a.dtype)
# --8<-- [end:matmul_launch]


def flat(t):
    """The entries of a contiguous CPU tensor as a 1-D view of its storage (no copy)."""
    return t._storage[t._offset:t._offset + t.numel()]


def as_numpy(t):
    """A numpy view of tensor ``t``'s entries (its shape and strides, no copy)."""
    st = t._storage
    isz = st.itemsize
    return np.ndarray(t._shape, st.dtype, st, t._offset * isz, tuple(s * isz for s in t._strides))


def _wrap2(C, dtype):
    """A tensor over the new C-contiguous 2-D array ``C``."""
    return _tensor()._make(C.reshape(-1), C.shape, (C.shape[1], 1), 0, dtype)


def linear(x, w, bias=None):
    """x @ w.T + bias for 2-D x (M, K) and w (N, K): one GEMM that starts from the bias."""
    return _wrap2(blas.matmul(as_numpy(x), as_numpy(w).T,
                              None if bias is None else as_numpy(bias)), x.dtype)


def _mm_shape(t):
    s = t._shape
    return f"{s[-2]}x{s[-1]}" if len(s) == 2 else str(tuple(s))


# --8<-- [start:index_launch]
def _plan(x, a, idx):
    """Positions for indexing dims a..a+k of x with a (k, m) array of index tuples.

    Entry (p, n, q) of the result sits at pre[p] + table[n] + post[q] in x's
    storage: ``pre`` walks the dims before the indexed ones, ``table`` holds
    each index tuple's offset, ``post`` walks the dims after.
    """
    k = idx.shape[0]
    shp, st = x._shape, x._strides
    table = np.empty(idx.shape[1], _I64)
    bad = K.index_table(idx, np.asarray(shp[a:a + k], _I64), np.asarray(st[a:a + k], _I64), table)
    if bad >= 0:
        for j in range(k):
            i, size = int(idx[j, bad]), shp[a + j]
            if not -size <= i < size:
                raise IndexError(
                    f"index {i} is out of bounds for dimension {a + j} with size {size} "
                    f"(tensor of shape {tuple(shp)})")
    pre = K.positions(np.asarray(shp[:a], _I64), np.asarray(st[:a], _I64), x._offset)
    post = K.positions(np.asarray(shp[a + k:], _I64), np.asarray(st[a + k:], _I64), 0)
    return pre, table, post


def take(x, a, idx):
    """A flat array of x's entries picked by index tuples on dims a..a+k."""
    pre, table, post = _plan(x, a, idx)
    out = np.empty(pre.size * table.size * post.size, x.dtype.np)
    K.take_kernel(x._storage, pre, table, post, out)
    return out


def put(x, a, idx, values, accumulate):
    """The inverse of :func:`take`: write (or add) ``values`` into x in place.

    ``values`` is a tensor with the taken shape (it is made contiguous).
    """
    pre, table, post = _plan(x, a, idx)
    v = values.contiguous()
    K.put_kernel(x._storage, pre, table, post, v._storage[v._offset:v._offset + v.numel()], accumulate)
# --8<-- [end:index_launch]


def gather(x, dim, index):
    """torch.gather: out[..., j, ...] = x[..., index[..., j, ...], ...] along dim."""
    istr = list(x._strides)
    istr[dim] = 0
    base = K.positions(np.asarray(index._shape, _I64), np.asarray(istr, _I64), x._offset)
    idx = index.contiguous()
    pos = np.empty(base.size, _I64)
    bad = K.gather_positions(base, idx._storage[idx._offset:], x._strides[dim], x._shape[dim], pos)
    if bad >= 0:
        raise RuntimeError(  # torch's type for gather (IndexError is for x[i])
            f"gather(): index {int(idx._storage[idx._offset + bad])} is out of bounds for "
            f"dimension {dim} with size {x._shape[dim]}")
    out = _new(index._shape, x.dtype)
    K.gather_kernel(x._storage, pos, out._storage)
    return out


def scatter_add(shape, dim, index, src, dtype):
    """zeros(shape).scatter_add_(dim, index, src): the backward of gather."""
    out = _new(shape, dtype)
    out._storage[:] = 0
    strides = list(contiguous_strides(shape))
    dstride = strides[dim]
    strides[dim] = 0
    base = K.positions(np.asarray(index._shape, _I64), np.asarray(strides, _I64), 0)
    idx = index.contiguous()
    pos = np.empty(base.size, _I64)
    bad = K.gather_positions(base, idx._storage[idx._offset:], dstride, shape[dim], pos)
    if bad >= 0:
        raise RuntimeError(f"scatter_add(): index out of bounds for dimension {dim} with size {shape[dim]}")
    s = src.contiguous()
    K.scatter_add_kernel(out._storage, pos, s._storage[s._offset:s._offset + s.numel()])
    return out


def tri(x, diagonal, upper):
    xc = x.contiguous()
    out = _new(x._shape, x.dtype)
    rows, cols = x._shape[-2:]
    K.tri_kernel(xc._storage[xc._offset:xc._offset + xc.numel()], rows, cols, diagonal, upper, out._storage)
    return out


def nonzero(x):
    """(count, ordinals) of the nonzero entries of x, row-major."""
    out = np.empty(max(x.numel(), 1), _I64)
    if x.numel() == 0:
        return out[:0]
    [(xs, starts, step)], n = _launch_args(x._shape, (x, x._strides))
    c = K.nonzero_kernel(xs, starts, step, n, out)
    return out[:c]


def arange(start, end, step, dtype):
    n = max(0, math.ceil((end - start) / step))
    out = _new((n,), dtype)
    K.arange_kernel(dtype.np.type(start) if dtype is not float32 else np.float64(start), step, out._storage)
    return out


def cumsum(x, dim):
    xt, perm = _move_last(x, dim)
    out = _new(xt._shape, x.dtype)
    if out._storage.size:
        starts = K.positions(np.asarray(xt._shape[:-1], _I64), np.asarray(xt._strides[:-1], _I64), xt._offset)
        K.cumsum_kernel(xt._storage, starts, xt._strides[-1], xt._shape[-1], out._storage)
    return out.permute(_inverse(perm))


def multinomial(p, num_samples, replacement, uniforms):
    pc = p.contiguous().to(float64)
    n_rows = pc.numel() // pc._shape[-1]
    out = np.empty(n_rows * num_samples, _I64)
    K.multinomial_kernel(pc._storage[pc._offset:], n_rows, pc._shape[-1], uniforms, num_samples, replacement, out)
    return out
