"""The strided Tensor (chapters 2.1 and 4.1).

A :class:`Tensor` is a flat storage buffer (a 1-D numpy array used only as
memory) plus ``shape``, ``strides`` and ``offset``. Views share the storage;
ops run sitp's own kernels through ``sitp/cpu.py`` and record the autograd
graph through ``sitp/ops.py``. Names and semantics follow PyTorch.
"""

from __future__ import annotations

import builtins
import math
import numbers
import operator
import sys

import numpy as np

from . import backend, ops
from . import autograd as _autograd
from .autograd import backward as _backward
from .autograd import is_grad_enabled
from .dtypes import bool_, dtype as _dtype_cls, float32, float64, int64, promote, scalar_dtype, to_dtype
from .strides import (broadcast_shapes, broadcast_strides, contiguous_strides, infer_shape,
                      is_contiguous, normalize_dim, normalize_dims, numel, view_strides)


class Size(tuple):
    """A tensor's shape: a tuple of ints, as ``torch.Size``."""

    def numel(self) -> int:
        return numel(self)

    def __repr__(self) -> str:
        return f"sitp.Size({list(self)})"


class device:
    """Where a tensor's storage lives: ``device("cpu")`` or ``device("cuda")``."""

    __slots__ = ("type", "index")

    def __init__(self, spec="cpu", index=None):
        if isinstance(spec, device):
            spec, index = spec.type, spec.index
        spec = str(spec)
        if ":" in spec:
            spec, idx = spec.split(":", 1)
            index = int(idx)
        if spec not in ("cpu", "cuda"):
            raise RuntimeError(f"Expected one of cpu, cuda device type at start of device string: {spec}")
        self.type, self.index = spec, index

    def __eq__(self, other):
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and self.type == other.type and (
            self.index == other.index or self.index is None or other.index is None)

    def __hash__(self):
        return hash(self.type)

    def __repr__(self):
        return f"device(type='{self.type}'" + (f", index={self.index})" if self.index is not None else ")")

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


CPU = device("cpu")
CUDA = device("cuda")


def _check_inplace(t, *sources) -> bool:
    """Whether an in-place op on ``t`` must be recorded in the autograd graph, as torch
    records it: grad mode is on and ``t`` or a source requires grad. Refuses what torch
    refuses (a leaf that requires grad) and what sitp cannot record (see below)."""
    if not is_grad_enabled():
        return False
    if t.requires_grad:
        if t.grad_fn is None:
            raise RuntimeError(
                "a leaf Variable that requires grad is being used in an in-place operation.")
    elif not any(isinstance(v, Tensor) and v.requires_grad for v in sources):
        return False
    # t's version counter is held by t only, unless another live tensor views the same
    # storage (a view, its base, a detach()). torch rewrites the graphs of those views
    # after an in-place op; sitp does not, so it refuses rather than give them stale gradients.
    if sys.getrefcount(t._vc) > 2:
        raise RuntimeError(
            f"sitp records an in-place operation on a tensor in the autograd graph (shape "
            f"{tuple(t.shape)}) only when no other tensor views its storage, and this one is "
            "a view or has views; build the result out of place (sitp.cat, sitp.stack, "
            "sitp.where, x = x + y) or detach() it")
    return True


class Tensor:
    """A multidimensional array with autograd. Create one with :func:`sitp.tensor`."""

    __slots__ = ("_storage", "_shape", "_strides", "_offset", "dtype", "requires_grad",
                 "grad", "grad_fn", "_output_nr", "_retains_grad", "_vc", "__weakref__")

    __array_priority__ = 1000  # so numpy_scalar * tensor calls Tensor.__rmul__

    # --8<-- [start:make]
    @classmethod
    def _make(cls, storage, shape, strides, offset, dtype) -> "Tensor":
        """Wrap existing storage; no copy, no checks (internal)."""
        t = object.__new__(cls)
        t._storage = storage
        t._shape = Size(shape)
        t._strides = tuple(strides)
        t._offset = offset
        t.dtype = dtype
        t.requires_grad = False
        t.grad = None
        t.grad_fn = None
        t._output_nr = 0       # which output of grad_fn this is (split makes several)
        t._retains_grad = False
        t._vc = [0]            # version counter: bumped by every in-place write, shared by views
        return t
    # --8<-- [end:make]

    def __init__(self, *args, **kwargs):
        raise TypeError("create tensors with sitp.tensor(data), sitp.zeros(shape), ...")

    def _alias(self, shape, strides, offset) -> "Tensor":
        """A view of the same storage (internal; no autograd); it shares the version counter."""
        t = Tensor._make(self._storage, shape, strides, offset, self.dtype)
        t._vc = self._vc
        return t

    def _wrap_np(self, flat, shape) -> "Tensor":
        shape = tuple(shape)
        return Tensor._make(flat, shape, contiguous_strides(shape), 0, self.dtype)

    # ---------------------------------------------------------------- metadata
    @property
    def shape(self) -> Size:
        return self._shape

    def size(self, dim=None):
        """The shape, or the size of one dim."""
        if dim is None:
            return self._shape
        return self._shape[normalize_dim(dim, self.ndim)]

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def dim(self) -> int:
        return len(self._shape)

    def numel(self) -> int:
        return numel(self._shape)

    nelement = numel

    def stride(self, dim=None):
        """Strides in elements (not bytes), as in PyTorch."""
        if dim is None:
            return self._strides
        return self._strides[normalize_dim(dim, self.ndim)]

    def storage_offset(self) -> int:
        return self._offset

    def is_contiguous(self) -> bool:
        return is_contiguous(self._shape, self._strides)

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def device(self) -> device:
        return CPU if isinstance(self._storage, np.ndarray) else CUDA

    @property
    def is_cuda(self) -> bool:
        return not isinstance(self._storage, np.ndarray)

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    @property
    def _version(self) -> int:
        """How many in-place writes this tensor's storage has had (shared by its views),
        as ``torch.Tensor._version``; autograd compares it with the count at save time."""
        return self._vc[0]

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    # ----------------------------------------------------------------- autograd
    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        if requires_grad and not self.dtype.is_floating_point:
            raise RuntimeError(
                f"only Tensors of floating point dtype can require gradients (got {self.dtype})")
        if not requires_grad and self.grad_fn is not None:
            raise RuntimeError("you can only change requires_grad flags of leaf variables.")
        self.requires_grad = requires_grad
        return self

    def backward(self, gradient=None, retain_graph=None, create_graph: bool = False,
                 inputs=None) -> None:
        """Accumulate the gradient of this tensor into the graph's leaves.

        With ``inputs`` (a tensor or a sequence of them), only those receive
        gradients, as in torch. sitp has no higher-order gradients:
        ``create_graph=True`` raises NotImplementedError rather than be ignored.
        """
        if create_graph:
            raise NotImplementedError("backward(create_graph=True): sitp has no higher-order gradients")
        if inputs is not None:
            # the public torch.autograd.backward (defined after the engine), looked up now
            _autograd.backward(self, gradient, retain_graph=bool(retain_graph), inputs=inputs)
            return
        _backward(self, gradient, bool(retain_graph))

    def retain_grad(self) -> None:
        """Keep ``.grad`` on this non-leaf tensor after ``backward()`` (a leaf keeps it anyway)."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.grad_fn is not None:
            import weakref

            if self.grad_fn.retained is None:
                self.grad_fn.retained = {}
            self.grad_fn.retained[self._output_nr] = weakref.ref(self)
        self._retains_grad = True

    def detach(self) -> "Tensor":
        """The same data, cut from the graph."""
        return self._alias(self._shape, self._strides, self._offset)

    def detach_(self) -> "Tensor":
        self.grad_fn = None
        self.requires_grad = False
        return self

    @property
    def data(self) -> "Tensor":
        # as torch: the same storage, but writes through .data are not seen by autograd
        t = self.detach()
        t._vc = [0]
        return t

    @data.setter
    def data(self, other: "Tensor") -> None:
        self._storage, self._shape, self._strides, self._offset, self.dtype = (
            other._storage, other._shape, other._strides, other._offset, other.dtype)

    @property
    def T(self) -> "Tensor":
        """All dims reversed (for a matrix: the transpose)."""
        return self.permute(tuple(range(self.ndim - 1, -1, -1)))

    @property
    def mT(self) -> "Tensor":
        """The last two dims swapped."""
        return self.transpose(-2, -1)

    # -------------------------------------------------------------- conversion
    def numpy(self) -> np.ndarray:
        """A numpy view of the same memory (like ``Tensor.numpy`` in PyTorch).

        Raises:
            RuntimeError: if the tensor requires grad (call ``.detach()`` first).
        """
        if self.requires_grad:
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        if self.is_cuda:
            raise TypeError(
                "can't convert cuda device type tensor to numpy. Use Tensor.cpu() to copy the "
                "tensor to host memory first.")
        item = self.dtype.itemsize
        return np.lib.stride_tricks.as_strided(
            self._storage[self._offset:] if self._storage.size else self._storage,
            shape=self._shape, strides=tuple(s * item for s in self._strides))

    def _np(self) -> np.ndarray:
        """A numpy view for internal reading (no grad check); copies a GPU tensor."""
        if self.is_cuda:
            from .cuda_backend import to_host

            return to_host(self)._np()
        item = self.dtype.itemsize
        return np.lib.stride_tricks.as_strided(
            self._storage[self._offset:] if self._storage.size else self._storage,
            shape=self._shape, strides=tuple(s * item for s in self._strides))

    def tolist(self):
        return self._np().tolist()

    def item(self):
        """The value of a one-element tensor as a Python number."""
        if self.numel() != 1:
            raise RuntimeError(
                f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
        if self.is_cuda:
            from .cuda_backend import check_errors

            check_errors()
            return self._storage[self._offset:self._offset + 1].copy_to_host()[0].item()
        return self._storage[self._offset].item()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError(
                f"Boolean value of Tensor with {self.numel()} values is ambiguous")
        return bool(self.item())

    def __index__(self):
        if self.dtype is not int64 or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __array__(self, dtype=None, copy=None):
        a = self._np()
        return a.astype(dtype) if dtype is not None else np.array(a)

    def to(self, *args, **kwargs) -> "Tensor":
        """Convert dtype and/or device: ``x.to(sitp.float64)``, ``x.to("cpu")``."""
        dtype = kwargs.pop("dtype", None)
        dev = kwargs.pop("device", None)
        kwargs.pop("non_blocking", None)
        copy = kwargs.pop("copy", False)
        if kwargs:
            raise TypeError(f"to() got unexpected arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, Tensor):
                dtype = a.dtype
            elif isinstance(a, (str, device)):
                dev = a
            else:
                dtype = a
        out = self
        if dev is not None and device(dev).type != self.device.type:
            out = ops.ToDevice.apply(self, device(dev).type)
        if dtype is not None and to_dtype(dtype) is not out.dtype:
            out = ops.Cast.apply(out, to_dtype(dtype))
        elif copy and out is self:
            out = self.clone()
        return out

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self, device=None) -> "Tensor":
        return self.to("cuda")

    def float(self) -> "Tensor":
        return self.to(float32)

    def double(self) -> "Tensor":
        return self.to(float64)

    def long(self) -> "Tensor":
        return self.to(int64)

    def int(self) -> "Tensor":
        return self.to(int64)

    def bool(self) -> "Tensor":
        return self.to(bool_)

    def type_as(self, other: "Tensor") -> "Tensor":
        return self.to(other.dtype)

    def type(self, dtype=None):
        if dtype is None:
            return f"sitp.{ {'float32': 'Float', 'float64': 'Double', 'int64': 'Long', 'bool': 'Bool'}[self.dtype.name]}Tensor"
        return self.to(dtype)

    def clone(self) -> "Tensor":
        return ops.Clone.apply(self)

    def contiguous(self) -> "Tensor":
        """This tensor if already contiguous, else a contiguous copy."""
        return self if self.is_contiguous() else ops.Clone.apply(self)

    # -------------------------------------------------------------------- repr
    def __repr__(self) -> str:
        from ._repr import tensor_repr

        return tensor_repr(self)

    def __str__(self) -> str:
        return self.__repr__()

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
        shape = infer_shape(tuple(map(operator.index, shape)), self.numel())  # 2.0: TypeError
        strides = self._view_strides(shape)
        if strides is None:
            raise RuntimeError(
                f"view size is not compatible with input tensor's size and stride (shape "
                f"{tuple(self._shape)}, strides {self._strides} cannot be viewed as {shape}); "
                f"use .reshape(...) instead.")
        return ops.View.apply(self, shape, strides, self._offset)

    def reshape(self, *shape) -> "Tensor":
        """Like ``view``, but copies when the strides do not allow a view."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        shape = infer_shape(tuple(map(operator.index, shape)), self.numel())  # 2.0: TypeError
        strides = self._view_strides(shape)
        if strides is None:
            return self.clone().view(shape)
        return ops.View.apply(self, shape, strides, self._offset)
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
                f"is not equal to len(dims) = {len(dims)}")
        dims = normalize_dims(dims, self.ndim)
        return ops.Permute.apply(self, dims)

    def transpose(self, dim0: int, dim1: int) -> "Tensor":
        d0, d1 = normalize_dim(dim0, self.ndim), normalize_dim(dim1, self.ndim)
        dims = list(range(self.ndim))
        dims[d0], dims[d1] = dims[d1], dims[d0]
        return ops.Permute.apply(self, tuple(dims))
    # --8<-- [end:permute]

    swapaxes = transpose

    def t(self) -> "Tensor":
        if self.ndim > 2:
            raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
        return self.T

    # --8<-- [start:expand]
    def expand(self, *sizes) -> "Tensor":
        """Broadcast to ``sizes`` (-1 keeps a dim) by giving new dims stride 0."""
        if len(sizes) == 1 and not isinstance(sizes[0], int):
            sizes = tuple(sizes[0])
        if len(sizes) < self.ndim:
            raise RuntimeError(
                f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal "
                f"to the number of dimensions in the tensor ({self.ndim})")
        lead = len(sizes) - self.ndim
        target = tuple(self._shape[i - lead] if (n == -1 and i >= lead) else n
                       for i, n in enumerate(sizes))
        try:
            strides = broadcast_strides(self._shape, self._strides, target)
        except RuntimeError:
            raise RuntimeError(
                f"The expanded size of the tensor {tuple(target)} must match the existing size "
                f"{tuple(self._shape)} at non-singleton dimensions") from None
        if target == tuple(self._shape):
            return self
        return ops.Expand.apply(self, target, strides)
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
        shape = self._shape[:s] + (numel(self._shape[s:e + 1]),) + self._shape[e + 1:]
        return self.reshape(shape)

    def unflatten(self, dim: int, sizes) -> "Tensor":
        dim = normalize_dim(dim, self.ndim)
        return self.view(self._shape[:dim] + tuple(sizes) + self._shape[dim + 1:])

    def narrow(self, dim: int, start: int, length: int) -> "Tensor":
        dim = normalize_dim(dim, self.ndim)
        n = self._shape[dim]
        if start < 0:
            start += n
        if not (0 <= start <= n and 0 <= length and start + length <= n):
            raise RuntimeError(f"narrow(): start ({start}) + length ({length}) exceeds dimension "
                               f"size ({n}) of dim {dim} (shape {tuple(self.shape)}).")
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
                    f"size at dimension {dim}), but got split_sizes={sizes}")
        if any(s < 0 for s in sizes):
            raise RuntimeError(f"split_with_sizes expects split_sizes to be non-negative, "
                               f"got {sizes}")
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

    # ---------------------------------------------------------------- indexing
    def __getitem__(self, key):
        from ._indexing import getitem

        return getitem(self, key)

    def __setitem__(self, key, value):
        from ._indexing import setitem

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
                f"(index {tuple(index.shape)}, input {tuple(self.shape)})")
        for d in range(self.ndim):
            if d != dim and index.shape[d] > self.shape[d]:
                raise RuntimeError(
                    f"Size does not match at dimension {d} expected index {tuple(index.shape)} "
                    f"to be smaller than self {tuple(self.shape)} apart from dimension {dim}")
        return ops.Gather.apply(self, dim, index)

    def masked_fill(self, mask: "Tensor", value) -> "Tensor":
        if not isinstance(mask, Tensor) or mask.dtype is not bool_:
            raise RuntimeError("masked_fill only supports boolean masks")
        broadcast_shapes(mask.shape, self.shape)
        if isinstance(value, Tensor):
            v = value.to(self.dtype)
        else:
            v = _scalar(value, self.dtype)
        out = ops.Where.apply(mask, v, self)
        if tuple(out.shape) != tuple(self.shape):
            raise RuntimeError(
                f"masked_fill: mask of shape {tuple(mask.shape)} cannot be broadcast to "
                f"the tensor's shape {tuple(self.shape)}")
        return out

    def masked_fill_(self, mask, value) -> "Tensor":
        return self.copy_(self.masked_fill(mask, value))

    # -------------------------------------------------------------- arithmetic
    def _binary(self, other, op, reverse=False):
        a, b = _operands(self, other)
        if a.dtype is bool_ and op not in ("maximum", "minimum"):
            a, b = a.to(int64), b.to(int64)
        if op == "div" and not a.dtype.is_floating_point:
            a, b = a.to(float32), b.to(float32)
        if reverse:
            a, b = b, a
        return ops.Binary.apply(a, b, op)

    def __add__(self, other):
        return self._binary(other, "add")

    def __radd__(self, other):
        return self._binary(other, "add", reverse=True)

    def __sub__(self, other):
        if self.dtype is bool_:
            raise TypeError("subtraction of bool tensors is not supported; use ^ or logical_xor")
        return self._binary(other, "sub")

    def __rsub__(self, other):
        return self._binary(other, "sub", reverse=True)

    def __mul__(self, other):
        if self.dtype is bool_ and isinstance(other, Tensor) and other.dtype is bool_:
            return self & other
        return self._binary(other, "mul")

    def __rmul__(self, other):
        return self._binary(other, "mul", reverse=True)

    def __truediv__(self, other):
        return self._binary(other, "div")

    def __rtruediv__(self, other):
        return self._binary(other, "div", reverse=True)

    def __floordiv__(self, other):
        return _nograd_binary(self, other, "floordiv")

    def __mod__(self, other):
        return _nograd_binary(self, other, "remainder")

    def __pow__(self, other):
        if isinstance(other, numbers.Number) and not isinstance(other, bool):
            x = self if self.dtype.is_floating_point or (isinstance(other, int) and other >= 0) else self.to(float32)
            if isinstance(other, float) and not x.dtype.is_floating_point:
                x = x.to(float32)
            return ops.Unary.apply(x, "pow", float(other))
        return self._binary(other, "pow")

    def __rpow__(self, other):
        return self._binary(other, "pow", reverse=True)

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(other, self)

    def __neg__(self):
        if self.dtype is bool_:
            raise TypeError("negation of a bool tensor is not supported; use ~ or logical_not")
        return ops.Unary.apply(self, "neg")

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    def add(self, other, alpha=1):
        return self + (other * alpha if alpha != 1 else other)

    def sub(self, other, alpha=1):
        return self - (other * alpha if alpha != 1 else other)

    def mul(self, other):
        return self * other

    def div(self, other, rounding_mode=None):
        if rounding_mode == "floor":
            return self // other
        if rounding_mode == "trunc":
            return (self / other).trunc()
        return self / other

    def pow(self, exponent):
        return self ** exponent

    def maximum(self, other):
        return self._binary(other, "maximum")

    def minimum(self, other):
        return self._binary(other, "minimum")

    def atan2(self, other):
        return self._binary(other, "atan2")

    def matmul(self, other):
        return matmul(self, other)

    def mm(self, other):
        if self.ndim != 2 or other.ndim != 2:
            raise RuntimeError(f"mm(): both arguments must be 2-D, got {tuple(self.shape)} and {tuple(other.shape)}")
        return matmul(self, other)

    def bmm(self, other):
        if self.ndim != 3 or other.ndim != 3:
            raise RuntimeError(f"bmm(): both arguments must be 3-D, got {tuple(self.shape)} and {tuple(other.shape)}")
        return matmul(self, other)

    # ------------------------------------------------------------- comparisons
    def _compare(self, other, op):
        a, b = _operands(self, other)
        return _compare_fn(a, b, op)

    def __eq__(self, other):
        return self._compare(other, "eq")

    def __ne__(self, other):
        return self._compare(other, "ne")

    def __lt__(self, other):
        return self._compare(other, "lt")

    def __le__(self, other):
        return self._compare(other, "le")

    def __gt__(self, other):
        return self._compare(other, "gt")

    def __ge__(self, other):
        return self._compare(other, "ge")

    eq, ne, lt, le, gt, ge = __eq__, __ne__, __lt__, __le__, __gt__, __ge__

    __hash__ = object.__hash__

    def __and__(self, other):
        return self._compare(other, "logical_and") if self.dtype is bool_ else _nograd_bitwise(self, other, "and")

    def __or__(self, other):
        return self._compare(other, "logical_or") if self.dtype is bool_ else _nograd_bitwise(self, other, "or")

    def __xor__(self, other):
        return self._compare(other, "logical_xor") if self.dtype is bool_ else _nograd_bitwise(self, other, "xor")

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    def __invert__(self):
        if self.dtype is not bool_:
            raise TypeError("~ is only supported on bool tensors in sitp")
        return backend.of(self).unary("logical_not", self, out_dtype=bool_)

    def logical_not(self):
        return backend.of(self).unary("logical_not", self, out_dtype=bool_)

    def logical_and(self, other):
        return self._compare(other, "logical_and")

    def logical_or(self, other):
        return self._compare(other, "logical_or")

    def equal(self, other) -> bool:
        return tuple(self.shape) == tuple(other.shape) and bool((self == other).all())

    def allclose(self, other, rtol=1e-5, atol=1e-8) -> bool:
        return bool(((self - other).abs() <= atol + rtol * other.abs()).all())

    def isnan(self):
        return self != self

    def isinf(self):
        return self.abs() == math.inf

    def isfinite(self):
        return ~(self.isnan() | self.isinf())

    # ------------------------------------------------------- elementwise maths
    def _unary(self, op, p0=math.nan, p1=math.nan):
        x = self if self.dtype.is_floating_point else self.to(float32)
        return ops.Unary.apply(x, op, p0, p1)

    def exp(self):
        return self._unary("exp")

    def log(self):
        return self._unary("log")

    def sqrt(self):
        return self._unary("sqrt")

    def rsqrt(self):
        return self._unary("rsqrt")

    def tanh(self):
        return self._unary("tanh")

    def sigmoid(self):
        return self._unary("sigmoid")

    def sin(self):
        return self._unary("sin")

    def cos(self):
        return self._unary("cos")

    def log1p(self):
        return self._unary("log1p")

    def expm1(self):
        return self._unary("expm1")

    def log10(self):
        return self._unary("log10")

    def log2(self):
        return self._unary("log2")

    def exp2(self):
        return self._unary("exp2")

    def roll(self, shifts, dims=None):
        """Shift entries cyclically along ``dims`` (``torch.roll``); a new tensor.

        With ``dims=None`` the tensor is rolled as if flattened, then reshaped back.
        Each shift is two ``narrow`` views joined by one ``cat``, so the gradient is
        the opposite roll.
        """
        from .functional_core import cat

        if dims is None:
            if not isinstance(shifts, int):
                if len(shifts) != 1:
                    raise RuntimeError(f"roll: with dims=None, shifts must be one int, got {shifts}")
                shifts = shifts[0]
            return self.flatten().roll(shifts, 0).reshape(self._shape)
        shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(shifts) != len(dims):
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, "
                               f"dims:{len(dims)}")
        out = self
        for shift, d in zip(shifts, dims):
            if not isinstance(shift, int) or isinstance(shift, bool):
                raise TypeError(f"roll: shifts must be ints, got {type(shift).__name__}")
            d = normalize_dim(d, self.ndim)
            n = self._shape[d] if self.ndim else 1
            s = shift % n if n else 0
            if s:
                out = cat([out.narrow(d, n - s, s), out.narrow(d, 0, n - s)], dim=d)
        return out.clone() if out is self else out

    def erf(self):
        return self._unary("erf")

    def reciprocal(self):
        return self._unary("reciprocal")

    def relu(self):
        return ops.Unary.apply(self, "relu") if self.dtype is not bool_ else self

    def abs(self):
        return ops.Unary.apply(self, "abs") if self.dtype is not bool_ else self

    def sign(self):
        return ops.Unary.apply(self, "sign")

    def square(self):
        return ops.Unary.apply(self if self.dtype is not bool_ else self.long(), "square")

    def floor(self):
        return ops.Unary.apply(self, "floor") if self.dtype.is_floating_point else self

    def ceil(self):
        return ops.Unary.apply(self, "ceil") if self.dtype.is_floating_point else self

    def round(self):
        return ops.Unary.apply(self, "round") if self.dtype.is_floating_point else self

    def trunc(self):
        return self.sign() * self.abs().floor()

    def clamp(self, min=None, max=None):
        """Limit values to [min, max]; either bound may be None."""
        if min is None and max is None:
            raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
        if isinstance(min, Tensor) or isinstance(max, Tensor):
            out = self
            if min is not None:
                out = out.maximum(min)
            if max is not None:
                out = out.minimum(max)
            return out
        x = self if self.dtype.is_floating_point or (
            not isinstance(min, float) and not isinstance(max, float)) else self.to(float32)
        return ops.Unary.apply(x, "clamp", math.nan if min is None else float(min),
                               math.nan if max is None else float(max))

    clip = clamp

    def clamp_min(self, min):
        return self.clamp(min=min)

    def clamp_max(self, max):
        return self.clamp(max=max)

    def where(self, condition, other):
        from .functional_core import where

        return where(condition, self, other)

    def lerp(self, end, weight):
        return self + (end - self) * weight

    # -------------------------------------------------------------- reductions
    # --8<-- [start:sum]
    def sum(self, dim=None, keepdim: bool = False, dtype=None):
        """Sum over ``dim`` (an int, a tuple of ints, or None for all)."""
        x = self if dtype is None else self.to(dtype)
        if x.dtype is bool_:
            x = x.to(int64)
        dims = normalize_dims(dim, x.ndim)
        return ops.Sum.apply(x, dims, keepdim)

    def mean(self, dim=None, keepdim: bool = False, dtype=None):
        """Average over ``dim``: the sum divided by the number of entries summed."""
        x = self if dtype is None else self.to(dtype)
        if not x.dtype.is_floating_point:
            raise RuntimeError(
                f"mean(): could not infer output dtype. Input dtype must be either a floating "
                f"point or complex dtype. Got: {x.dtype.name.capitalize()}")
        dims = normalize_dims(dim, x.ndim)
        n = numel([x.shape[d] for d in dims])
        return x.sum(dims, keepdim) / n if n else x.sum(dims, keepdim) * math.nan
    # --8<-- [end:sum]

    def norm(self, p=2, dim=None, keepdim: bool = False, dtype=None):
        """The p-norm over ``dim`` (all entries by default): (sum |x|^p)^(1/p).

        ``p`` may be a positive number, ``inf`` (the largest magnitude) or ``"fro"``;
        with ``dtype`` the input is cast to it first, as in torch.
        """
        if dtype is not None:
            return self.to(dtype).norm(p, dim, keepdim)
        if p == "fro":
            p = 2
        a = self.abs()
        if p == math.inf:
            return a.amax(dim, keepdim)
        if not isinstance(p, (int, float)) or p <= 0:
            raise ValueError(f"norm(): p must be a positive number, inf or 'fro', got {p!r}")
        if p == 2:
            return (a * a).sum(dim, keepdim).sqrt()
        return (a ** p).sum(dim, keepdim) ** (1.0 / p)

    def prod(self, dim=None, keepdim: bool = False):
        if self.requires_grad and is_grad_enabled():
            raise RuntimeError("prod() is not differentiable in sitp")
        x = self.to(int64) if self.dtype is bool_ else self
        dims = (normalize_dim(dim, x.ndim),) if dim is not None else tuple(range(x.ndim))
        return backend.of(x).reduce("prod", x, dims, keepdim)

    def var(self, dim=None, keepdim: bool = False, *, correction=1, unbiased=None):
        """Variance with Bessel's correction by default (``correction=1``)."""
        if unbiased is not None:
            correction = 1 if unbiased else 0
        dims = normalize_dims(dim, self.ndim)
        n = numel([self.shape[d] for d in dims])
        d = self - self.mean(dims, keepdim=True)
        return (d * d).sum(dims, keepdim) / builtins.max(n - correction, 0)

    def std(self, dim=None, keepdim: bool = False, *, correction=1, unbiased=None):
        return self.var(dim, keepdim, correction=correction, unbiased=unbiased).sqrt()

    def _maxmin(self, dim, keepdim, is_max):
        from .functional_core import return_types

        x = self.to(int64) if self.dtype is bool_ else self
        if dim is None:
            if x.numel() == 0:
                raise RuntimeError(
                    f"{'max' if is_max else 'min'}(): Expected reduction dim to be specified for "
                    f"input.numel() == 0. Specify the reduction dim with the 'dim' argument.")
            out = ops.MaxAll.apply(x, tuple(range(x.ndim)), False, is_max)
            return out.to(bool_) if self.dtype is bool_ else out
        if isinstance(dim, Tensor):
            return x.maximum(dim) if is_max else x.minimum(dim)
        dim = normalize_dim(dim, x.ndim)
        values, indices = ops.MaxDim.apply(x, dim, keepdim, is_max)
        return return_types(values, indices)

    def max(self, dim=None, keepdim: bool = False):
        """The largest entry, or (values, indices) along ``dim``."""
        return self._maxmin(dim, keepdim, True)

    def min(self, dim=None, keepdim: bool = False):
        return self._maxmin(dim, keepdim, False)

    def amax(self, dim=None, keepdim: bool = False):
        return ops.MaxAll.apply(self, normalize_dims(dim, self.ndim), keepdim, True)

    def amin(self, dim=None, keepdim: bool = False):
        return ops.MaxAll.apply(self, normalize_dims(dim, self.ndim), keepdim, False)

    def argmax(self, dim=None, keepdim: bool = False):
        if dim is None:
            return self.reshape(-1).max(0).indices
        return self.max(dim, keepdim).indices

    def argmin(self, dim=None, keepdim: bool = False):
        if dim is None:
            return self.reshape(-1).min(0).indices
        return self.min(dim, keepdim).indices

    def all(self, dim=None, keepdim: bool = False):
        dims = normalize_dims(dim, self.ndim)
        return backend.of(self).reduce("all", self, dims, keepdim)

    def any(self, dim=None, keepdim: bool = False):
        dims = normalize_dims(dim, self.ndim)
        return backend.of(self).reduce("any", self, dims, keepdim)

    def softmax(self, dim: int, dtype=None):
        x = self if dtype is None else self.to(dtype)
        x = x if x.dtype.is_floating_point else x.to(float32)
        return ops.Softmax.apply(x, normalize_dim(dim, x.ndim), False)

    def log_softmax(self, dim: int, dtype=None):
        x = self if dtype is None else self.to(dtype)
        x = x if x.dtype.is_floating_point else x.to(float32)
        return ops.Softmax.apply(x, normalize_dim(dim, x.ndim), True)

    def logsumexp(self, dim, keepdim: bool = False):
        dims = normalize_dims(dim, self.ndim)
        m = self.detach().amax(dims, keepdim=True)
        m = m.masked_fill(m.isinf(), 0.0)
        out = (self - m).exp().sum(dims, keepdim=True).log() + m
        return out if keepdim else out.squeeze(dims)

    def cumsum(self, dim: int):
        if self.requires_grad and is_grad_enabled():
            raise RuntimeError("cumsum() is not differentiable in sitp")
        x = self.to(int64) if self.dtype is bool_ else self
        return backend.of(x).cumsum(x, normalize_dim(dim, x.ndim))

    def tril(self, diagonal: int = 0):
        if self.ndim < 2:
            raise RuntimeError(f"tril: input tensor must have at least 2 dimensions, got {self.ndim}")
        return ops.Tri.apply(self, diagonal, False)

    def triu(self, diagonal: int = 0):
        if self.ndim < 2:
            raise RuntimeError(f"triu: input tensor must have at least 2 dimensions, got {self.ndim}")
        return ops.Tri.apply(self, diagonal, True)

    def nonzero(self, as_tuple: bool = False):
        ordinals = backend.of(self).nonzero(self)
        from .creation import _from_numpy_owned

        cols = []
        rem = ordinals
        for n in reversed(self._shape):
            cols.append(rem % n if n else rem)
            rem = rem // n if n else rem
        cols = cols[::-1]
        if as_tuple:
            return tuple(_from_numpy_owned(np.ascontiguousarray(c)) for c in cols)
        if not cols:
            return _from_numpy_owned(np.zeros((ordinals.size, 0), np.int64))
        return _from_numpy_owned(np.ascontiguousarray(np.stack(cols, axis=1)))

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
        from .functional_core import topk

        return topk(self, k, dim, largest)

    def flip(self, dims):
        from .creation import arange

        out = self
        for d in normalize_dims(dims, self.ndim):
            idx = arange(self._shape[d] - 1, -1, -1)
            out = out[(slice(None),) * d + (idx,)]
        return out

    def repeat(self, *sizes):
        if len(sizes) == 1 and not isinstance(sizes[0], int):
            sizes = tuple(sizes[0])
        x = self.reshape((1,) * (len(sizes) - self.ndim) + tuple(self._shape))
        expanded, final = [], []
        for n, r in zip(x.shape, sizes):
            expanded += [r, n]
            final.append(n * r)
        x = x.reshape([v for n in x.shape for v in (1, n)]).expand(expanded)
        return x.reshape(final)

    # -------------------------------------------------------------- in-place
    # --8<-- [start:inplace]
    def _inplace(self, result: "Tensor", cast: bool = False) -> "Tensor":
        """Write ``result`` (broadcast to self's shape) into self's storage; unless ``cast``
        (copy_), a float result into an integer tensor, or a number into a bool one, is
        refused as torch does. In the graph (see ``_check_inplace``) the write is recorded."""
        if _check_inplace(self, result):
            return self._record_inplace(lambda old: old.masked_fill(_all_true(old), result), cast)
        if result.dtype is not self.dtype and not cast and (
                (result.dtype.is_floating_point and not self.dtype.is_floating_point)
                or (self.dtype is bool_ and result.dtype is not bool_)):
            raise RuntimeError(
                f"result type {result.dtype} can't be cast to the desired output type "
                f"{self.dtype} (in-place op on a tensor of shape {tuple(self.shape)})")
        if broadcast_shapes(result.shape, self.shape) != tuple(self.shape):
            raise RuntimeError(
                f"output with shape {tuple(self.shape)} doesn't match the broadcast shape "
                f"{broadcast_shapes(result.shape, self.shape)}")
        backend.of(self, result).assign(self, result)
        self._vc[0] += 1
        return self

    def _record_inplace(self, compute, cast: bool = False) -> "Tensor":
        """An in-place op recorded as torch records it: ``compute`` runs out of place on a
        copy that carries self's place in the graph (so what it saves is never overwritten),
        its result is written into self's storage, and self takes the result's grad_fn."""
        old_node, old_nr = self.grad_fn, self._output_nr
        r = compute(self.clone())
        if tuple(r.shape) != tuple(self.shape) and broadcast_shapes(
                r.shape, self.shape) == tuple(self.shape):
            r = r.expand(self.shape)
        if r.dtype is not self.dtype and r.dtype.is_floating_point and self.dtype.is_floating_point:
            r = r.to(self.dtype)
        with _no_grad():
            self._inplace(r, cast)
        if r.requires_grad:
            self.grad_fn, self._output_nr, self.requires_grad = r.grad_fn, r._output_nr, True
            if self._retains_grad:
                if old_node is not None and old_node.retained:
                    old_node.retained.pop(old_nr, None)
                self.retain_grad()
        return self

    def add_(self, other, alpha=1):
        if _check_inplace(self, other):
            return self._record_inplace(lambda x: x + (other * alpha if alpha != 1 else other))
        with _no_grad():
            return self._inplace(self + (other * alpha if alpha != 1 else other))

    def sub_(self, other, alpha=1):
        if _check_inplace(self, other):
            return self._record_inplace(lambda x: x - (other * alpha if alpha != 1 else other))
        with _no_grad():
            return self._inplace(self - (other * alpha if alpha != 1 else other))

    def mul_(self, other):
        if _check_inplace(self, other):
            return self._record_inplace(lambda x: x * other)
        with _no_grad():
            return self._inplace(self * other)

    def div_(self, other):
        if _check_inplace(self, other):
            return self._record_inplace(lambda x: x / other)
        with _no_grad():
            return self._inplace(self / other)

    def addcmul_(self, t1, t2, value=1):
        if _check_inplace(self, t1, t2):
            return self._record_inplace(lambda x: x + t1 * t2 * value)
        with _no_grad():
            return self._inplace(self + t1 * t2 * value)

    def addcdiv_(self, t1, t2, value=1):
        if _check_inplace(self, t1, t2):
            return self._record_inplace(lambda x: x + t1 / t2 * value)
        with _no_grad():
            return self._inplace(self + t1 / t2 * value)

    def lerp_(self, end, weight):
        if _check_inplace(self, end, weight):
            return self._record_inplace(lambda x: x + (end - x) * weight)
        with _no_grad():
            return self._inplace(self + (end - self) * weight)

    def copy_(self, src) -> "Tensor":
        if not isinstance(src, Tensor):
            from .creation import tensor as _tensor

            src = _tensor(src)
        _check_inplace(self, src)
        return self._inplace(src, cast=True)

    def fill_(self, value) -> "Tensor":
        return self._inplace(_scalar(value, self.dtype))

    def zero_(self) -> "Tensor":
        return self.fill_(0)
    # --8<-- [end:inplace]

    def clamp_(self, min=None, max=None):
        if _check_inplace(self, min, max):
            return self._record_inplace(lambda x: x.clamp(min, max))
        with _no_grad():
            return self._inplace(self.clamp(min, max))

    def exp_(self):
        if _check_inplace(self):
            return self._record_inplace(lambda x: x.exp())
        with _no_grad():
            return self._inplace(self.exp())

    def sqrt_(self):
        if _check_inplace(self):
            return self._record_inplace(lambda x: x.sqrt())
        with _no_grad():
            return self._inplace(self.sqrt())

    def neg_(self):
        if _check_inplace(self):
            return self._record_inplace(lambda x: -x)
        with _no_grad():
            return self._inplace(-self)

    def pow_(self, e):
        if _check_inplace(self, e):
            return self._record_inplace(lambda x: x ** e)
        with _no_grad():
            return self._inplace(self ** e)

    def index_put_(self, indices, values, accumulate: bool = False):
        from ._indexing import setitem

        if _check_inplace(self, values):
            _refuse_indexed_write(self)
        setitem(self, tuple(indices), values, accumulate=accumulate)
        self._vc[0] += 1
        return self

    def uniform_(self, a: float = 0.0, b: float = 1.0, generator=None):
        from .random import _uniform

        return self._inplace(_uniform(self.shape, a, b, self.dtype, generator, self.device))

    def normal_(self, mean: float = 0.0, std: float = 1.0, generator=None):
        from .random import _normal

        return self._inplace(_normal(self.shape, mean, std, self.dtype, generator, self.device))

    def __iadd__(self, other):
        return self.add_(other)

    def __isub__(self, other):
        return self.sub_(other)

    def __imul__(self, other):
        return self.mul_(other)

    def __itruediv__(self, other):
        return self.div_(other)

    def new_zeros(self, size, dtype=None):
        from .creation import zeros

        return zeros(size, dtype=dtype or self.dtype)

    def new_ones(self, size, dtype=None):
        from .creation import ones

        return ones(size, dtype=dtype or self.dtype)

    def new_full(self, size, fill_value, dtype=None):
        from .creation import full

        return full(size, fill_value, dtype=dtype or self.dtype)

    def new_tensor(self, data, dtype=None):
        from .creation import tensor

        return tensor(data, dtype=dtype or self.dtype)


class _no_grad:
    def __enter__(self):
        from .autograd import set_grad_enabled

        self.prev = is_grad_enabled()
        set_grad_enabled(False)

    def __exit__(self, *exc):
        from .autograd import set_grad_enabled

        set_grad_enabled(self.prev)


def _refuse_indexed_write(t) -> None:
    raise RuntimeError(
        f"sitp does not record an indexed in-place write (x[i] = v, index_put_) on a tensor in "
        f"the autograd graph (shape {tuple(t.shape)}); build the result out of place "
        "(sitp.where, sitp.cat, sitp.stack) or detach() it")


def _all_true(t) -> Tensor:
    """A bool tensor of ``t``'s shape, all True (masked_fill with it overwrites everything)."""
    return Tensor._make(np.ones(max(t.numel(), 1), dtype=np.bool_), t.shape,
                        contiguous_strides(t.shape), 0, bool_).to(t.device)


def _scalar(value, dtype) -> Tensor:
    """A 0-d tensor holding ``value`` with ``dtype``."""
    return Tensor._make(np.array([value], dtype=dtype.np), (), (), 0, dtype)


# --8<-- [start:operands]
def _operands(a, b):
    """Promote two operands (tensors or Python scalars) to one dtype."""
    if not isinstance(b, Tensor):
        if isinstance(b, np.ndarray):
            from .creation import tensor

            b = tensor(b)
        elif isinstance(b, (numbers.Number, np.generic)):
            b = b.item() if isinstance(b, np.generic) else b
            d = scalar_dtype(b, a.dtype)
            return (a if a.dtype is d else a.to(d)), _scalar(b, d)
        else:
            raise TypeError(f"unsupported operand type for a tensor op: {type(b).__name__}")
    if not isinstance(a, Tensor):
        b2, a2 = _operands(b, a)
        return a2, b2
    d = promote(a.dtype, b.dtype)
    # A 0-d tensor does not widen a float tensor of another width (PyTorch's rule).
    if a.dtype is not b.dtype and a.dtype.is_floating_point == b.dtype.is_floating_point:
        if b.ndim == 0 and a.ndim > 0:
            d = a.dtype
        elif a.ndim == 0 and b.ndim > 0:
            d = b.dtype
    return (a if a.dtype is d else a.to(d)), (b if b.dtype is d else b.to(d))
# --8<-- [end:operands]


def _compare_fn(a, b, op):
    if a.dtype is bool_ and op not in ("logical_and", "logical_or", "logical_xor", "eq", "ne"):
        a, b = a.to(int64), b.to(int64)
    return backend.of(a, b).compare(op, a, b)


def _nograd_binary(a, b, op):
    a, b = _operands(a, b)
    if a.dtype is bool_:
        a, b = a.to(int64), b.to(int64)
    return backend.of(a, b).binary(op, a, b)


def _nograd_bitwise(a, b, op):
    raise TypeError(f"bitwise {op} is only supported on bool tensors in sitp")


# --8<-- [start:matmul_api]
def matmul(a, b) -> Tensor:
    """Matrix product with PyTorch's rules for 1-D and batched operands.

    A 1-D left operand is treated as a row (1, K), a 1-D right one as a column
    (K, 1); the added dim is removed from the result. Leading (batch) dims
    broadcast.
    """
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError("matmul(): both arguments must be tensors")
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(
            f"both arguments to matmul need to be at least 1D, but they are {a.ndim}D and {b.ndim}D")
    if a.dtype is not b.dtype:  # torch does not promote in matmul
        raise RuntimeError(
            f"expected m1 and m2 to have the same dtype, but got: {a.dtype} != {b.dtype} "
            f"(shapes {tuple(a.shape)} @ {tuple(b.shape)})")
    a, b = _operands(a, b)
    if a.dtype is bool_:
        raise RuntimeError("matmul is not supported for bool tensors")
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied: {tuple(a.shape)} @ {tuple(b.shape)} "
            f"(inner dims {a2.shape[-1]} and {b2.shape[-2]} differ)")
    out = ops.MatMul.apply(a2, b2)
    if a.ndim == 1:
        out = out.squeeze(-2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    return out
# --8<-- [end:matmul_api]
