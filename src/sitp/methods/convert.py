"""The Tensor's conversions (chapter 2.1): dtype and device moves, clone, contiguous;
and ``backward`` (chapter 4.1). Installed on :class:`sitp.Tensor` by ``sitp/methods/__init__.py``.
"""

from __future__ import annotations

from sitp._tensor.tensor import Tensor, device
from sitp.autograd import derivatives as ops
from sitp.autograd import engine as _autograd
from sitp.dtypes import bool_, float32, float64, int64, to_dtype


class TensorConvert:
    """Conversions between dtypes and devices, copies, and backward()."""

    __slots__ = ()

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
            kind = {"float32": "Float", "float64": "Double", "int64": "Long", "bool": "Bool"}
            return f"sitp.{kind[self.dtype.name]}Tensor"
        return self.to(dtype)

    def clone(self) -> "Tensor":
        return ops.Clone.apply(self)

    def contiguous(self) -> "Tensor":
        """This tensor if already contiguous, else a contiguous copy."""
        return self if self.is_contiguous() else ops.Clone.apply(self)

    def backward(
        self, gradient=None, retain_graph=None, create_graph: bool = False, inputs=None
    ) -> None:
        """Accumulate the gradient of this tensor into the graph's leaves.

        With ``inputs`` (a tensor or a sequence of them), only those receive
        gradients, as in torch. sitp has no higher-order gradients:
        ``create_graph=True`` raises NotImplementedError rather than be ignored.
        """
        if create_graph:
            raise NotImplementedError(
                "backward(create_graph=True): sitp has no higher-order gradients"
            )
        if inputs is not None:
            # the public torch.autograd.backward (defined after the engine), looked up now
            _autograd.backward(self, gradient, retain_graph=bool(retain_graph), inputs=inputs)
            return
        _autograd._engine_backward(self, gradient, bool(retain_graph))

    def register_post_accumulate_grad_hook(self, hook):
        """Call ``hook(self)`` in each ``backward()`` once this leaf's ``.grad`` holds the
        whole pass's gradient; returns a handle whose ``remove()`` unregisters it
        (torch's method of the same name; see :mod:`sitp.autograd.engine`)."""
        return _autograd.register_post_accumulate_grad_hook(self, hook)
