"""The strided Tensor (chapters 2.1 and 4.1): the data structure.

A :class:`Tensor` is a flat storage buffer (a 1-D numpy array used only as memory, or a
device array on the GPU) plus ``shape``, ``strides`` and ``offset``, and the fields that
autograd fills in (``requires_grad``, ``grad``, ``grad_fn``, the version counter).

This module holds what needs no autograd: metadata, detaching, conversion to Python and
numpy, and the repr. The methods that compute (views, maths, in-place ops, conversions
between dtypes and devices, ``backward``) are in ``sitp/methods/``, one file per concept;
``sitp/methods/__init__.py`` installs them on this class, because they record the autograd
graph and autograd is the layer above this one. Names and semantics follow PyTorch.
"""

from __future__ import annotations

import weakref

import numpy as np

from sitp._tensor import dispatch
from sitp._tensor.printing import tensor_repr
from sitp.dtypes import int64
from sitp.strides import contiguous_strides, is_contiguous, normalize_dim, numel


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
            raise RuntimeError(
                f"Expected one of cpu, cuda device type at start of device string: {spec}"
            )
        self.type, self.index = spec, index

    def __eq__(self, other):
        if isinstance(other, str):
            other = device(other)
        return (
            isinstance(other, device)
            and self.type == other.type
            and (self.index == other.index or self.index is None or other.index is None)
        )

    def __hash__(self):
        return hash(self.type)

    def __repr__(self):
        return f"device(type='{self.type}'" + (
            f", index={self.index})" if self.index is not None else ")"
        )

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


CPU = device("cpu")
CUDA = device("cuda")


class Tensor:
    """A multidimensional array with autograd. Create one with :func:`sitp.tensor`."""

    __slots__ = (
        "_storage",
        "_shape",
        "_strides",
        "_offset",
        "dtype",
        "requires_grad",
        "grad",
        "grad_fn",
        "_output_nr",
        "_retains_grad",
        "_vc",
        "__weakref__",
    )

    __array_priority__ = 1000  # so numpy_scalar * tensor calls Tensor.__rmul__

    # --8<-- [start:make]
    @classmethod
    def _make(cls, storage, shape, strides, offset, dtype) -> "Tensor":
        """Wrap existing storage; no copy, no checks (internal)."""
        t = object.__new__(cls)
        t._storage = storage
        t._shape = shape if shape.__class__ is Size else Size(shape)
        t._strides = strides if strides.__class__ is tuple else tuple(strides)
        t._offset = offset
        t.dtype = dtype
        t.requires_grad = False
        t.grad = None
        t.grad_fn = None
        t._output_nr = 0  # which output of grad_fn this is (split makes several)
        t._retains_grad = False
        t._vc = [0]  # version counter: bumped by every in-place write, shared by views
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
                f"only Tensors of floating point dtype can require gradients (got {self.dtype})"
            )
        if not requires_grad and self.grad_fn is not None:
            raise RuntimeError("you can only change requires_grad flags of leaf variables.")
        self.requires_grad = requires_grad
        return self

    def retain_grad(self) -> None:
        """Keep ``.grad`` on this non-leaf tensor after ``backward()`` (a leaf keeps it anyway)."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.grad_fn is not None:
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
            other._storage,
            other._shape,
            other._strides,
            other._offset,
            other.dtype,
        )

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
                "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."
            )
        if self.is_cuda:
            raise TypeError(
                "can't convert cuda device type tensor to numpy. Use Tensor.cpu() to copy the "
                "tensor to host memory first."
            )
        item = self.dtype.itemsize
        return np.lib.stride_tricks.as_strided(
            self._storage[self._offset :] if self._storage.size else self._storage,
            shape=self._shape,
            strides=tuple(s * item for s in self._strides),
        )

    def _np(self) -> np.ndarray:
        """A numpy view for internal reading (no grad check); copies a GPU tensor."""
        if self.is_cuda:
            return dispatch.cuda().to_host(self)._np()
        item = self.dtype.itemsize
        return np.lib.stride_tricks.as_strided(
            self._storage[self._offset :] if self._storage.size else self._storage,
            shape=self._shape,
            strides=tuple(s * item for s in self._strides),
        )

    def tolist(self):
        return self._np().tolist()

    def item(self):
        """The value of a one-element tensor as a Python number."""
        if self.numel() != 1:
            raise RuntimeError(
                f"a Tensor with {self.numel()} elements cannot be converted to Scalar"
            )
        if self.is_cuda:
            dispatch.cuda().check_errors()
            return self._storage[self._offset : self._offset + 1].copy_to_host()[0].item()
        return self._storage[self._offset].item()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError(f"Boolean value of Tensor with {self.numel()} values is ambiguous")
        return bool(self.item())

    def __index__(self):
        if self.dtype is not int64 or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __array__(self, dtype=None, copy=None):
        a = self._np()
        return a.astype(dtype) if dtype is not None else np.array(a)

    # -------------------------------------------------------------------- repr
    def __repr__(self) -> str:
        return tensor_repr(self)

    def __str__(self) -> str:
        return self.__repr__()
