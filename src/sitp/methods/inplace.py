"""The Tensor's in-place ops (chapter 4.1): ``add_``, ``copy_``, ``x[i] = v``, fills.

Each bumps the storage's version counter; autograd records one as torch does.
Installed on :class:`sitp.Tensor` by ``sitp/methods/__init__.py``.
"""

from __future__ import annotations

import numpy as np

from sitp._tensor import dispatch
from sitp._tensor.creation import _scalar, empty, full, ones, tensor, zeros
from sitp._tensor.creation import tensor as _tensor
from sitp._tensor.tensor import Tensor
from sitp.autograd.function import check_inplace as _check_inplace
from sitp.autograd.function import refuse_indexed_write as _refuse_indexed_write
from sitp.autograd.grad_mode import no_grad
from sitp.dtypes import bool_, float32, float64
from sitp.methods.indexing import setitem
from sitp.random import _normal, _uniform
from sitp.strides import broadcast_shapes, contiguous_strides


def _elementwise_inplace(name: str):
    """``x.name_()``: the in-place form of the Tensor method ``name`` (no arguments)."""

    def inplace(self):
        return self._inplace_op(name)

    inplace.__name__ = inplace.__qualname__ = name + "_"
    inplace.__doc__ = f"In-place ``{name}``: writes ``x.{name}()`` into x."
    return inplace


class TensorInplace:
    """In-place ops and the new_* constructors."""

    __slots__ = ()

    # -------------------------------------------------------------- in-place
    # --8<-- [start:inplace]
    def _inplace(self, result: "Tensor", cast: bool = False) -> "Tensor":
        """Write ``result`` (broadcast to self's shape) into self's storage; unless ``cast``
        (copy_), a float result into an integer tensor, or a number into a bool one, is
        refused as torch does. In the graph (see ``_check_inplace``) the write is recorded."""
        if _check_inplace(self, result):
            return self._record_inplace(lambda old: old.masked_fill(_all_true(old), result), cast)
        if (
            result.dtype is not self.dtype
            and not cast
            and (
                (result.dtype.is_floating_point and not self.dtype.is_floating_point)
                or (self.dtype is bool_ and result.dtype is not bool_)
            )
        ):
            raise RuntimeError(
                f"result type {result.dtype} can't be cast to the desired output type "
                f"{self.dtype} (in-place op on a tensor of shape {tuple(self.shape)})"
            )
        if broadcast_shapes(result.shape, self.shape) != tuple(self.shape):
            raise RuntimeError(
                f"output with shape {tuple(self.shape)} doesn't match the broadcast shape "
                f"{broadcast_shapes(result.shape, self.shape)}"
            )
        dispatch.of(self, result).assign(self, result)
        self._vc[0] += 1
        return self

    def _record_inplace(self, compute, cast: bool = False) -> "Tensor":
        """An in-place op recorded as torch records it: ``compute`` runs out of place on a
        copy that carries self's place in the graph (so what it saves is never overwritten),
        its result is written into self's storage, and self takes the result's grad_fn."""
        old_node, old_nr = self.grad_fn, self._output_nr
        r = compute(self.clone())
        if tuple(r.shape) != tuple(self.shape) and broadcast_shapes(r.shape, self.shape) == tuple(
            self.shape
        ):
            r = r.expand(self.shape)
        if r.dtype is not self.dtype and r.dtype.is_floating_point and self.dtype.is_floating_point:
            r = r.to(self.dtype)
        with no_grad():
            self._inplace(r, cast)
        if r.requires_grad:
            self.grad_fn, self._output_nr, self.requires_grad = r.grad_fn, r._output_nr, True
            if self._retains_grad:
                if old_node is not None and old_node.retained:
                    old_node.retained.pop(old_nr, None)
                self.retain_grad()
        return self

    def _into(self, op: str, other) -> bool:
        """``self op= other`` written straight into self's storage, for the common case:
        ``other`` a tensor of self's shape and dtype (or a single entry of its dtype), or
        a number, where self is float32 or float64. False where the general path must run
        (it promotes, broadcasts and checks): the same values either way."""
        if self.dtype is not float32 and self.dtype is not float64:
            return False
        if isinstance(other, Tensor):
            if other.dtype is not self.dtype or (other._shape != self._shape and other._shape):
                return False
        elif other.__class__ in (int, float):
            other = _scalar(other, self.dtype)
        else:
            return False
        dispatch.of(self, other).binary_into(op, self, other)
        self._vc[0] += 1
        return True

    # Each in-place op below records itself when _check_inplace says so; otherwise no
    # operand requires grad or grad mode is off, so its out-of-place arithmetic records
    # nothing either, and it runs as it is (a no_grad block there would change nothing).
    def add_(self, other, alpha=1):
        if _check_inplace(self, other):
            return self._record_inplace(lambda x: x + (other * alpha if alpha != 1 else other))
        if alpha == 1 and self._into("add", other):
            return self
        return self._inplace(self + (other * alpha if alpha != 1 else other))

    def sub_(self, other, alpha=1):
        if _check_inplace(self, other):
            return self._record_inplace(lambda x: x - (other * alpha if alpha != 1 else other))
        if alpha == 1 and self._into("sub", other):
            return self
        return self._inplace(self - (other * alpha if alpha != 1 else other))

    def mul_(self, other):
        if _check_inplace(self, other):
            return self._record_inplace(lambda x: x * other)
        if self._into("mul", other):
            return self
        return self._inplace(self * other)

    def div_(self, other):
        if _check_inplace(self, other):
            return self._record_inplace(lambda x: x / other)
        if self._into("div", other):
            return self
        return self._inplace(self / other)

    def addcmul_(self, t1, t2, value=1):
        if _check_inplace(self, t1, t2):
            return self._record_inplace(lambda x: x + t1 * t2 * value)
        return self._inplace(self + t1 * t2 * value)

    def addcdiv_(self, t1, t2, value=1):
        if _check_inplace(self, t1, t2):
            return self._record_inplace(lambda x: x + t1 / t2 * value)
        return self._inplace(self + t1 / t2 * value)

    def lerp_(self, end, weight):
        if _check_inplace(self, end, weight):
            return self._record_inplace(lambda x: x + (end - x) * weight)
        return self._inplace(self + (end - self) * weight)

    def copy_(self, src) -> "Tensor":
        if not isinstance(src, Tensor):
            src = _tensor(src)
        _check_inplace(self, src)
        return self._inplace(src, cast=True)

    def fill_(self, value) -> "Tensor":
        return self._inplace(_scalar(value, self.dtype))

    def zero_(self) -> "Tensor":
        return self.fill_(0)

    # --8<-- [end:inplace]

    def _inplace_op(self, name: str, *args) -> "Tensor":
        """``x.name_(*args)``: ``x.name(*args)`` computed out of place, then written into x,
        recorded in the autograd graph as torch records it. Like torch, it refuses a float
        result for an integer tensor."""
        op = getattr(Tensor, name)
        if _check_inplace(self, *args):
            return self._record_inplace(lambda x: op(x, *args))
        return self._inplace(op(self, *args))

    def atan2_(self, other):
        return self._inplace_op("atan2", other)

    def clamp_(self, min=None, max=None):
        return self._inplace_op("clamp", min, max)

    def clamp_max_(self, max):
        return self._inplace_op("clamp_max", max)

    def clamp_min_(self, min):
        return self._inplace_op("clamp_min", min)

    def hypot_(self, other):
        return self._inplace_op("hypot", other)

    def pow_(self, exponent):
        return self._inplace_op("pow", exponent)

    # x.exp_(), x.sin_(), ...: the elementwise ops without arguments that torch has in place
    abs_ = _elementwise_inplace("abs")
    ceil_ = _elementwise_inplace("ceil")
    cos_ = _elementwise_inplace("cos")
    erf_ = _elementwise_inplace("erf")
    exp_ = _elementwise_inplace("exp")
    exp2_ = _elementwise_inplace("exp2")
    expm1_ = _elementwise_inplace("expm1")
    floor_ = _elementwise_inplace("floor")
    log_ = _elementwise_inplace("log")
    log10_ = _elementwise_inplace("log10")
    log1p_ = _elementwise_inplace("log1p")
    log2_ = _elementwise_inplace("log2")
    neg_ = _elementwise_inplace("neg")
    reciprocal_ = _elementwise_inplace("reciprocal")
    relu_ = _elementwise_inplace("relu")
    round_ = _elementwise_inplace("round")
    rsqrt_ = _elementwise_inplace("rsqrt")
    sigmoid_ = _elementwise_inplace("sigmoid")
    sign_ = _elementwise_inplace("sign")
    sin_ = _elementwise_inplace("sin")
    sqrt_ = _elementwise_inplace("sqrt")
    square_ = _elementwise_inplace("square")
    tanh_ = _elementwise_inplace("tanh")
    trunc_ = _elementwise_inplace("trunc")

    def index_put_(self, indices, values, accumulate: bool = False):
        if _check_inplace(self, values):
            _refuse_indexed_write(self)
        setitem(self, tuple(indices), values, accumulate=accumulate)
        self._vc[0] += 1
        return self

    def uniform_(self, a: float = 0.0, b: float = 1.0, generator=None):
        return self._inplace(_uniform(self.shape, a, b, self.dtype, generator, self.device))

    def normal_(self, mean: float = 0.0, std: float = 1.0, generator=None):
        return self._inplace(_normal(self.shape, mean, std, self.dtype, generator, self.device))

    def __iadd__(self, other):
        return self.add_(other)

    def __isub__(self, other):
        return self.sub_(other)

    def __imul__(self, other):
        return self.mul_(other)

    def __itruediv__(self, other):
        return self.div_(other)

    # torch's new_* take the sizes as one sequence or as separate ints (new_full: a
    # sequence), and make the tensor on this tensor's device with its dtype by default
    def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
        return zeros(*size, **self._new_kw(dtype, device, requires_grad))

    def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
        return ones(*size, **self._new_kw(dtype, device, requires_grad))

    def new_empty(self, *size, dtype=None, device=None, requires_grad=False):
        return empty(*size, **self._new_kw(dtype, device, requires_grad))

    def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
        return full(size, fill_value, **self._new_kw(dtype, device, requires_grad))

    def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
        return tensor(data, **self._new_kw(dtype, device, requires_grad))

    def _new_kw(self, dtype, device, requires_grad):
        return {
            "dtype": dtype or self.dtype,
            "device": device or self.device,
            "requires_grad": requires_grad,
        }


def _all_true(t) -> Tensor:
    """A bool tensor of ``t``'s shape, all True (masked_fill with it overwrites everything)."""
    return Tensor._make(
        np.ones(max(t.numel(), 1), dtype=np.bool_), t.shape, contiguous_strides(t.shape), 0, bool_
    ).to(t.device)
