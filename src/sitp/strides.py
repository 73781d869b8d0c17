"""Shapes and strides: the arithmetic behind every view (chapter 2.1).

A tensor is a flat buffer (its *storage*) plus three pieces of metadata:

* ``shape``   — how many entries along each dimension, e.g. ``(2, 3)``;
* ``strides`` — how many storage *elements* to skip to move one step along
  each dimension, e.g. ``(3, 1)`` for a row-major 2×3 matrix;
* ``offset``  — where element ``(0, 0, ...)`` sits in the storage.

Entry ``idx`` lives at ``offset + sum(i * s for i, s in zip(idx, strides))``.
Everything here is plain Python on tuples of ints: the kernels in
``sitp.kernels.cpu.kernels`` do the same arithmetic inside their loops.
"""

from __future__ import annotations

import math
from typing import Sequence

Shape = tuple[int, ...]
Strides = tuple[int, ...]


# --8<-- [start:contiguous_strides]
def contiguous_strides(shape: Sequence[int]) -> Strides:
    """Row-major ("C order") strides for ``shape``: the last dim moves fastest.

    >>> contiguous_strides((2, 3, 4))
    (12, 4, 1)
    >>> contiguous_strides(())
    ()
    """
    strides = []
    step = 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


# --8<-- [end:contiguous_strides]


# --8<-- [start:index_to_position]
def index_to_position(index: Sequence[int], strides: Sequence[int], offset: int = 0) -> int:
    """Where the entry at multi-index ``index`` lives in the storage.

    >>> index_to_position((1, 2), (3, 1))
    5
    >>> index_to_position((1, 2), (1, 2))   # the transpose of a 3x2 matrix
    5
    """
    return offset + sum(i * s for i, s in zip(index, strides))


# --8<-- [end:index_to_position]


# --8<-- [start:position_to_index]
def ordinal_to_index(ordinal: int, shape: Sequence[int]) -> Shape:
    """The multi-index of the ``ordinal``-th entry in row-major order.

    >>> ordinal_to_index(5, (2, 3))
    (1, 2)
    """
    index = []
    for n in reversed(shape):
        ordinal, i = divmod(ordinal, n)
        index.append(i)
    return tuple(reversed(index))


# --8<-- [end:position_to_index]


def numel(shape: Sequence[int]) -> int:
    """Number of entries in a tensor of ``shape`` (1 for a scalar)."""
    return math.prod(shape)


# --8<-- [start:is_contiguous]
def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """True when ``strides`` are the row-major strides of ``shape``.

    Dimensions of size 1 may have any stride, as in PyTorch.
    """
    expected = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n == 1:
            continue
        if s != expected:
            return False
        expected *= n
    return True


# --8<-- [end:is_contiguous]


def normalize_dim(dim: int, ndim: int, *, name: str = "dim") -> int:
    """Turn a possibly negative ``dim`` into ``0 <= dim < ndim``.

    Raises:
        IndexError: naming the dim and the valid range.
    """
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{name} must be an int, got {type(dim).__name__}")
    lo, hi = (-ndim, ndim - 1) if ndim > 0 else (-1, 0)
    if not lo <= dim <= hi:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{lo}, {hi}], but got {dim})"
        )
    return dim % ndim if ndim > 0 else 0


def normalize_dims(dims, ndim: int) -> tuple[int, ...]:
    """Normalize one dim, a sequence of dims, or ``None`` (all dims)."""
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int):  # one dim: nothing can repeat
        return (normalize_dim(dims, ndim),)
    out = tuple([normalize_dim(d, ndim) for d in dims])
    if len(set(out)) != len(out):
        raise RuntimeError(f"dim {tuple(dims)} appears multiple times in the list of dims")
    return out


# --8<-- [start:broadcast_shapes]
def broadcast_shapes(*shapes: Sequence[int]) -> Shape:
    """The shape that ``shapes`` broadcast to, by NumPy's rules.

    Align shapes on the right; two sizes agree when they are equal or one is 1.

    >>> broadcast_shapes((3, 1), (4,))
    (3, 4)
    >>> broadcast_shapes((2, 3), (3, 2))
    Traceback (most recent call last):
      ...
    RuntimeError: shapes (2, 3) and (3, 2) cannot be broadcast together (dim -1: 3 vs 2)
    """
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for k, n in reversed(list(enumerate(shape, start=ndim - len(shape)))):
            if out[k] == 1:
                out[k] = n
            elif n != 1 and n != out[k]:
                others = " and ".join(str(tuple(s)) for s in shapes)
                raise RuntimeError(  # torch's type for a size mismatch
                    f"shapes {others} cannot be broadcast together "
                    f"(dim {k - ndim}: {out[k]} vs {n})"
                )
    return tuple(out)


# --8<-- [end:broadcast_shapes]

# Memos of broadcast_shapes and broadcast_strides, keyed by their arguments: a model
# calls them with the same few shapes over and over, and the loops above cost a
# microsecond or two each time. A memo is cleared when full; arguments that are not
# keys (lists) go to the functions above directly.
_MEMO_SIZE = 4096
_BROADCAST: dict = {}
_BROADCAST_STRIDES: dict = {}
_broadcast_shapes = broadcast_shapes


def broadcast_shapes(*shapes: Sequence[int]) -> Shape:  # noqa: F811 (the memoised version)
    try:
        out = _BROADCAST.get(shapes)
    except TypeError:  # a shape given as a list
        return _broadcast_shapes(*shapes)
    if out is None:
        out = _broadcast_shapes(*shapes)
        if len(_BROADCAST) >= _MEMO_SIZE:
            _BROADCAST.clear()
        _BROADCAST[shapes] = out
    return out


broadcast_shapes.__doc__ = _broadcast_shapes.__doc__


# --8<-- [start:broadcast_strides]
def broadcast_strides(
    shape: Sequence[int], strides: Sequence[int], target: Sequence[int]
) -> Strides:
    """Strides that make a tensor of ``shape`` look like one of ``target``.

    A broadcast dimension gets stride 0: every step along it reads the same
    entry again, so no data is copied.

    >>> broadcast_strides((3, 1), (1, 1), (2, 3, 4))
    (0, 1, 0)
    """
    pad = len(target) - len(shape)
    if pad < 0:
        raise RuntimeError(f"cannot broadcast shape {tuple(shape)} to {tuple(target)}")
    out = [0] * pad
    for n, s, t in zip(shape, strides, target[pad:]):
        if n == t:
            out.append(s)
        elif n == 1:
            out.append(0)
        else:
            raise RuntimeError(f"cannot broadcast shape {tuple(shape)} to {tuple(target)}")
    return tuple(out)


# --8<-- [end:broadcast_strides]

_broadcast_strides = broadcast_strides


def broadcast_strides(shape, strides, target) -> Strides:  # noqa: F811 (memoised, as above)
    key = (shape, strides, target)
    try:
        out = _BROADCAST_STRIDES.get(key)
    except TypeError:  # lists
        return _broadcast_strides(shape, strides, target)
    if out is None:
        out = _broadcast_strides(shape, strides, target)
        if len(_BROADCAST_STRIDES) >= _MEMO_SIZE:
            _BROADCAST_STRIDES.clear()
        _BROADCAST_STRIDES[key] = out
    return out


broadcast_strides.__doc__ = _broadcast_strides.__doc__


# --8<-- [start:view_strides]
def view_strides(shape: Sequence[int], strides: Sequence[int], new_shape: Sequence[int]):
    """Strides for viewing ``(shape, strides)`` as ``new_shape`` without a copy.

    Returns ``None`` when no such strides exist (the data would have to move).
    The idea: split both shapes into chunks of dimensions whose product agrees;
    inside each chunk of the old shape the strides must be "contiguous with
    each other" (stride[i] == stride[i+1] * shape[i+1]), and then the chunk can
    be re-cut into any sizes with the same product.

    >>> view_strides((2, 3), (3, 1), (3, 2))
    (2, 1)
    >>> view_strides((2, 3), (1, 2), (6,)) is None   # a transpose cannot be flattened
    True
    """
    if numel(shape) != numel(new_shape):
        return None
    if numel(shape) == 0:
        return contiguous_strides(new_shape)
    # Drop size-1 dims of the old shape: their strides are irrelevant.
    old = [(n, s) for n, s in zip(shape, strides) if n != 1]
    new_strides = [0] * len(new_shape)
    i = 0  # position in old
    j = 0  # position in new_shape
    while j < len(new_shape):
        if new_shape[j] == 1:
            # A new size-1 dim may take any stride; use what a contiguous view would.
            new_strides[j] = (old[i][1] * old[i][0]) if i < len(old) else 1
            j += 1
            continue
        # Gather a chunk of old dims and new dims with equal products.
        chunk_old = [old[i]]
        p_old = old[i][0]
        i += 1
        chunk_new = [j]
        p_new = new_shape[j]
        j += 1
        while p_old != p_new:
            if p_old < p_new:
                chunk_old.append(old[i])
                p_old *= old[i][0]
                i += 1
            else:
                chunk_new.append(j)
                p_new *= new_shape[j]
                j += 1
        # The old chunk must be one contiguous run.
        for (n0, s0), (n1, s1) in zip(chunk_old, chunk_old[1:]):
            if s0 != s1 * n1:
                return None
        step = chunk_old[-1][1]
        for k in reversed(chunk_new):
            new_strides[k] = step
            step *= new_shape[k]
    return tuple(new_strides)


# --8<-- [end:view_strides]


def infer_shape(shape: Sequence[int], total: int) -> Shape:
    """Resolve a single ``-1`` in a requested shape, checking sizes.

    >>> infer_shape((2, -1), 6)
    (2, 3)
    """
    shape = tuple(shape)
    for n in shape:
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"shape entries must be ints, got {shape}")
    if shape.count(-1) > 1:
        raise RuntimeError(f"only one dimension can be inferred, got shape {shape}")
    if any(n < -1 for n in shape):
        raise RuntimeError(f"invalid shape dimension in {shape}")
    if -1 in shape:
        known = math.prod(n for n in shape if n != -1)
        if known == 0 or total % known != 0:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {total}")
        shape = tuple(total // known if n == -1 else n for n in shape)
    if math.prod(shape) != total:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {total}")
    return shape
