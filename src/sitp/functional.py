"""Free functions of the ``sitp`` namespace that take several tensors."""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from sitp._tensor.creation import _operands, arange, empty, full
from sitp._tensor.tensor import Tensor
from sitp.autograd import derivatives as ops
from sitp.dtypes import bool_, int64
from sitp.strides import broadcast_shapes, normalize_dim

return_types = namedtuple("return_types", ["values", "indices"])


def where(condition, input=None, other=None):
    """``input`` where ``condition`` is true, else ``other`` (broadcast)."""
    if input is None and other is None:
        return condition.nonzero(as_tuple=True)
    if not isinstance(condition, Tensor) or condition.dtype is not bool_:
        raise RuntimeError("where expected condition to be a boolean tensor")
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        raise TypeError("where(): at least one of input and other must be a tensor")
    a, b = _operands(input, other)
    broadcast_shapes(condition.shape, a.shape, b.shape)
    return ops.Where.apply(condition, a, b)


def cat(tensors, dim: int = 0) -> Tensor:
    """Join tensors along an existing dim; all other dims must match."""
    tensors = [t for t in tensors]
    if not tensors:
        raise RuntimeError("cat(): expected a non-empty list of Tensors")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"cat(): expected a sequence of Tensors, got {type(t).__name__}")
    # PyTorch skips legacy empty 1-D tensors
    nonempty = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or tensors[:1]
    ref = nonempty[0]
    dim = normalize_dim(dim, ref.ndim)
    for t in nonempty:
        if t.ndim != ref.ndim or any(
            t.shape[d] != ref.shape[d] for d in range(ref.ndim) if d != dim
        ):
            raise RuntimeError(
                f"Sizes of tensors must match except in dimension {dim}. Expected shape "
                f"{tuple(ref.shape)} (any size at dim {dim}) but got {tuple(t.shape)}"
            )
    d = ref.dtype
    for t in nonempty[1:]:
        d = d if d.rank >= t.dtype.rank else t.dtype
    return ops.Cat.apply(dim, *[t if t.dtype is d else t.to(d) for t in nonempty])


concat = cat
concatenate = cat


def stack(tensors, dim: int = 0) -> Tensor:
    """Join same-shape tensors along a new dim."""
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    shape = tuple(tensors[0].shape)
    for i, t in enumerate(tensors):
        if tuple(t.shape) != shape:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got {shape} at entry 0 "
                f"and {tuple(t.shape)} at entry {i}"
            )
    dim = normalize_dim(dim, len(shape) + 1)
    return cat([t.unsqueeze(dim) for t in tensors], dim)


def topk(x, k: int, dim: int = -1, largest: bool = True):
    """The k largest (or smallest) entries along ``dim`` and their indices, sorted.

    Computed by repeated argmax, fine for the small k of sampling (top-k
    sampling of a vocabulary); differentiable through ``gather``.
    """
    dim = normalize_dim(dim, x.ndim)
    n = x.shape[dim]
    if not 0 <= k <= n:
        raise RuntimeError(f"selected index k out of range (k={k}, size of dim {dim} is {n})")
    work = x.detach().clone()
    if not work.dtype.is_floating_point:
        work = work.double()
    fill = full((), -np.inf if largest else np.inf, dtype=work.dtype)
    idx = []
    for _ in range(k):
        i = work.argmax(dim, keepdim=True) if largest else work.argmin(dim, keepdim=True)
        idx.append(i)
        key_mask = _one_hot_along(i, n, dim, work.shape)
        work = ops.Where.apply(key_mask, fill, work)
    if not idx:
        shape = list(x.shape)
        shape[dim] = 0
        return return_types(empty(shape, dtype=x.dtype), empty(shape, dtype=int64))
    indices = cat(idx, dim)
    return return_types(x.gather(dim, indices), indices)


def _one_hot_along(i, n, dim, shape):
    pos_shape = [1] * len(shape)
    pos_shape[dim] = n
    return arange(n).view(pos_shape) == i


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """Rows of zeros with a 1 at each index (int64), as ``F.one_hot``."""
    if tensor.dtype is not int64:
        raise RuntimeError("one_hot is only applicable to index tensor of dtype int64")
    if num_classes == -1:
        num_classes = int(tensor.max().item()) + 1 if tensor.numel() else 0
    if tensor.numel() and (int(tensor.min().item()) < 0 or int(tensor.max().item()) >= num_classes):
        raise RuntimeError(
            f"one_hot: class values must be in [0, {num_classes}), got values in "
            f"[{int(tensor.min().item())}, {int(tensor.max().item())}]"
        )
    return (tensor.unsqueeze(-1) == arange(num_classes)).long()


def maximum(a, b):
    return a.maximum(b)


def minimum(a, b):
    return a.minimum(b)
