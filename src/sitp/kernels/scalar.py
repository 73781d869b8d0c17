"""The scalar functions of the elementwise ops, shared by both backends (chapters 2.2, 4.3).

An elementwise kernel applies one of these to each entry, chosen by an integer *op code*:
``unary(op, x, p0, p1)``, ``binary(op, x, y)`` and ``compare(op, x, y)`` are plain Python
with an ``if``/``elif`` chain, so that the CPU backend compiles them with
``numba.njit(inline="always")`` (``sitp/kernels/cpu/kernels.py``) and the CUDA backend with
``numba.cuda.jit(device=True)`` (``sitp/kernels/cuda/ops.py``): one definition, two
targets. The tensor layer names ops, the kernels see codes: ``UNARY["exp"]`` is the code
of ``exp``, and the branch for it tests ``op == UnaryOp.exp``.

This module imports no numba. numba's own cache would not notice an edit here (a cached
kernel inlines these functions from another file), but sitp keys its numba cache on a
hash of every file of ``sitp/kernels`` (``sitp._target.kernel_sources_hash``), so an
edit compiles the kernels again.
"""

from __future__ import annotations

import math
from enum import IntEnum

import numpy as np

# --8<-- [start:opcodes]
# The op codes. Each list names its ops; an op's code is its position there. The scalar
# functions below branch on the names (``op == UnaryOp.exp``, a constant to numba), and
# the backends look the codes up by name (``UNARY["exp"]``), so no number is matched by hand.
UnaryOp = IntEnum(
    "UnaryOp",
    [
        "neg",
        "exp",
        "log",
        "sqrt",
        "tanh",
        "sigmoid",
        "relu",
        "abs",
        "sin",
        "cos",
        "pow",
        "clamp",
        "sign",
        "square",
        "rsqrt",
        "log1p",
        "expm1",
        "reciprocal",
        "gelu",
        "gelu_tanh",
        "floor",
        "ceil",
        "round",
        "logical_not",
        "erf",
        "silu",
        "gelu_grad",
        "gelu_tanh_grad",
        "log10",
        "log2",
        "exp2",
    ],
    start=0,
)
BinaryOp = IntEnum(
    "BinaryOp",
    [
        "add",
        "sub",
        "mul",
        "div",
        "pow",
        "maximum",
        "minimum",
        "floordiv",
        "remainder",
        "atan2",
        "hypot",
        "logaddexp",
        "tanh_backward",
        "sigmoid_backward",
    ],
    start=0,
)
CompareOp = IntEnum(
    "CompareOp",
    [
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "logical_and",
        "logical_or",
        "logical_xor",
    ],
    start=0,
)
ReduceOp = IntEnum("ReduceOp", ["sum", "prod", "max", "min", "any", "all"], start=0)
UNARY = {op.name: op.value for op in UnaryOp}  # name -> code, as the kernels take it
BINARY = {op.name: op.value for op in BinaryOp}
COMPARE = {op.name: op.value for op in CompareOp}
REDUCE = {op.name: op.value for op in ReduceOp}

# What a scalar function returns for a code that has no branch. The codes come only from
# the tables above, and tests/test_ops.py checks that each has its branch (and its values
# against PyTorch), so this is never reached; it is NaN rather than some op's value.
NO_BRANCH = math.nan
NO_BRANCH_BOOL = False
_LN2 = math.log(2.0)
# The 1 of the gradients of tanh and sigmoid: a float32, so that float32 operands stay
# float32 (a Python 1 or 1.0 would make numba compute in float64); float64 ones promote it.
_ONE = np.float32(1.0)


def reduce_dtype(op, dtype, bool_, int64):
    """The result dtype of reduction ``op`` over ``dtype``, as torch: any/all give bool,
    sum/prod of bool or integers give int64, the rest keep the input's dtype."""
    if op in ("any", "all"):
        return bool_
    if dtype in (bool_, int64) and op in ("sum", "prod"):
        return int64
    return dtype


def check_reduce(op, n, shape) -> None:
    """max/min over an empty dimension has no value: torch's IndexError."""
    if n == 0 and op in ("max", "min"):
        raise IndexError(
            f"{op}(): cannot reduce over a dimension of size 0 (input shape {tuple(shape)})"
        )


def softmax_backward_row(y, g, o, n, log, out):
    """One row of softmax's backward (``log``: of log_softmax), starting at ``o``: the
    vector-Jacobian product ``y * (g - sum(g * y))`` (``g - exp(y) * sum(g)``)."""
    acc = 0.0
    if log:
        for j in range(n):
            acc += g[o + j]
        for j in range(n):
            out[o + j] = g[o + j] - math.exp(y[o + j]) * acc
    else:
        for j in range(n):
            acc += g[o + j] * y[o + j]
        for j in range(n):
            out[o + j] = y[o + j] * (g[o + j] - acc)


# --8<-- [end:opcodes]


# --8<-- [start:unary]
def unary(op, x, p0, p1):
    """The scalar function behind op code ``op``; ``p0``/``p1`` are parameters."""
    if op == UnaryOp.neg:
        return -x
    elif op == UnaryOp.exp:
        return math.exp(x)
    elif op == UnaryOp.log:
        return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)
    elif op == UnaryOp.sqrt:
        return math.sqrt(x) if x >= 0 else math.nan
    elif op == UnaryOp.tanh:
        return math.tanh(x)
    elif op == UnaryOp.sigmoid:  # written so that exp never overflows
        if x >= 0:
            return 1.0 / (1.0 + math.exp(-x))
        e = math.exp(x)
        return e / (1.0 + e)
    elif op == UnaryOp.relu:  # as PyTorch: NaN and -0.0 stay
        return 0.0 if x < 0 else x
    elif op == UnaryOp.abs:
        return abs(x)
    elif op == UnaryOp.sin:
        return math.sin(x)
    elif op == UnaryOp.cos:
        return math.cos(x)
    elif op == UnaryOp.pow:  # small whole powers as products, as torch computes them:
        if p0 == 2.0:  # x**2 and x**3 through libm's pow cost tens of ns an entry
            return x * x
        if p0 == 3.0:
            return x * x * x
        if p0 == 1.0:  # (the backward of x**2)
            return x
        return x**p0
    elif op == UnaryOp.clamp:  # clamp(min=p0, max=p1); NaN bounds mean "no bound"
        y = x
        if p0 == p0 and y < p0:
            y = p0
        if p1 == p1 and y > p1:
            y = p1
        return y
    elif op == UnaryOp.sign:  # ints, not bools: the simulator's numpy refuses bool - bool
        return int(x > 0) - int(x < 0)
    elif op == UnaryOp.square:
        return x * x
    elif op == UnaryOp.rsqrt:
        return 1.0 / math.sqrt(x) if x > 0 else (math.copysign(math.inf, x) if x == 0 else math.nan)
    elif op == UnaryOp.log1p:
        return math.log1p(x) if x > -1 else (-math.inf if x == -1 else math.nan)
    elif op == UnaryOp.expm1:
        return math.expm1(x)
    elif op == UnaryOp.reciprocal:
        return 1.0 / x if x != 0 else math.copysign(math.inf, x)
    elif op == UnaryOp.gelu:  # exact GELU: x * Phi(x)
        return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))
    elif op == UnaryOp.gelu_tanh:  # tanh approximation of GELU
        return 0.5 * x * (1.0 + math.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    # From 2**52 on, every float is an integer: floor, ceil and round return it as it is
    # (so do they inf and NaN), where math.floor's int64 result would overflow.
    elif op == UnaryOp.floor:
        return math.floor(x) if abs(x) < 4503599627370496.0 else x
    elif op == UnaryOp.ceil:
        return math.ceil(x) if abs(x) < 4503599627370496.0 else x
    elif op == UnaryOp.round:  # round half to even, as PyTorch and NumPy
        if not abs(x) < 4503599627370496.0:
            return x
        r = math.floor(x + 0.5)
        if r - x == 0.5 and r % 2 != 0:
            r -= 1
        return r
    elif op == UnaryOp.logical_not:
        return x == 0
    elif op == UnaryOp.erf:
        return math.erf(x)
    elif op == UnaryOp.silu:  # as sigmoid, exp never overflows
        if x >= 0:
            return x / (1.0 + math.exp(-x))
        e = math.exp(x)
        return x * e / (1.0 + e)
    elif op == UnaryOp.gelu_grad:  # d gelu / dx = Phi(x) + x phi(x)
        return (
            0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))
            + x * math.exp(-0.5 * x * x) * 0.3989422804014327
        )
    elif op == UnaryOp.gelu_tanh_grad:  # d gelu_tanh / dx
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        t = math.tanh(u)
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (
            1.0 + 0.134145 * x * x
        )
    elif op == UnaryOp.log10:
        return math.log10(x) if x > 0 else (-math.inf if x == 0 else math.nan)
    elif op == UnaryOp.log2:
        return math.log2(x) if x > 0 else (-math.inf if x == 0 else math.nan)
    elif op == UnaryOp.exp2:
        return math.pow(2.0, x)
    return NO_BRANCH


# --8<-- [end:unary]


# --8<-- [start:binary]
def binary(op, x, y):
    """The scalar function behind binary op code ``op``."""
    if op == BinaryOp.add:
        return x + y
    elif op == BinaryOp.sub:
        return x - y
    elif op == BinaryOp.mul:
        return x * y
    elif op == BinaryOp.div:
        return (
            x / y
            if y != 0
            else (
                math.copysign(math.inf, x) * math.copysign(1.0, y)
                if x != 0 and x == x
                else math.nan
            )
        )
    elif op == BinaryOp.pow:
        return x**y
    elif op == BinaryOp.maximum:  # maximum propagates NaN, like PyTorch
        return x if (x > y or x != x) else y
    elif op == BinaryOp.minimum:
        return x if (x < y or x != x) else y
    elif op == BinaryOp.floordiv:  # as Python's and torch's; by 0 as div (floats only:
        if y != 0:  # the methods refuse an integer division by zero)
            return x // y
        return math.copysign(math.inf, x) * math.copysign(1.0, y) if x != 0 and x == x else math.nan
    elif op == BinaryOp.remainder:  # as Python's and torch's: the sign of the divisor
        return x % y if y != 0 else math.nan
    elif op == BinaryOp.atan2:
        return math.atan2(x, y)
    elif op == BinaryOp.hypot:
        return math.hypot(x, y)
    elif op == BinaryOp.logaddexp:  # log(e^x + e^y), without overflow
        if x == y:  # also x = y = -inf or +inf, where x - y is NaN
            return x + _LN2
        m = x if x > y else y  # y when either is NaN; then so is the result
        return m + math.log1p(math.exp(-abs(x - y)))
    elif op == BinaryOp.tanh_backward:  # x = tanh's output, y = the incoming gradient
        return y * (_ONE - x * x)
    elif op == BinaryOp.sigmoid_backward:  # x = sigmoid's output, y = the incoming gradient
        return y * x * (_ONE - x)
    return NO_BRANCH


def compare(op, x, y):
    """The boolean function behind comparison op code ``op``."""
    if op == CompareOp.eq:
        return x == y
    elif op == CompareOp.ne:
        return x != y
    elif op == CompareOp.lt:
        return x < y
    elif op == CompareOp.le:
        return x <= y
    elif op == CompareOp.gt:
        return x > y
    elif op == CompareOp.ge:
        return x >= y
    elif op == CompareOp.logical_and:
        return (x != 0) and (y != 0)
    elif op == CompareOp.logical_or:
        return (x != 0) or (y != 0)
    elif op == CompareOp.logical_xor:
        return (x != 0) != (y != 0)
    return NO_BRANCH_BOOL


# --8<-- [end:binary]
