"""The Tensor's views (chapter 2.1): reshape, permute, expand, slice; none copies.

Installed on :class:`sitp.Tensor` by ``sitp/methods/__init__.py``; each records its
``Function`` from ``sitp/autograd/derivatives.py``.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from sitp._tensor.tensor import Tensor
from sitp.autograd import derivatives as ops
from sitp.autograd.grad_mode import _state as _grad_state
from sitp.dtypes import dtype as _dtype_cls
from sitp.strides import (
    broadcast_strides,
    contiguous_strides,
    infer_shape,
    normalize_dim,
    normalize_dims,
    numel,
    view_strides,
)


class TensorViews:
    """Views: the same storage under a new shape, strides and offset."""

    __slots__ = ()

    # ------------------------------------------------------------------- views
    # --8<-- [start:view]
    def view(self, *shape) -> "Tensor":
        """The same data with a new shape; never copies.

        Raises:
            RuntimeError: when the strides do not allow it (use ``reshape``).
        """
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            if isinstance(shape[0], _dtype_cls):
                raise TypeError("view(dtype) is not supported by sitp")
            shape = tuple(shape[0])
        shape, strides = _view_plan(self, tuple(map(operator.index, shape)))  # 2.0: TypeError
        if strides is None:
            raise RuntimeError(
                f"view size is not compatible with input tensor's size and stride (shape "
                f"{tuple(self._shape)}, strides {self._strides} cannot be viewed as {shape}); "
                f"use .reshape(...) instead."
            )
        if self.requires_grad and _grad_state.enabled:
            return ops.View.recorded(self, shape, strides, self._offset)
        return self._alias(shape, strides, self._offset)  # nothing to record: View.forward's

    def reshape(self, *shape) -> "Tensor":
        """Like ``view``, but copies when the strides do not allow a view."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        shape, strides = _view_plan(self, tuple(map(operator.index, shape)))  # 2.0: TypeError
        if strides is None:
            return self.clone().view(shape)
        if self.requires_grad and _grad_state.enabled:
            return ops.View.recorded(self, shape, strides, self._offset)
        return self._alias(shape, strides, self._offset)  # nothing to record: View.forward's

    # --8<-- [end:view]

    def _view_strides(self, shape):
        """view_strides, with the common case (a contiguous tensor) short-cut."""
        if self.is_contiguous():
            return contiguous_strides(shape)
        return view_strides(self._shape, self._strides, shape)

    def view_as(self, other) -> "Tensor":
        return self.view(other.shape)

    def reshape_as(self, other) -> "Tensor":
        return self.reshape(other.shape)

    # --8<-- [start:permute]
    def permute(self, *dims) -> "Tensor":
        """Reorder dims: a view whose shape and strides are permuted alike."""
        if len(dims) == 1 and not isinstance(dims[0], int):
            dims = tuple(dims[0])
        if len(dims) != self.ndim:
            raise RuntimeError(
                f"permute(sparse_coo): number of dimensions in the tensor input does not match "
                f"the length of the desired ordering of dimensions i.e. input.dim() = {self.ndim} "
                f"is not equal to len(dims) = {len(dims)}"
            )
        dims = normalize_dims(dims, self.ndim)
        return _permute(self, dims)

    def transpose(self, dim0: int, dim1: int) -> "Tensor":
        key = (len(self._shape), dim0, dim1)
        dims = _TRANSPOSES.get(key)  # the permutation, remembered (it depends on key alone)
        if dims is None:
            d0, d1 = normalize_dim(dim0, self.ndim), normalize_dim(dim1, self.ndim)
            dims = list(range(self.ndim))
            dims[d0], dims[d1] = dims[d1], dims[d0]
            dims = _TRANSPOSES[key] = tuple(dims)
        return _permute(self, dims)

    # --8<-- [end:permute]

    swapaxes = transpose

    def t(self) -> "Tensor":
        n = len(self._shape)
        if n > 2:
            raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {n}D")
        return _permute(self, _REVERSED[n])

    # --8<-- [start:expand]
    def expand(self, *sizes) -> "Tensor":
        """Broadcast to ``sizes`` (-1 keeps a dim) by giving new dims stride 0."""
        if len(sizes) == 1 and not isinstance(sizes[0], int):
            sizes = tuple(sizes[0])
        if len(sizes) < self.ndim:
            raise RuntimeError(
                f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal "
                f"to the number of dimensions in the tensor ({self.ndim})"
            )
        lead = len(sizes) - self.ndim
        target = tuple(
            self._shape[i - lead] if (n == -1 and i >= lead) else n for i, n in enumerate(sizes)
        )
        try:
            strides = broadcast_strides(self._shape, self._strides, target)
        except RuntimeError:
            raise RuntimeError(
                f"The expanded size of the tensor {tuple(target)} must match the existing size "
                f"{tuple(self._shape)} at non-singleton dimensions"
            ) from None
        if target == tuple(self._shape):
            return self
        if self.requires_grad and _grad_state.enabled:
            return ops.Expand.apply(self, target, strides)
        return self._alias(target, strides, self._offset)  # nothing to record: Expand.forward's

    # --8<-- [end:expand]

    def expand_as(self, other) -> "Tensor":
        return self.expand(other.shape)

    def broadcast_to(self, shape) -> "Tensor":
        return self.expand(shape)

    def unsqueeze(self, dim: int) -> "Tensor":
        dim = normalize_dim(dim, self.ndim + 1)
        shape = list(self._shape)
        shape.insert(dim, 1)
        return self.view(shape)

    def squeeze(self, dim=None) -> "Tensor":
        if dim is None:
            shape = [n for n in self._shape if n != 1]
        else:
            dims = normalize_dims(dim, self.ndim) if self.ndim else ()
            shape = [n for d, n in enumerate(self._shape) if not (d in dims and n == 1)]
        return self.view(shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "Tensor":
        if self.ndim == 0:
            return self.reshape(1)
        s, e = normalize_dim(start_dim, self.ndim), normalize_dim(end_dim, self.ndim)
        shape = self._shape[:s] + (numel(self._shape[s : e + 1]),) + self._shape[e + 1 :]
        return self.reshape(shape)

    def unflatten(self, dim: int, sizes) -> "Tensor":
        dim = normalize_dim(dim, self.ndim)
        return self.view(self._shape[:dim] + tuple(sizes) + self._shape[dim + 1 :])

    def narrow(self, dim: int, start: int, length: int) -> "Tensor":
        dim = normalize_dim(dim, self.ndim)
        n = self._shape[dim]
        if start < 0:
            start += n
        if not (0 <= start <= n and 0 <= length and start + length <= n):
            raise RuntimeError(
                f"narrow(): start ({start}) + length ({length}) exceeds dimension "
                f"size ({n}) of dim {dim} (shape {tuple(self.shape)})."
            )
        key = (slice(None),) * dim + (slice(start, start + length),)
        return self[key]

    def split(self, split_size, dim: int = 0):
        """Views of consecutive chunks along ``dim``."""
        dim = normalize_dim(dim, self.ndim)
        n = self._shape[dim]
        if isinstance(split_size, int):
            step = split_size
            if step <= 0:
                raise RuntimeError(f"split_size must be positive, got {step}")
            sizes = [min(step, n - i) for i in range(0, n, step)] or [0]
        else:
            sizes = list(split_size)
            if sum(sizes) != n:
                raise RuntimeError(
                    f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's "
                    f"size at dimension {dim}), but got split_sizes={sizes}"
                )
        if any(s < 0 for s in sizes):
            raise RuntimeError(
                f"split_with_sizes expects split_sizes to be non-negative, got {sizes}"
            )
        return ops.Split.apply(self, tuple(sizes), dim)

    def chunk(self, chunks: int, dim: int = 0):
        n = self._shape[normalize_dim(dim, self.ndim)]
        return self.split(max(1, math.ceil(n / chunks)), dim)

    def unbind(self, dim: int = 0):
        """The slices along ``dim``, without it: one ``split`` node (whose backward
        writes every slice's gradient into one tensor) and a squeeze per slice."""
        dim = normalize_dim(dim, self.ndim)
        if self._shape[dim] == 0:
            return ()
        return tuple(piece.squeeze(dim) for piece in self.split(1, dim))

    def select(self, dim: int, index: int) -> "Tensor":
        dim = normalize_dim(dim, self.ndim)
        return self[(slice(None),) * dim + (index,)]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))


def _permute(x, dims):
    """``Permute.apply(x, dims)``; without a graph to record, the view it makes."""
    if x.requires_grad and _grad_state.enabled:
        return ops.Permute.recorded(x, dims)
    shape, strides = x._shape, x._strides
    return x._alias(tuple([shape[d] for d in dims]), tuple([strides[d] for d in dims]), x._offset)


_VIEW_PLANS = {}  # (shape, strides, shape asked for) -> (the shape, its strides or None)
_TRANSPOSES = {}  # (ndim, dim0, dim1) -> the permutation transpose(dim0, dim1) makes
_REVERSED = {0: (), 1: (0,), 2: (1, 0)}  # what t() makes of 0, 1 and 2 dims


def _view_plan(x, asked):
    """``infer_shape`` and ``_view_strides`` for a view of ``x`` as ``asked`` (which may
    hold a -1), remembered by the layouts: a program asks for the same few views again
    and again. An invalid shape raises every time (errors are not remembered)."""
    key = (x._shape, x._strides, asked)
    plan = _VIEW_PLANS.get(key)
    if plan is None:
        shape = infer_shape(asked, numel(x._shape))
        plan = (shape, x._view_strides(shape))
        if len(_VIEW_PLANS) > 4096:  # (a program that makes ever new shapes)
            _VIEW_PLANS.clear()
        _VIEW_PLANS[key] = plan
    return plan
