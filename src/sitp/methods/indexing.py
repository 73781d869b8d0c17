"""``x[key]`` and ``x[key] = value`` with NumPy/PyTorch semantics.

Indexing happens in two steps:

1. *Basic* indexing — ints, slices (with steps), ``None`` and ``...`` — only
   changes shape, strides and offset: a view, no copy.
2. *Advanced* indexing — integer tensors (or lists) and boolean masks — picks
   entries by position and so must copy (a gather, ``take`` in the backend). Index
   arrays broadcast together; when they are separated by a slice their dims
   go first, as in NumPy.
"""

from __future__ import annotations

import numpy as np

from sitp._tensor import dispatch
from sitp._tensor.creation import _scalar, tensor
from sitp._tensor.tensor import Tensor
from sitp.autograd import derivatives as ops
from sitp.autograd.function import check_inplace as _check_inplace
from sitp.autograd.function import refuse_indexed_write as _refuse_indexed_write
from sitp.autograd.grad_mode import _state as _grad_state
from sitp.dtypes import bool_, int64
from sitp.functional import stack
from sitp.strides import broadcast_shapes, normalize_dim, numel

_ADV = object()  # marks a dim that an index array will select


def _as_index_tensor(k):
    if isinstance(k, Tensor):
        t = k
    elif isinstance(k, (list, np.ndarray)):
        t = tensor(k)
    else:
        return None
    if t.dtype is not int64 and t.dtype is not bool_:
        raise IndexError(
            f"tensors used as indices must be long, int or bool tensors (got {t.dtype})"
        )
    return t


def _normalize_key(x, key):
    """A tuple of index items with ``...`` expanded and lists turned into tensors."""
    if not isinstance(key, tuple):
        key = (key,)
    items = []
    for k in key:
        t = _as_index_tensor(k)
        if t is not None:
            items.append(t)
        elif k is None or k is Ellipsis or isinstance(k, slice):
            items.append(k)
        elif isinstance(k, (bool, np.bool_)):
            raise IndexError("indexing with a Python bool is not supported by sitp")
        elif isinstance(k, (int, np.integer)):
            items.append(int(k))
        else:
            raise TypeError(
                f"only integers, slices (`:`), ellipsis (`...`), None and long or bool tensors "
                f"are valid indices (got {type(k).__name__})"
            )
    used = sum(
        1 if not hasattr(k, "dtype") else (k.ndim if k.dtype is bool_ else 1)
        for k in items
        if k is not None and k is not Ellipsis
    )
    if used > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    if sum(k is Ellipsis for k in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    ell = [i for i, k in enumerate(items) if k is Ellipsis]
    if ell:
        i = ell[0]
        items[i : i + 1] = [slice(None)] * (x.ndim - used)
    return items


# --8<-- [start:basic_index]
def _decompose(x, key):
    """Split ``key`` into a view of x (shape, strides, offset) and index arrays.

    Returns (shape, strides, offset, basic_key, adv) where ``adv`` lists
    (view_dim, index_tensor) for every integer index array (masks already
    turned into integer arrays) and ``basic_key`` is the key with arrays
    replaced by full slices (used by the backward of the view).
    """
    items = _normalize_key(x, key)
    shape, strides, offset = [], [], x._offset
    basic_key, adv = [], []
    d = 0  # the dim of x the next item applies to
    for k in items:
        if k is None:
            shape.append(1)
            strides.append(0)
            basic_key.append(None)
        elif isinstance(k, int):
            n = x._shape[d]
            if not -n <= k < n:
                raise IndexError(f"index {k} is out of bounds for dimension {d} with size {n}")
            offset += (k % n) * x._strides[d]
            basic_key.append(k)
            d += 1
        elif isinstance(k, slice):
            if k.step is not None and k.step <= 0:
                raise ValueError("step must be greater than zero")
            start, stop, step = k.indices(x._shape[d])
            size = max(0, (stop - start + step - 1) // step)
            offset += start * x._strides[d] if size else 0
            shape.append(size)
            strides.append(x._strides[d] * step)
            basic_key.append(k)
            d += 1
        elif k.dtype is bool_:  # a mask over k.ndim dims -> one int array per dim
            mshape = tuple(x._shape[d : d + k.ndim])
            if tuple(k.shape) != mshape:
                raise IndexError(
                    f"The shape of the mask {tuple(k.shape)} at index {d} does not match the "
                    f"shape of the indexed tensor {mshape}"
                )
            for col in k.nonzero(as_tuple=True):
                adv.append((len(shape), col))
                shape.append(x._shape[d])
                strides.append(x._strides[d])
                basic_key.append(slice(None))
                d += 1
        else:
            adv.append((len(shape), k))
            shape.append(x._shape[d])
            strides.append(x._strides[d])
            basic_key.append(slice(None))
            d += 1
    shape += x._shape[d:]
    strides += x._strides[d:]
    return tuple(shape), tuple(strides), offset, tuple(basic_key), adv


# --8<-- [end:basic_index]


def _adv_plan(view, adv):
    """Arrange the indexed dims: returns (view, a, idx (k, m) int64, index shape).

    ``idx`` is a numpy array, or a GPU tensor when the tensor and all index
    arrays live on the GPU (then the index values never visit the host).
    """
    dims = [p for p, _ in adv]
    if view.is_cuda and all(t.is_cuda for _, t in adv):
        try:
            bshape = broadcast_shapes(*[tuple(t.shape) for _, t in adv])
        except RuntimeError:
            raise IndexError(
                "shape mismatch: indexing tensors could not be broadcast together with shapes "
                + " ".join(str(tuple(t.shape)) for _, t in adv)
            ) from None
        idx = stack([t.expand(bshape).reshape(-1) for _, t in adv]).contiguous()
        if dims != list(range(dims[0], dims[0] + len(dims))):
            rest = [i for i in range(view.ndim) if i not in dims]
            return view.permute(dims + rest), 0, idx, bshape
        return view, dims[0], idx, bshape
    arrays = [t._np() for _, t in adv]
    try:
        bshape = np.broadcast_shapes(*[a.shape for a in arrays])
    except ValueError:
        raise IndexError(
            "shape mismatch: indexing tensors could not be broadcast together with shapes "
            + " ".join(str(tuple(a.shape)) for a in arrays)
        ) from None
    idx = np.stack([np.broadcast_to(a, bshape).reshape(-1) for a in arrays]) if arrays else None
    if dims == list(range(dims[0], dims[0] + len(dims))):
        return view, dims[0], np.ascontiguousarray(idx, dtype=np.int64), bshape
    # Separated index arrays: their dims move to the front (NumPy's rule).
    rest = [i for i in range(view.ndim) if i not in dims]
    return view.permute(dims + rest), 0, np.ascontiguousarray(idx, dtype=np.int64), bshape


def _basic(x, key):
    """``_decompose`` for the commonest keys, ints, slices and one ``...`` only
    (``x[:, i]``, ``x[a:b]``, ``x[..., :d]``): (shape, strides, offset, key as a tuple,
    ``...`` expanded), what ``_decompose`` returns for them. None for any other key, or
    an int out of range, a step that is not positive, more items than dims, two ``...``:
    ``_decompose`` then, with its checks and errors."""
    items = key if key.__class__ is tuple else (key,)
    for i, k in enumerate(items):
        if k is Ellipsis:  # x[..., :d]: full slices for the dims the other items leave
            rest = items[i + 1 :]
            if any(r is Ellipsis for r in rest) or len(items) - 1 > len(x._shape):
                return None
            items = items[:i] + (slice(None),) * (len(x._shape) - len(items) + 1) + rest
            break
    if len(items) > len(x._shape):
        return None
    shape, strides, offset = [], [], x._offset
    for d, k in enumerate(items):
        if k.__class__ is slice:
            step = k.step
            if step is not None and step <= 0:
                return None
            start, stop, step = k.indices(x._shape[d])
            size = max(0, (stop - start + step - 1) // step)
            if size:
                offset += start * x._strides[d]
            shape.append(size)
            strides.append(x._strides[d] * step)
        elif k.__class__ is int:
            n = x._shape[d]
            if not -n <= k < n:
                return None
            offset += (k % n) * x._strides[d]
        else:
            return None
    d = len(items)
    return tuple(shape) + x._shape[d:], tuple(strides) + x._strides[d:], offset, items


def _one_index_tensor(x, key):
    """``x[t]`` for one int64 index tensor ``t``, both on the host and ``x`` with a dim to
    index (an embedding's lookup, ``weight[idx]``): the (1, m) index array that
    ``_adv_plan`` would make, without its broadcasting and stacking. None otherwise."""
    if key.__class__ is not Tensor or key.dtype is not int64 or not x._shape:
        return None
    if x._storage.__class__ is not np.ndarray or key._storage.__class__ is not np.ndarray:
        return None
    # read through _np and copied, as _adv_plan does: sitp.compile's tracer watches that
    # read (an index array computed from the program's input), and a view of the key's
    # storage would be taken for the key itself
    return np.array(key._np(), np.int64).reshape(1, numel(key._shape))


def getitem(x, key):
    idx = _one_index_tensor(x, key)
    if idx is not None:  # what _decompose and _adv_plan give for this key, made directly
        return ops.Take.apply(x, 0, idx, key._shape)
    basic = _basic(x, key)
    if basic is not None:  # a view; without a graph to record, Slice.forward's value
        shape, strides, offset, basic_key = basic
        if shape == x._shape and strides == x._strides and offset == x._offset:
            return x
        if x.requires_grad and _grad_state.enabled:
            return ops.Slice.apply(x, shape, strides, offset, basic_key)
        return x._alias(shape, strides, offset)
    shape, strides, offset, basic_key, adv = _decompose(x, key)
    same = shape == tuple(x._shape) and strides == x._strides and offset == x._offset
    view = x if same else ops.Slice.apply(x, shape, strides, offset, basic_key)
    if not adv:
        return view
    view, a, idx, bshape = _adv_plan(view, adv)
    return ops.Take.apply(view, a, idx, bshape)


def setitem(x, key, value, accumulate=False):
    """Write ``value`` (a tensor or scalar, broadcast) into ``x[key]`` in place."""
    shape, strides, offset, _, adv = _decompose(x, key)
    view = x._alias(shape, strides, offset)
    if isinstance(value, Tensor):
        v = value.detach().to(x.dtype)
    elif isinstance(value, (list, np.ndarray)):
        v = tensor(value, dtype=x.dtype)
    else:
        v = _scalar(value, x.dtype)
    if not adv:
        _check_broadcast(v, view.shape)
        if accumulate:
            v = view + v
        dispatch.of(view).assign(view, v)
        return
    view, a, idx, bshape = _adv_plan(view, adv)
    k = idx.shape[0]
    out_shape = tuple(view.shape[:a]) + tuple(bshape) + tuple(view.shape[a + k :])
    _check_broadcast(v, out_shape)
    dispatch.of(view).put(view, a, idx, v.expand(out_shape), accumulate)


def _check_broadcast(v, shape):
    try:
        v.expand(shape) if v.ndim <= len(shape) else v.view(shape)
    except (RuntimeError, ValueError):
        raise RuntimeError(
            f"shape mismatch: value tensor of shape {tuple(v.shape)} cannot be broadcast to "
            f"indexing result of shape {tuple(shape)}"
        ) from None


class TensorIndexing:
    """Indexing, gather and masked fills."""

    __slots__ = ()

    # ---------------------------------------------------------------- indexing
    def __getitem__(self, key):
        return getitem(self, key)

    def __setitem__(self, key, value):
        if _check_inplace(self, value):
            _refuse_indexed_write(self)
        setitem(self, key, value)
        self._vc[0] += 1

    def index_select(self, dim: int, index: "Tensor") -> "Tensor":
        dim = normalize_dim(dim, self.ndim)
        if not isinstance(index, Tensor) or index.ndim > 1 or index.dtype is not int64:
            raise RuntimeError("index_select(): index must be a 1-D int64 tensor")
        try:
            return self[(slice(None),) * dim + (index,)]
        except IndexError as e:  # torch: RuntimeError for index_select, IndexError for x[i]
            raise RuntimeError(f"index_select(): {e}") from None

    def gather(self, dim: int, index: "Tensor") -> "Tensor":
        """``out[i][j] = self[i][index[i][j]]`` for dim=1 (and so on), as ``torch.gather``."""
        dim = normalize_dim(dim, self.ndim)
        if not isinstance(index, Tensor) or index.dtype is not int64:
            raise RuntimeError("gather(): Expected dtype int64 for index")
        if index.ndim != self.ndim:
            raise RuntimeError(
                f"Index tensor must have the same number of dimensions as input tensor "
                f"(index {tuple(index.shape)}, input {tuple(self.shape)})"
            )
        for d in range(self.ndim):
            if d != dim and index.shape[d] > self.shape[d]:
                raise RuntimeError(
                    f"Size does not match at dimension {d} expected index {tuple(index.shape)} "
                    f"to be smaller than self {tuple(self.shape)} apart from dimension {dim}"
                )
        return ops.Gather.apply(self, dim, index)

    def masked_fill(self, mask: "Tensor", value) -> "Tensor":
        if not isinstance(mask, Tensor) or mask.dtype is not bool_:
            raise RuntimeError("masked_fill only supports boolean masks")
        broadcast_shapes(mask.shape, self.shape)
        if isinstance(value, Tensor):
            v = value.to(self.dtype)
        else:
            v = _scalar(value, self.dtype)
        if (self.requires_grad or v.requires_grad) and _grad_state.enabled:
            out = ops.Where.apply(mask, v, self)
        else:  # nothing to record: Where.forward's value
            out = dispatch.of(mask, v, self).where(mask, v, self)
        if tuple(out.shape) != tuple(self.shape):
            raise RuntimeError(
                f"masked_fill: mask of shape {tuple(mask.shape)} cannot be broadcast to "
                f"the tensor's shape {tuple(self.shape)}"
            )
        return out

    def masked_fill_(self, mask, value) -> "Tensor":
        return self.copy_(self.masked_fill(mask, value))
