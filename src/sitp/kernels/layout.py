"""Layouts for the backends: pure index arithmetic that both backends share (chapter 2.2).

Nothing here touches a tensor's data or imports numba.cuda; the CPU backend
(``sitp/kernels/cpu/ops.py``) and the CUDA backend (``sitp/kernels/cuda/ops.py``)
both import it, and not each other.

* :func:`positions` / :func:`row_starts`: the odometer over a strided view (compiled by
  numba for the host: the CUDA backend plans its gathers with it too);
* :func:`collapse`: merge the dims that are contiguous in every operand;
* :func:`plan` and :func:`index_table`: where advanced indexing reads and writes;
* views of an operand without a copy: :func:`permuted`, :func:`reshaped` (of a dense
  operand), :func:`expanded`, :func:`inverse` of a permutation.

An *operand* is any object with ``_storage, _shape, _strides, _offset, dtype`` and the
classmethod ``_make(storage, shape, strides, offset, dtype)`` (sitp's ``Tensor``); a view
made here is ``x._make(x._storage, ...)`` with new shape and strides, so it is of the
operand's own class and records nothing (no autograd: this is below it).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sitp.strides import broadcast_strides, contiguous_strides, is_contiguous

_I64 = np.int64

_STRIDES: dict = {}  # shape -> contiguous strides, memoised: ops make the same shapes again and again


def strides_of(shape) -> tuple:
    """The contiguous (row-major) strides of ``shape`` (a tuple), memoised."""
    strides = _STRIDES.get(shape)
    if strides is None:
        if len(_STRIDES) > 4096:
            _STRIDES.clear()
        strides = _STRIDES[shape] = contiguous_strides(shape)
    return strides


def dense(x) -> bool:
    """Whether operand ``x`` is row-major contiguous (at any offset)."""
    return is_contiguous(x._shape, x._strides)


def permuted(x, perm):
    """A view of ``x`` with its dims in the order ``perm`` (as ``x.permute(perm)``)."""
    sh, st = x._shape, x._strides
    return x._make(
        x._storage, tuple(sh[p] for p in perm), tuple(st[p] for p in perm), x._offset, x.dtype
    )


def reshaped(x, shape):
    """A view of a *dense* operand ``x`` with another shape of as many entries."""
    shape = tuple(shape)
    return x._make(x._storage, shape, strides_of(shape), x._offset, x.dtype)


def expanded(x, shape):
    """A view of ``x`` broadcast to ``shape`` (stride 0 along the broadcast dims)."""
    shape = tuple(shape)
    if x._shape == shape:
        return x
    return x._make(
        x._storage, shape, broadcast_strides(x._shape, x._strides, shape), x._offset, x.dtype
    )


def inverse(perm):
    """The permutation that undoes ``perm``."""
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def last(ndim, dim):
    """The permutation that moves ``dim`` to the end of ``ndim`` dims."""
    return [d for d in range(ndim) if d != dim] + [dim]


# --8<-- [start:row_starts]
@njit(cache=True)
def positions(shape, strides, offset):
    """Storage position of every entry of a strided view, in row-major order.

    An odometer: bump the last index; when it rolls over its size, reset it
    and carry into the one before, adjusting the position by the strides.
    """
    ndim = shape.size
    n = 1
    for k in range(ndim):
        n *= shape[k]
    out = np.empty(n, np.int64)
    if n == 0:
        return out
    idx = np.zeros(ndim, np.int64)
    pos = offset
    for r in range(n):
        out[r] = pos
        k = ndim - 1
        while k >= 0:
            idx[k] += 1
            pos += strides[k]
            if idx[k] < shape[k]:
                break
            pos -= strides[k] * shape[k]
            idx[k] = 0
            k -= 1
    return out


def row_starts(shape, strides, offset):
    """Where each row (the last dimension) of a strided view begins."""
    return positions(shape[:-1], strides[:-1], offset)


# --8<-- [end:row_starts]


# --8<-- [start:index_table]
@njit(cache=True)
def index_table(idx, sizes, strides, table):
    """Storage offsets for advanced indexing with k broadcast index arrays.

    ``idx`` is (k, m): the m index tuples; entry ``i`` along dim k adds
    ``i * strides[k]`` (negative indices count from the end). Returns -1 when
    all are in range, else the position of the first bad index tuple.
    """
    k_dims, m = idx.shape
    for n in range(m):
        t = 0
        for k in range(k_dims):
            i = idx[k, n]
            if i < 0:
                i += sizes[k]
            if i < 0 or i >= sizes[k]:
                return n
            t += i * strides[k]
        table[n] = t
    return -1


# --8<-- [end:index_table]


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


# --8<-- [start:plan]
def plan(shape, strides, offset, a, idx):
    """Positions for indexing dims a..a+k of a strided view with a (k, m) array of index tuples.

    Entry (p, n, q) of the result sits at pre[p] + table[n] + post[q] in the view's
    storage: ``pre`` walks the dims before the indexed ones, ``table`` holds each index
    tuple's offset, ``post`` walks the dims after. Raises IndexError for an index out of
    range (negative indices count from the end).
    """
    k = idx.shape[0]
    table = np.empty(idx.shape[1], _I64)
    bad = index_table(
        idx, np.asarray(shape[a : a + k], _I64), np.asarray(strides[a : a + k], _I64), table
    )
    if bad >= 0:
        for j in range(k):
            i, size = int(idx[j, bad]), shape[a + j]
            if not -size <= i < size:
                raise IndexError(
                    f"index {i} is out of bounds for dimension {a + j} with size {size} "
                    f"(tensor of shape {tuple(shape)})"
                )
    pre, post = pre_post(shape, strides, offset, a, k)
    return pre, table, post


# --8<-- [end:plan]


def pre_post(shape, strides, offset, a, k):
    """The ``pre`` and ``post`` odometers of :func:`plan` (no index values needed)."""
    pre = positions(np.asarray(shape[:a], _I64), np.asarray(strides[:a], _I64), offset)
    post = positions(np.asarray(shape[a + k :], _I64), np.asarray(strides[a + k :], _I64), 0)
    return pre, post
