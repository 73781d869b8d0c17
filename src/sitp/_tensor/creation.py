"""Making tensors: from Python data, and filled with constants or ranges."""

from __future__ import annotations

import numbers

import numpy as np

from sitp import cuda
from sitp._tensor import dispatch
from sitp._tensor.tensor import Tensor
from sitp._tensor.tensor import device as _device
from sitp.dtypes import bool_, float32, from_numpy_dtype, int64, promote, scalar_dtype, to_dtype
from sitp.kernels.cpu import ops as cpu
from sitp.strides import contiguous_strides


def _on_cuda(device) -> bool:
    """Whether ``device`` names the GPU (checking that one can be used)."""
    if device is None:
        return False
    d = device if device.__class__ is _device else _device(device)
    if d.type == "cuda":
        cuda._require()
        return True
    return False


def _place(t: Tensor, device) -> Tensor:
    """Move a freshly made CPU tensor to ``device`` (a copy, at creation only)."""
    if _on_cuda(device):
        return dispatch.cuda().to_device(t)
    return t


def _from_numpy_owned(arr: np.ndarray) -> Tensor:
    """Wrap a contiguous numpy array as a tensor (shares its memory)."""
    if not arr.flags.c_contiguous:  # (np.ascontiguousarray would turn a 0-d array 1-d)
        arr = np.ascontiguousarray(arr)
    d = from_numpy_dtype(arr.dtype)
    if arr.dtype != d.np:
        arr = arr.astype(d.np)
    return Tensor._make(arr.reshape(-1), arr.shape, contiguous_strides(arr.shape), 0, d)


def _size(size):
    if len(size) == 1 and not isinstance(size[0], (int, np.integer)):
        size = tuple(size[0])
    for n in size:  # the common case: Python ints, none negative
        if n.__class__ is not int or n < 0:
            break
    else:
        return size if size.__class__ is tuple else tuple(size)
    out = []
    for n in size:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"size must be a tuple of ints, got {tuple(size)}")
        if n < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {n}: {list(size)}")
        out.append(int(n))
    return tuple(out)


# --8<-- [start:tensor]
def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (nested lists, numbers, arrays).

    Floats default to float32 and ints to int64, as in PyTorch; a numpy
    float64 array stays float64.

    >>> import sitp
    >>> sitp.tensor([[1, 2], [3, 4]]).dtype
    sitp.int64
    >>> sitp.tensor([1.5, 2]).dtype
    sitp.float32

    Raises:
        TypeError: for strings or objects that are not numbers.
        ValueError: for ragged nested lists.
    """
    if isinstance(data, Tensor):
        arr = data._np().copy()
    elif isinstance(data, (np.ndarray, np.generic)):
        arr = np.array(data)
    else:
        if isinstance(data, (str, bytes)):
            raise TypeError(f"new(): invalid data type '{type(data).__name__}'")
        try:
            arr = np.array(data)
        except ValueError as e:
            raise ValueError(f"expected a rectangular nested sequence of numbers; {e}") from None
        if arr.dtype.kind == "f" and dtype is None:
            arr = arr.astype(np.float32)
    if arr.dtype.kind not in "biuf":
        raise TypeError(
            f"sitp.tensor() takes numbers, nested lists of numbers or arrays; got data of "
            f"type {type(data).__name__} (numpy dtype {arr.dtype})"
        )
    t = _place(_from_numpy_owned(arr if dtype is None else arr.astype(to_dtype(dtype).np)), device)
    if requires_grad:
        t.requires_grad_(True)
    return t


# --8<-- [end:tensor]


def as_tensor(data, dtype=None, device=None) -> Tensor:
    if (
        isinstance(data, Tensor)
        and (dtype is None or to_dtype(dtype) is data.dtype)
        and (device is None or _device(device) == data.device)
    ):
        return data
    return tensor(data, dtype=dtype, device=device)


def from_numpy(arr: np.ndarray) -> Tensor:
    """A tensor sharing memory with a numpy array (copied only if not contiguous)."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(arr).__name__})")
    return _from_numpy_owned(arr)


def full(size, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of ``size`` filled with ``fill_value``."""
    size = _size((size,) if isinstance(size, (int, np.integer)) else size)
    if dtype is None:
        dtype = (
            bool_
            if isinstance(fill_value, bool)
            else (int64 if isinstance(fill_value, numbers.Integral) else float32)
        )
    dtype = to_dtype(dtype)
    backend = dispatch.cuda() if _on_cuda(device) else cpu
    t = Tensor._make(
        backend.fill(size, fill_value, dtype), size, contiguous_strides(size), 0, dtype
    )
    if requires_grad:
        t.requires_grad_(True)
    return t


def zeros(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return full(_size(size), 0, dtype=dtype or float32, device=device, requires_grad=requires_grad)


def ones(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return full(_size(size), 1, dtype=dtype or float32, device=device, requires_grad=requires_grad)


def empty(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    size = _size(size)
    d = to_dtype(dtype) if dtype is not None else float32
    backend = dispatch.cuda() if _on_cuda(device) else cpu
    t = Tensor._make(backend.empty(size, d), size, contiguous_strides(size), 0, d)
    if requires_grad:
        t.requires_grad_(True)
    return t


def zeros_like(t, dtype=None, requires_grad=False, device=None) -> Tensor:
    return zeros(
        t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad, device=device or t.device
    )


def ones_like(t, dtype=None, requires_grad=False, device=None) -> Tensor:
    return ones(
        t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad, device=device or t.device
    )


def full_like(t, fill_value, dtype=None, device=None) -> Tensor:
    return full(t.shape, fill_value, dtype=dtype or t.dtype, device=device or t.device)


def empty_like(t, dtype=None, device=None) -> Tensor:
    return empty(t.shape, dtype=dtype or t.dtype, device=device or t.device)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Values from ``start`` up to (not including) ``end`` in steps of ``step``."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (end - start) * step < 0:
        raise RuntimeError(
            f"upper bound and larger bound inconsistent with step sign (start={start}, end={end}, step={step})"
        )
    if dtype is None:
        dtype = (
            int64 if all(isinstance(v, numbers.Integral) for v in (start, end, step)) else float32
        )
    dtype = to_dtype(dtype)
    backend = dispatch.cuda() if _on_cuda(device) else cpu
    storage = backend.arange(start, end, step, dtype)
    t = Tensor._make(storage, (storage.size,), (1,), 0, dtype)
    if requires_grad:
        t.requires_grad_(True)
    return t


def linspace(start, end, steps: int, dtype=None, device=None) -> Tensor:
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive."""
    if steps < 0:
        raise RuntimeError(f"number of steps must be non-negative, got {steps}")
    dtype = to_dtype(dtype) if dtype is not None else float32
    if steps == 1:
        return full((1,), start, dtype=dtype, device=device)
    step = (end - start) / (steps - 1) if steps > 1 else 0.0
    out = arange(0, steps, 1, dtype=to_dtype("float64")) * step + start
    return _place(out.to(dtype), device)


def eye(n: int, m=None, dtype=None, device=None) -> Tensor:
    """The identity matrix (n x m)."""
    m = n if m is None else m
    ones_ = ones(n, m, dtype=dtype, device=device)
    return ones_.tril().triu()


def _scalar(value, dtype) -> Tensor:
    """A 0-d tensor holding ``value`` with ``dtype``."""
    return Tensor._make(np.array([value], dtype=dtype.np), (), (), 0, dtype)


# --8<-- [start:operands]
def _operands(a, b):
    """Promote two operands (tensors or Python scalars) to one dtype."""
    kind = b.__class__
    if kind is float or kind is int:  # the common scalars first: scalar_dtype's rules
        ad = a.dtype
        if kind is float:
            d = ad if ad.is_floating_point else float32
        else:
            d = ad if ad is not bool_ else int64
        return (a if ad is d else a.to(d)), _scalar(b, d)
    if not isinstance(b, Tensor):
        if isinstance(b, np.ndarray):
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
