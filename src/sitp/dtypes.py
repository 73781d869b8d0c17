"""The four element types sitp supports, and how they combine.

sitp has ``float32`` (the default for floats), ``float64``, ``int64`` (the
default for ints) and ``bool``. Each ``dtype`` wraps the numpy dtype used for
its storage. Promotion follows PyTorch: ``bool < int64 < float32 < float64``,
and a Python scalar never widens a tensor of its own kind (``x_f32 * 2.5``
stays float32).
"""

from __future__ import annotations

import numpy as np


class dtype:
    """An element type; compare with ``sitp.float32`` etc."""

    __slots__ = ("name", "np", "rank", "is_floating_point", "itemsize")

    def __init__(self, name: str, np_dtype, rank: int, is_floating_point: bool):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.rank = rank
        self.is_floating_point = is_floating_point
        self.itemsize = self.np.itemsize

    def __repr__(self) -> str:
        return f"sitp.{self.name}"

    def __reduce__(self):
        return (_by_name, (self.name,))


bool_ = dtype("bool", np.bool_, 0, False)
int64 = dtype("int64", np.int64, 1, False)
float32 = dtype("float32", np.float32, 2, True)
float64 = dtype("float64", np.float64, 3, True)

long = int64
float = float32  # noqa: A001 - PyTorch's alias
double = float64

_ALL = {"bool": bool_, "int64": int64, "float32": float32, "float64": float64}
_FROM_NP = {d.np: d for d in _ALL.values()}


def _by_name(name: str) -> dtype:
    return _ALL[name]


def from_numpy_dtype(np_dtype) -> dtype:
    """The sitp dtype for a numpy dtype (ints widen to int64).

    Raises:
        TypeError: for dtypes sitp does not support (strings, complex, objects).
    """
    np_dtype = np.dtype(np_dtype)
    if np_dtype in _FROM_NP:
        return _FROM_NP[np_dtype]
    if np_dtype.kind in "iu":
        return int64
    if np_dtype.kind == "f":
        return float32 if np_dtype.itemsize <= 4 else float64
    raise TypeError(f"sitp does not support arrays of dtype {np_dtype}")


def to_dtype(d) -> dtype:
    """Accept a sitp dtype, a numpy dtype, a Python type or a name."""
    if isinstance(d, dtype):
        return d
    if d is builtins_float:
        return float32
    if d is builtins_int:
        return int64
    if d is builtins_bool:
        return bool_
    if isinstance(d, str) and d in _ALL:
        return _ALL[d]
    try:
        return from_numpy_dtype(d)
    except TypeError:
        raise TypeError(f"not a dtype sitp supports: {d!r}") from None


import builtins as _builtins  # noqa: E402

builtins_float = _builtins.float
builtins_int = _builtins.int
builtins_bool = _builtins.bool


# --8<-- [start:promotion]
def promote(a: dtype, b: dtype) -> dtype:
    """The dtype of ``a op b`` for two tensors."""
    return a if a.rank >= b.rank else b


def scalar_dtype(value, other: dtype) -> dtype:
    """The dtype a Python scalar takes next to a tensor of dtype ``other``."""
    if isinstance(value, builtins_bool):
        return other
    if isinstance(value, builtins_int):
        return other if other is not bool_ else int64
    if isinstance(value, builtins_float):
        return other if other.is_floating_point else float32
    raise TypeError(f"unsupported scalar type {type(value).__name__}")


# --8<-- [end:promotion]
