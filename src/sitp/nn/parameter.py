"""``Parameter``: a tensor that a ``Module`` registers as trainable."""

from __future__ import annotations

from sitp._tensor.creation import empty, tensor
from sitp._tensor.tensor import Tensor


class Parameter(Tensor):
    """A leaf tensor with ``requires_grad=True`` that modules collect.

    It shares storage with the tensor it wraps. Assigning the same Parameter
    to two modules shares it (weight tying): ``parameters()`` lists it once.
    """

    __slots__ = ()

    def __new__(cls, data: Tensor = None, requires_grad: bool = True):
        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter expects a Tensor, got {type(data).__name__}")
        p = cls._make(data._storage, data._shape, data._strides, data._offset, data.dtype)
        if requires_grad:
            p.requires_grad_(True)
        return p

    def __init__(self, data=None, requires_grad=True):
        pass

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __reduce_ex__(self, proto):
        return (Parameter, (tensor(self.detach().numpy()), self.requires_grad))
