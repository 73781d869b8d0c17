"""The scalar functions of the elementwise ops, shared by both backends (chapters 2.2, 4.3).

An elementwise kernel applies one of these to each entry, chosen by an integer *op code*:
``unary(op, x, p0, p1)``, ``binary(op, x, y)`` and ``compare(op, x, y)`` are plain Python
with an ``if``/``elif`` chain, so that the CPU backend compiles them with
``numba.njit(inline="always")`` (``sitp/backends/cpu/kernels.py``) and the CUDA backend with
``numba.cuda.jit(device=True)`` (``sitp/backends/cuda/ops.py``): one definition, two
targets. The dicts map an op's name to its code; the tensor layer names ops, the kernels
see codes.

This module imports no numba. numba's own cache would not notice an edit here (a cached
kernel inlines these functions from another file), but sitp keys its numba cache on a
hash of every file of ``sitp/backends`` (``sitp._target.kernel_sources_hash``), so an
edit compiles the kernels again.
"""

from __future__ import annotations

import math

# Op codes: the backends look them up by name in these dicts.
# --8<-- [start:opcodes]
UNARY = {
    name: i
    for i, name in enumerate(
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
        ]
    )
}
BINARY = {
    name: i
    for i, name in enumerate(
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
        ]
    )
}
COMPARE = {
    name: i
    for i, name in enumerate(
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
        ]
    )
}
REDUCE = {name: i for i, name in enumerate(["sum", "prod", "max", "min", "any", "all"])}


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
    if op == 0:
        return -x
    elif op == 1:
        return math.exp(x)
    elif op == 2:
        return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)
    elif op == 3:
        return math.sqrt(x) if x >= 0 else math.nan
    elif op == 4:
        return math.tanh(x)
    elif op == 5:  # sigmoid, written so that exp never overflows
        if x >= 0:
            return 1.0 / (1.0 + math.exp(-x))
        e = math.exp(x)
        return e / (1.0 + e)
    elif op == 6:
        return x if x > 0 else x * 0
    elif op == 7:
        return abs(x)
    elif op == 8:
        return math.sin(x)
    elif op == 9:
        return math.cos(x)
    elif op == 10:
        return x**p0
    elif op == 11:  # clamp(min=p0, max=p1); NaN bounds mean "no bound"
        y = x
        if p0 == p0 and y < p0:
            y = p0
        if p1 == p1 and y > p1:
            y = p1
        return y
    elif op == 12:
        return (x > 0) - (x < 0)
    elif op == 13:
        return x * x
    elif op == 14:
        return 1.0 / math.sqrt(x) if x >= 0 else math.nan
    elif op == 15:
        return math.log1p(x) if x > -1 else (-math.inf if x == -1 else math.nan)
    elif op == 16:
        return math.expm1(x)
    elif op == 17:
        return 1.0 / x if x != 0 else math.copysign(math.inf, x)
    elif op == 18:  # exact GELU: x * Phi(x)
        return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))
    elif op == 19:  # tanh approximation of GELU
        return 0.5 * x * (1.0 + math.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    elif op == 20:
        return math.floor(x)
    elif op == 21:
        return math.ceil(x)
    elif op == 22:  # round half to even, as PyTorch and NumPy
        r = math.floor(x + 0.5)
        if r - x == 0.5 and r % 2 != 0:
            r -= 1
        return r
    elif op == 23:
        return x == 0
    elif op == 24:
        return math.erf(x)
    elif op == 25:  # silu
        if x >= 0:
            return x / (1.0 + math.exp(-x))
        e = math.exp(x)
        return x * e / (1.0 + e)
    elif op == 26:  # d gelu / dx = Phi(x) + x phi(x)
        return (
            0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))
            + x * math.exp(-0.5 * x * x) * 0.3989422804014327
        )
    elif op == 27:  # d gelu_tanh / dx
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        t = math.tanh(u)
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (
            1.0 + 0.134145 * x * x
        )
    elif op == 28:
        return math.log10(x) if x > 0 else (-math.inf if x == 0 else math.nan)
    elif op == 29:
        return math.log2(x) if x > 0 else (-math.inf if x == 0 else math.nan)
    else:  # 30: exp2
        return math.pow(2.0, x)


# --8<-- [end:unary]


# --8<-- [start:binary]
def binary(op, x, y):
    """The scalar function behind binary op code ``op``."""
    if op == 0:
        return x + y
    elif op == 1:
        return x - y
    elif op == 2:
        return x * y
    elif op == 3:
        return (
            x / y
            if y != 0
            else (
                math.copysign(math.inf, x) * math.copysign(1.0, y)
                if x != 0 and x == x
                else math.nan
            )
        )
    elif op == 4:
        return x**y
    elif op == 5:  # maximum propagates NaN, like PyTorch
        return x if (x > y or x != x) else y
    elif op == 6:
        return x if (x < y or x != x) else y
    elif op == 7:
        return x // y
    elif op == 8:  # Python-style remainder: the sign of the divisor
        return x - (x // y) * y
    else:
        return math.atan2(x, y)


def compare(op, x, y):
    """The boolean function behind comparison op code ``op``."""
    if op == 0:
        return x == y
    elif op == 1:
        return x != y
    elif op == 2:
        return x < y
    elif op == 3:
        return x <= y
    elif op == 4:
        return x > y
    elif op == 5:
        return x >= y
    elif op == 6:
        return (x != 0) and (y != 0)
    elif op == 7:
        return (x != 0) or (y != 0)
    else:
        return (x != 0) != (y != 0)


# --8<-- [end:binary]
