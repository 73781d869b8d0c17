"""Free functions of the ``sitp`` namespace that take several tensors."""

from __future__ import annotations

from collections import namedtuple

from sitp._tensor import dispatch
from sitp._tensor.creation import _operands, arange, full
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
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("cat(): expected a non-empty list of Tensors")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"cat(): expected a sequence of Tensors, got {type(t).__name__}")
    # PyTorch skips legacy empty 1-D tensors
    nonempty = [t for t in tensors if t._shape != (0,)] or tensors[:1]
    ref = nonempty[0]
    dim = normalize_dim(dim, len(ref._shape))
    rest = ref._shape[:dim] + ref._shape[dim + 1 :]  # the dims that must match
    for t in nonempty:
        sh = t._shape
        if len(sh) != len(ref._shape) or sh[:dim] + sh[dim + 1 :] != rest:
            raise RuntimeError(
                f"Sizes of tensors must match except in dimension {dim}. Expected shape "
                f"{tuple(ref.shape)} (any size at dim {dim}) but got {tuple(t.shape)}"
            )
    return ops.Cat.apply(dim, *_promoted(nonempty))


concat = cat
concatenate = cat


def stack(tensors, dim: int = 0) -> Tensor:
    """Join same-shape tensors along a new dim (one node: ``Stack``)."""
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"stack(): expected Tensor as element {i} in argument 0, but got {type(t).__name__}"
            )
    shape = tensors[0]._shape
    for i, t in enumerate(tensors):
        if t._shape != shape:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got {tuple(shape)} at entry 0 "
                f"and {tuple(t.shape)} at entry {i}"
            )
    dim = normalize_dim(dim, len(shape) + 1)
    return ops.Stack.apply(dim, *_promoted(tensors))


def _promoted(tensors):
    """``tensors``, each in the widest of their dtypes (cat's and stack's promotion)."""
    d = tensors[0].dtype
    for t in tensors:
        if t.dtype is not d and t.dtype.rank > d.rank:
            d = t.dtype
    return [t if t.dtype is d else t.to(d) for t in tensors]


def topk(x, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """The k largest (or smallest) entries along ``dim`` and their positions, in that order.

    A NaN counts as larger than any number, as in torch; of equal entries the earlier
    comes first. The positions come from the backend's ``topk`` kernel; the values are
    ``x.gather(dim, indices)``, so they are differentiable. (``sorted=False`` gives the
    sorted order too, which torch allows.)
    """
    dim = normalize_dim(dim, x.ndim)
    n = x.shape[dim] if x.ndim else 1
    if not 0 <= k <= n:
        raise RuntimeError(f"selected index k out of range (k={k}, size of dim {dim} is {n})")
    if x.ndim == 0:  # as torch: a 0-d tensor is its own entry, for k 0 and 1 alike
        return return_types(x.clone(), full((), 0, dtype=int64))
    last = x.ndim - 1
    rows = x.detach() if dim == last else x.detach().transpose(dim, last)
    indices = dispatch.of(rows).topk(rows, k, largest)
    if dim != last:
        indices = indices.transpose(dim, last).contiguous()
    return return_types(x.gather(dim, indices), indices)


def sort(x, dim: int = -1, descending: bool = False, stable: bool = False):
    """``x`` sorted along ``dim`` and the positions the entries came from
    (``torch.sort``). Always stable: equal entries keep their order. NaNs go last in
    ascending order and first in descending order, as in torch."""
    n = x.shape[normalize_dim(dim, x.ndim)] if x.ndim else 1  # all of them: topk's order
    return topk(x, n, dim, largest=descending)


def argsort(x, dim: int = -1, descending: bool = False, stable: bool = False):
    """The positions that sort ``x`` along ``dim`` (``torch.argsort``); see :func:`sort`."""
    return sort(x, dim, descending, stable).indices


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
