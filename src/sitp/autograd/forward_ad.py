"""Forward-mode automatic differentiation with dual numbers (chapter 4.1).

A :class:`Dual` carries a value ``v`` and a tangent ``dv``: the directional
derivative of that value along the direction the inputs were seeded with.
Every operation computes its value *and* pushes the tangent through its own
derivative, at the same time, from the inputs to the output::

    (a, da) * (b, db) = (a b, da b + a db)
    exp((a, da))      = (exp a, exp(a) da)

so one evaluation of ``f`` on duals seeded with ``(x, v)`` yields ``f(x)``
and the Jacobian-vector product ``J v``. Nothing is recorded and nothing
runs backward. A teaching module: values and tangents may be Python floats
or sitp tensors (any mix that broadcasts), and only the operations below are
defined. Put the dual on the left of a tensor constant (``d * t``, not
``t * d``): a sitp tensor does not know about duals.
"""

from __future__ import annotations

import math
import numbers

from sitp._tensor.tensor import Tensor

__all__ = ["Dual", "jvp", "exp", "log", "sin", "cos", "tanh", "sigmoid", "sqrt"]


def _is_tensor(x) -> bool:
    return isinstance(x, Tensor)


def _fn(name, mathfn):
    """``name`` applied to a float (with ``math``) or a tensor (its method)."""

    def f(x):
        return getattr(x, name)() if _is_tensor(x) else mathfn(x)

    return f


_exp = _fn("exp", math.exp)
_log = _fn("log", math.log)
_sin = _fn("sin", math.sin)
_cos = _fn("cos", math.cos)
_tanh = _fn("tanh", math.tanh)
_sqrt = _fn("sqrt", math.sqrt)


def _sigmoid(x):
    return x.sigmoid() if _is_tensor(x) else 1 / (1 + math.exp(-x))


# --8<-- [start:dual]
class Dual:
    """A value and its tangent: ``value + tangent * ε`` with ``ε² = 0``.

    >>> x = Dual(2.0, 1.0)          # seed dx/dx = 1
    >>> y = x * x + 3 * x           # y = x² + 3x
    >>> y.value, y.tangent          # y(2) = 10, y'(2) = 2·2 + 3
    (10.0, 7.0)
    """

    __slots__ = ("value", "tangent")

    def __init__(self, value, tangent=0.0):
        self.value = value
        self.tangent = tangent

    def __repr__(self) -> str:
        return f"Dual({self.value!r}, {self.tangent!r})"

    # A constant is a dual with tangent 0.
    @staticmethod
    def lift(x) -> "Dual":
        return x if isinstance(x, Dual) else Dual(x, 0.0)

    # ------------------------------------------------ arithmetic: the sum, product and quotient rules
    def __add__(self, other):
        o = Dual.lift(other)
        return Dual(self.value + o.value, self.tangent + o.tangent)

    __radd__ = __add__

    def __neg__(self):
        return Dual(-self.value, -self.tangent)

    def __sub__(self, other):
        return self + (-Dual.lift(other))

    def __rsub__(self, other):
        return Dual.lift(other) + (-self)

    def __mul__(self, other):
        o = Dual.lift(other)
        return Dual(self.value * o.value, self.tangent * o.value + self.value * o.tangent)

    __rmul__ = __mul__

    def __truediv__(self, other):
        o = Dual.lift(other)
        q = self.value / o.value
        return Dual(q, (self.tangent - q * o.tangent) / o.value)

    def __rtruediv__(self, other):
        return Dual.lift(other) / self

    def __pow__(self, other):
        if isinstance(other, numbers.Real):  # x^c: c x^(c-1) dx
            return Dual(self.value**other, self.tangent * (other * self.value ** (other - 1)))
        o = Dual.lift(other)  # x^y = exp(y log x)
        return (o * self.log()).exp()

    def __rpow__(self, other):  # c^y = exp(y log c)
        return (self * _log(other)).exp()

    def __matmul__(self, other):  # d(AB) = dA B + A dB
        o = Dual.lift(other)
        tangent = self.tangent @ o.value if _is_tensor(self.tangent) else 0.0
        if _is_tensor(o.tangent):
            tangent = tangent + self.value @ o.tangent
        return Dual(self.value @ o.value, tangent)

    def __rmatmul__(self, other):
        return Dual.lift(other) @ self

    # ------------------------------------------------ the elementary functions: the chain rule
    def exp(self):
        y = _exp(self.value)
        return Dual(y, self.tangent * y)

    def log(self):
        return Dual(_log(self.value), self.tangent / self.value)

    def sin(self):
        return Dual(_sin(self.value), self.tangent * _cos(self.value))

    def cos(self):
        return Dual(_cos(self.value), -self.tangent * _sin(self.value))

    def tanh(self):
        y = _tanh(self.value)
        return Dual(y, self.tangent * (1 - y * y))

    def sigmoid(self):
        y = _sigmoid(self.value)
        return Dual(y, self.tangent * (y * (1 - y)))

    def sqrt(self):
        y = _sqrt(self.value)
        return Dual(y, self.tangent / (2 * y))

    def pow(self, other):
        return self**other

    # ------------------------------------------------ linear maps act on the tangent unchanged
    def sum(self, dim=None, keepdim: bool = False):
        return Dual(
            self.value.sum(dim, keepdim),
            _linear(self.tangent, "sum", dim, keepdim, like=self.value),
        )

    def mean(self, dim=None, keepdim: bool = False):
        return Dual(
            self.value.mean(dim, keepdim),
            _linear(self.tangent, "mean", dim, keepdim, like=self.value),
        )


# --8<-- [end:dual]


def _linear(t, name, dim, keepdim, like):
    """A reduction of a tangent; a 0.0 tangent (a constant) stays 0."""
    if _is_tensor(t):
        if tuple(t.shape) != tuple(like.shape):  # a broadcast tangent
            t = t.expand(like.shape)
        return getattr(t, name)(dim, keepdim)
    return 0.0


def _dispatch(name, fallback):
    def f(x):
        """``{name}`` of a dual, a tensor or a float."""
        return getattr(x, name)() if isinstance(x, Dual) else fallback(x)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"{name} of a Dual, a sitp tensor or a float."
    return f


exp = _dispatch("exp", _exp)
log = _dispatch("log", _log)
sin = _dispatch("sin", _sin)
cos = _dispatch("cos", _cos)
tanh = _dispatch("tanh", _tanh)
sigmoid = _dispatch("sigmoid", _sigmoid)
sqrt = _dispatch("sqrt", _sqrt)


# --8<-- [start:jvp]
def jvp(fn, primals, tangents):
    """``fn(*primals)`` and its Jacobian-vector product with ``tangents``, in forward mode.

    Each primal ``x_i`` is paired with its tangent ``v_i`` into a
    :class:`Dual`; one evaluation of ``fn`` on the duals carries
    ``sum_i J_i v_i`` along with the value.

    Args:
        fn: a function of the primals written with operations :class:`Dual`
            supports (``+ - * / ** @``, ``exp``, ``log``, ``sin``, ...).
        primals: a value or a tuple of values (floats or tensors).
        tangents: one tangent per primal, each of its primal's shape.

    Returns:
        ``(output, jvp)``, with a tuple of each for a tuple-valued ``fn``.

    >>> import math
    >>> f = lambda x1, x2: exp(x1) * sin(x2) ** 2
    >>> out, df_dx1 = jvp(f, (0.0, math.pi / 2), (1.0, 0.0))
    >>> round(out, 12), round(df_dx1, 12)
    (1.0, 1.0)
    """
    primals = primals if isinstance(primals, tuple) else (primals,)
    tangents = tangents if isinstance(tangents, tuple) else (tangents,)
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
    for p, t in zip(primals, tangents):
        if _is_tensor(p) and (not _is_tensor(t) or tuple(t.shape) != tuple(p.shape)):
            raise ValueError("jvp: each tangent must be a tensor of its primal's shape")
    out = fn(*(Dual(p, t) for p, t in zip(primals, tangents)))
    if isinstance(out, tuple):
        pairs = [_split(o) for o in out]
        return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
    return _split(out)


# --8<-- [end:jvp]


def _split(out):
    """(value, tangent) of an output; a constant output has a zero tangent."""
    d = Dual.lift(out)
    value, tangent = d.value, d.tangent
    if _is_tensor(value):
        if not _is_tensor(tangent):
            tangent = value * 0 + tangent
        elif tuple(tangent.shape) != tuple(value.shape):
            tangent = tangent.expand(value.shape).contiguous()
    return value, tangent
