"""torch's legacy tensor types: ``sitp.LongTensor``, ``FloatTensor``, ``DoubleTensor``,
``BoolTensor``.

Older PyTorch code makes tensors with a type per dtype and checks a tensor's dtype
with ``isinstance``. Each of these types does both, as torch's do, and is nothing
more: calling it returns a plain :class:`sitp.Tensor` (``type(sitp.LongTensor([1]))``
is ``sitp.Tensor``), and ``isinstance(x, sitp.LongTensor)`` is true for a CPU tensor
of dtype int64, whatever made it.

The call forms, as torch's:

* ``LongTensor()``: an empty tensor, of size 0;
* ``LongTensor(2, 3)`` or ``LongTensor(sitp.Size([2, 3]))``: a tensor of that size,
  uninitialised (``sitp.empty``);
* ``LongTensor([[1, 2], [3, 4]])``: a copy of the data in that dtype (a tuple is data
  too; floats are truncated towards zero, as ``tensor(..., dtype=int64)`` does);
* ``LongTensor(t)``: ``t`` itself, seen again (it shares ``t``'s storage), when ``t``
  is already a CPU int64 tensor; any other dtype is a TypeError.

sitp has one integer dtype and no half precision, so ``IntTensor``, ``ByteTensor``,
``ShortTensor``, ``CharTensor``, ``HalfTensor`` and ``BFloat16Tensor`` exist only to say
so: calling one is a TypeError that names the type to use, and no tensor is an instance
of one.

>>> import sitp
>>> x = sitp.LongTensor([1.7, -2.2])
>>> x, isinstance(x, sitp.LongTensor), isinstance(x, sitp.FloatTensor)
(tensor([ 1, -2]), True, False)
>>> sitp.FloatTensor(2, 3).shape, sitp.DoubleTensor().shape
(sitp.Size([2, 3]), sitp.Size([0]))
"""

from __future__ import annotations

import numbers

import numpy as np

from sitp import dtypes
from sitp._tensor.creation import empty, tensor
from sitp._tensor.tensor import Size, Tensor
from sitp._tensor.tensor import device as Device


class _TensorType(type):
    """The type of the legacy types: ``isinstance`` asks a tensor for its dtype."""

    def __instancecheck__(cls, obj) -> bool:
        return (
            isinstance(obj, Tensor)
            and cls.dtype is not None
            and obj.dtype is cls.dtype
            and obj.device.type == "cpu"
        )

    def __subclasscheck__(cls, sub) -> bool:
        return sub is cls

    def __repr__(cls) -> str:
        return f"<class 'sitp.{cls.__name__}'>"


def _is_size(args) -> bool:
    return len(args) > 0 and all(
        isinstance(n, (int, np.integer)) and not isinstance(n, bool) for n in args
    )


class _Legacy(metaclass=_TensorType):
    dtype: dtypes.dtype | None = None
    is_cuda = False
    is_sparse = False

    def __new__(cls, *args, device=None):
        if cls.dtype is None:
            raise TypeError(cls._missing)
        if device is not None and Device(device).type != "cpu":
            raise RuntimeError(
                f"legacy constructor expects device type: cpu but device type: "
                f"{Device(device).type} was passed"
            )
        if not args:
            return empty(0, dtype=cls.dtype)
        if _is_size(args):
            return empty(*args, dtype=cls.dtype)
        if len(args) > 1:
            raise TypeError(
                f"{cls.__name__}(): takes sizes as ints or one argument (data, a Size or a "
                f"tensor); got ({', '.join(type(a).__name__ for a in args)})"
            )
        (data,) = args
        if isinstance(data, Size):
            return empty(*data, dtype=cls.dtype)
        if isinstance(data, Tensor):
            if data.dtype is not cls.dtype or data.device.type != "cpu":
                raise TypeError(
                    f"{cls.__name__}(tensor): expected a CPU tensor of dtype {cls.dtype}, "
                    f"got one of dtype {data.dtype} on {data.device.type}"
                )
            return data.detach()
        if isinstance(data, (str, bytes)) or not isinstance(data, (list, tuple, np.ndarray)):
            if isinstance(data, (numbers.Number, type(None))):
                raise TypeError(f"new(): data must be a sequence (got {type(data).__name__})")
            raise TypeError(f"new(): invalid data type '{type(data).__name__}'")
        return tensor(data, dtype=cls.dtype)


def _legacy(name: str, dtype, missing: str = ""):
    return _TensorType(
        name, (_Legacy,), {"dtype": dtype, "_missing": missing, "__module__": "sitp"}
    )


LongTensor = _legacy("LongTensor", dtypes.int64)
FloatTensor = _legacy("FloatTensor", dtypes.float32)
DoubleTensor = _legacy("DoubleTensor", dtypes.float64)
BoolTensor = _legacy("BoolTensor", dtypes.bool_)

_NO_INT = "sitp has one integer dtype, int64: use sitp.LongTensor"
_NO_HALF = "sitp has no 16-bit floats: use sitp.FloatTensor (float32)"
IntTensor = _legacy("IntTensor", None, f"IntTensor is torch's int32 type; {_NO_INT}")
ShortTensor = _legacy("ShortTensor", None, f"ShortTensor is torch's int16 type; {_NO_INT}")
CharTensor = _legacy("CharTensor", None, f"CharTensor is torch's int8 type; {_NO_INT}")
ByteTensor = _legacy(
    "ByteTensor", None, f"ByteTensor is torch's uint8 type; {_NO_INT} (BoolTensor for a mask)"
)
HalfTensor = _legacy("HalfTensor", None, f"HalfTensor is torch's float16 type; {_NO_HALF}")
BFloat16Tensor = _legacy(
    "BFloat16Tensor", None, f"BFloat16Tensor is torch's bfloat16 type; {_NO_HALF}"
)

__all__ = [
    "BFloat16Tensor",
    "BoolTensor",
    "ByteTensor",
    "CharTensor",
    "DoubleTensor",
    "FloatTensor",
    "HalfTensor",
    "IntTensor",
    "LongTensor",
    "ShortTensor",
]
