"""The Tensor's arithmetic, comparisons, elementwise maths and reductions (chapters 2.1, 2.2).

Installed on :class:`sitp.Tensor` by ``sitp/methods/__init__.py``.
"""

from __future__ import annotations

import builtins
import math
import numbers

import numpy as np

from sitp._tensor import dispatch
from sitp._tensor.creation import _from_numpy_owned, _operands, arange
from sitp._tensor.tensor import Tensor
from sitp.autograd import derivatives as ops
from sitp.autograd.grad_mode import is_grad_enabled
from sitp.dtypes import bool_, float32, int64
from sitp.functional import argsort, cat, return_types, sort, topk, where
from sitp.strides import normalize_dim, normalize_dims, numel

# Binary ops whose result is a float: integer or bool operands are converted to float32
# (torch's default dtype) first, as torch does; the _FLOAT_ONLY ops refuse them, as torch's.
_FLOAT_RESULT = ("div", "atan2")
_FLOAT_ONLY = ("hypot", "logaddexp")


def _triangle(x, diagonal: int, upper: bool, name: str):
    """tril/triu: entry (i, j) of each matrix kept where j - i <= diagonal (tril) or
    >= diagonal (triu), the others set to 0.

    The backends' ``tri`` zeroes an entry by multiplying it by 0, which is right for
    integers and finite floats; a float tensor takes a select instead, so that an inf or
    a nan outside the triangle becomes 0, as in torch (``full((3, 3), -inf).triu(1)`` is
    a causal mask).
    """
    if x.ndim < 2:
        raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions, got {x.ndim}")
    if not x.dtype.is_floating_point:
        return ops.Tri.apply(x, diagonal, upper)
    R, C = x.shape[-2:]
    j_minus_i_RC = arange(C, device=x.device).view(1, C) - arange(R, device=x.device).view(R, 1)
    keep_RC = j_minus_i_RC >= diagonal if upper else j_minus_i_RC <= diagonal
    return where(keep_RC, x, 0.0)


class TensorMath:
    """Arithmetic, comparisons, elementwise maths and reductions."""

    __slots__ = ()

    # -------------------------------------------------------------- arithmetic
    def _binary(self, other, op, reverse=False):
        if isinstance(other, Tensor) and other.dtype is self.dtype:
            a, b = self, other  # what _operands returns for one dtype, without its checks
        else:
            a, b = _operands(self, other)
        if not a.dtype.is_floating_point:
            if op in _FLOAT_RESULT:  # as torch: integers in, float32 (the default dtype) out
                a, b = a.to(float32), b.to(float32)
            elif op in _FLOAT_ONLY:
                raise NotImplementedError(
                    f"{op}(): not implemented for {a.dtype} tensors, as in torch; convert "
                    "them to a floating dtype first (x.float())"
                )
            elif a.dtype is bool_ and op == "add":  # as torch: True + True is True
                return _compare_fn(a, b, "logical_or")
            elif a.dtype is bool_ and op not in ("maximum", "minimum"):
                a, b = a.to(int64), b.to(int64)
        if reverse:
            a, b = b, a
        if (a.requires_grad or b.requires_grad) and is_grad_enabled():
            return ops.Binary.recorded(a, b, op)  # Binary.apply, for this checked case
        return dispatch.of(a, b).binary(op, a, b)  # nothing to record: Binary.forward's value

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
            if self.dtype is bool_:  # as torch: bool ** 3 is int64
                return self.to(int64) ** other
            x = (
                self
                if self.dtype.is_floating_point or (isinstance(other, int) and other >= 0)
                else self.to(float32)
            )
            if isinstance(other, float) and not x.dtype.is_floating_point:
                x = x.to(float32)
            return _unary_op(x, "pow", float(other))
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
        return _unary_op(self, "neg")

    neg = __neg__

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
        return self**exponent

    def maximum(self, other):
        return self._binary(other, "maximum")

    def minimum(self, other):
        return self._binary(other, "minimum")

    def atan2(self, other):
        return self._binary(other, "atan2")

    def hypot(self, other):
        """sqrt(self**2 + other**2), entry by entry, without overflow (``torch.hypot``)."""
        return self._binary(other, "hypot")

    def logaddexp(self, other):
        """log(exp(self) + exp(other)), entry by entry, without overflow
        (``torch.logaddexp``)."""
        return self._binary(other, "logaddexp")

    def matmul(self, other):
        return matmul(self, other)

    def mm(self, other):
        if self.ndim != 2 or other.ndim != 2:
            raise RuntimeError(
                f"mm(): both arguments must be 2-D, got {tuple(self.shape)} and {tuple(other.shape)}"
            )
        return matmul(self, other)

    def bmm(self, other):
        if self.ndim != 3 or other.ndim != 3:
            raise RuntimeError(
                f"bmm(): both arguments must be 3-D, got {tuple(self.shape)} and {tuple(other.shape)}"
            )
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
        return (
            self._compare(other, "logical_and")
            if self.dtype is bool_
            else _nograd_bitwise(self, other, "and")
        )

    def __or__(self, other):
        return (
            self._compare(other, "logical_or")
            if self.dtype is bool_
            else _nograd_bitwise(self, other, "or")
        )

    def __xor__(self, other):
        return (
            self._compare(other, "logical_xor")
            if self.dtype is bool_
            else _nograd_bitwise(self, other, "xor")
        )

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    def __invert__(self):
        if self.dtype is not bool_:
            raise TypeError("~ is only supported on bool tensors in sitp")
        return dispatch.of(self).unary("logical_not", self, out_dtype=bool_)

    def logical_not(self):
        return dispatch.of(self).unary("logical_not", self, out_dtype=bool_)

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
        """``_unary_op`` for the ops with a float result (exp, tanh, ...): an integer or
        bool tensor is converted to float32 first, as in torch. Written out, not a call of
        ``_unary_op``: a small op's cost is mostly its Python calls."""
        x = self if self.dtype.is_floating_point else self.to(float32)
        if x.requires_grad and is_grad_enabled():
            return ops.Unary.recorded(x, op, p0, p1)
        return dispatch.of_tensor(x).unary(op, x, p0, p1)

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
        if dims is None:
            if not isinstance(shifts, int):
                if len(shifts) != 1:
                    raise RuntimeError(
                        f"roll: with dims=None, shifts must be one int, got {shifts}"
                    )
                shifts = shifts[0]
            return self.flatten().roll(shifts, 0).reshape(self._shape)
        shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(shifts) != len(dims):
            raise RuntimeError(
                f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}"
            )
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
        return _unary_op(self, "relu") if self.dtype is not bool_ else self

    def abs(self):
        return _unary_op(self, "abs") if self.dtype is not bool_ else self

    def sign(self):
        return _unary_op(self, "sign")

    def square(self):
        return _unary_op(self if self.dtype is not bool_ else self.long(), "square")

    def floor(self):
        return _unary_op(self, "floor") if self.dtype.is_floating_point else self

    def ceil(self):
        return _unary_op(self, "ceil") if self.dtype.is_floating_point else self

    def round(self):
        return _unary_op(self, "round") if self.dtype.is_floating_point else self

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
        x = (
            self
            if self.dtype.is_floating_point
            or (not isinstance(min, float) and not isinstance(max, float))
            else self.to(float32)
        )
        return ops.Unary.apply(
            x,
            "clamp",
            math.nan if min is None else float(min),
            math.nan if max is None else float(max),
        )

    clip = clamp

    def clamp_min(self, min):
        return self.clamp(min=min)

    def clamp_max(self, max):
        return self.clamp(max=max)

    def where(self, condition, other):
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
        if x.requires_grad and is_grad_enabled():
            return ops.Sum.apply(x, dims, keepdim)
        return dispatch.of(x).reduce("sum", x, dims, keepdim)  # Sum.forward's value

    def mean(self, dim=None, keepdim: bool = False, dtype=None):
        """Average over ``dim``: the sum divided by the number of entries summed."""
        x = self if dtype is None else self.to(dtype)
        if not x.dtype.is_floating_point:
            raise RuntimeError(
                f"mean(): could not infer output dtype. Input dtype must be either a floating "
                f"point or complex dtype. Got: {x.dtype.name.capitalize()}"
            )
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
        return (a**p).sum(dim, keepdim) ** (1.0 / p)

    def prod(self, dim=None, keepdim: bool = False):
        if self.requires_grad and is_grad_enabled():
            raise RuntimeError("prod() is not differentiable in sitp")
        x = self.to(int64) if self.dtype is bool_ else self
        dims = (normalize_dim(dim, x.ndim),) if dim is not None else tuple(range(x.ndim))
        return dispatch.of(x).reduce("prod", x, dims, keepdim)

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
        x = self.to(int64) if self.dtype is bool_ else self
        if dim is None:
            if x.numel() == 0:
                raise RuntimeError(
                    f"{'max' if is_max else 'min'}(): Expected reduction dim to be specified for "
                    f"input.numel() == 0. Specify the reduction dim with the 'dim' argument."
                )
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
        return dispatch.of(self).reduce("all", self, dims, keepdim)

    def any(self, dim=None, keepdim: bool = False):
        dims = normalize_dims(dim, self.ndim)
        return dispatch.of(self).reduce("any", self, dims, keepdim)

    def softmax(self, dim: int, dtype=None):
        x = self if dtype is None else self.to(dtype)
        x = x if x.dtype.is_floating_point else x.to(float32)
        dim = normalize_dim(dim, x.ndim)
        if x.requires_grad and is_grad_enabled():
            return ops.Softmax.apply(x, dim, False)
        return dispatch.of(x).softmax(x, dim, False)  # Softmax.forward's value

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
        return dispatch.of(x).cumsum(x, normalize_dim(dim, x.ndim))

    def tril(self, diagonal: int = 0):
        return _triangle(self, diagonal, False, "tril")

    def triu(self, diagonal: int = 0):
        return _triangle(self, diagonal, True, "triu")

    def nonzero(self, as_tuple: bool = False):
        ordinals = dispatch.of(self).nonzero(self)
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
        return topk(self, k, dim, largest)

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False):
        return sort(self, dim, descending, stable)

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False):
        return argsort(self, dim, descending, stable)

    def flip(self, dims):
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


def _unary_op(x, op, p0=math.nan, p1=math.nan):
    """``Unary.apply(x, op, p0, p1)``; without a graph to record, the backend's op itself
    (the same value: Unary.forward's, without the Context it would fill for nothing)."""
    if x.requires_grad and is_grad_enabled():
        return ops.Unary.recorded(x, op, p0, p1)  # Unary.apply, for this checked case
    return dispatch.of_tensor(x).unary(op, x, p0, p1)


def _compare_fn(a, b, op):
    if a.dtype is bool_ and op not in ("logical_and", "logical_or", "logical_xor", "eq", "ne"):
        a, b = a.to(int64), b.to(int64)
    return dispatch.of(a, b).compare(op, a, b)


def _nograd_binary(a, b, op):
    a, b = _operands(a, b)
    if a.dtype is bool_:
        a, b = a.to(int64), b.to(int64)
    if not a.dtype.is_floating_point and bool((b == 0).any()):
        raise ZeroDivisionError(f"{op}: integer division by zero")
    return dispatch.of(a, b).binary(op, a, b)


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
    na, nb = len(a._shape), len(b._shape)
    if na == 0 or nb == 0:
        raise RuntimeError(
            f"both arguments to matmul need to be at least 1D, but they are {na}D and {nb}D"
        )
    if a.dtype is not b.dtype:  # torch does not promote in matmul
        raise RuntimeError(
            f"expected m1 and m2 to have the same dtype, but got: {a.dtype} != {b.dtype} "
            f"(shapes {tuple(a.shape)} @ {tuple(b.shape)})"
        )
    if a.dtype is bool_:
        raise RuntimeError("matmul is not supported for bool tensors")
    a2 = a.unsqueeze(0) if na == 1 else a
    b2 = b.unsqueeze(-1) if nb == 1 else b
    if a2._shape[-1] != b2._shape[-2]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied: {tuple(a.shape)} @ {tuple(b.shape)} "
            f"(inner dims {a2.shape[-1]} and {b2.shape[-2]} differ)"
        )
    if (a2.requires_grad or b2.requires_grad) and is_grad_enabled():
        out = ops.MatMul.apply(a2, b2)
    else:  # nothing to record: MatMul.forward's value
        out = dispatch.of(a2, b2).matmul(a2, b2)
    if na == 1:
        out = out.squeeze(-2)
    if nb == 1:
        out = out.squeeze(-1)
    return out
