"""GELU as two fused, vectorising kernels: y = gelu(x), and dx = g * gelu'(x).

The generic path (``x._unary("gelu")``) computes each value in float64 with the
C library's ``erf``, one call per value, and its backward is two ops: the
derivative, then a multiply by the upstream gradient, each writing a full
array. In a GPT's MLP, GELU sees four times the width of the residual stream,
so those calls add up (about a fifth of a training step at width 64).

Here each direction is one pass over contiguous memory. For float32 the
element functions use :mod:`sitp.kernels.cpu.vecmath` (``erf_f32``, ``exp_f32``) in
float32 arithmetic, which LLVM turns into AVX2 code, 8 values at a time;
float64 keeps ``math.erf`` / ``math.exp`` / ``math.tanh``, the same formulas
as the generic op codes.

The formulas, with Phi the normal CDF and phi its density:

* exact:  gelu(x) = x Phi(x) = x (1 + erf(x / sqrt 2)) / 2,
  gelu'(x) = Phi(x) + x phi(x);
* tanh:   gelu(x) = x (1 + tanh u) / 2 with u = sqrt(2/pi) (x + 0.044715 x^3).
  In float32 we use (1 + tanh u) / 2 = 1 / (1 + e^(-2u)) =: s, a sigmoid, so
  one ``exp_f32`` serves (no tanh needed, and no cancellation in 1 + tanh u
  for negative u); then gelu'(x) = s + 2 x s (1 - s) u'(x).

Edge values are PyTorch's: gelu(NaN) = NaN, gelu(+inf) = +inf, and, as in
PyTorch (whose formula gives -inf * 0), gelu(-inf) = NaN; the derivative at
+-inf is NaN for the same reason.

The autograd node that calls these kernels is ``sitp.nn._functions.gelu.GELU``
(chapter 4.2).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic

from sitp.kernels.cpu.vecmath import FASTMATH, erf_f32, exp_f32

_F = np.float32
HALF, ONE, TWO = _F(0.5), _F(1.0), _F(2.0)
SQRT1_2 = _F(1 / math.sqrt(2.0))  # 1 / sqrt 2
INV_SQRT_2PI = _F(1 / math.sqrt(2 * math.pi))  # phi(0)
K = _F(math.sqrt(2 / math.pi))  # the tanh approximation's constants
A = _F(0.044715)
A3 = _F(3 * 0.044715)
X2_MAX = _F(1e4)  # x^2 clamp in gelu_tanh': keeps the polynomial finite where s (1 - s) is 0


@intrinsic
def _is_float32(typingctx, ary):
    """Whether ``ary`` holds float32, as a compile-time constant.

    The kernels below serve both dtypes; numba compiles one version per dtype,
    and with a constant condition LLVM deletes the branch that version never
    takes (as ``tile_nr`` in ``sitp/kernels/cpu/blas/packed.py`` fixes a loop's length).
    """
    value = ary.dtype == types.float32

    def codegen(context, builder, signature, args):
        return context.get_constant(types.boolean, value)

    return types.boolean(ary), codegen


# ----------------------------------------------------------- float32 elements
@njit(cache=True, inline="always", fastmath=FASTMATH, error_model="numpy")
def gelu_f32(v):
    return HALF * v * (ONE + erf_f32(v * SQRT1_2))


@njit(cache=True, inline="always", fastmath=FASTMATH, error_model="numpy")
def gelu_grad_f32(v):
    """Phi(v) + v phi(v). For |v| > 1.9e19, v * v is inf, exp gives 0, and v * 0 = 0."""
    return HALF * (ONE + erf_f32(v * SQRT1_2)) + v * (INV_SQRT_2PI * exp_f32(-HALF * v * v))


@njit(cache=True, inline="always", fastmath=FASTMATH, error_model="numpy")
def _exp_m2u(v):
    """e^(-2u), u = K (v + A v^3): the sigmoid form's one exp (inf for u << 0, 0 for u >> 0)."""
    return exp_f32(-TWO * K * (v + A * v * v * v))


@njit(cache=True, inline="always", fastmath=FASTMATH, error_model="numpy")
def gelu_tanh_f32(v):
    """v s with s = (1 + tanh u) / 2 = 1 / (1 + e^(-2u))."""
    return v / (ONE + _exp_m2u(v))


@njit(cache=True, inline="always", fastmath=FASTMATH, error_model="numpy")
def gelu_tanh_grad_f32(v):
    """s + 2 v s (1 - s) K (1 + 3 A v^2).

    1 - s is computed as e s (e = e^(-2u)), not as 1 - s, which is 0 in float32
    as soon as s rounds to 1 (v > 4 or so) though the term still counts; where
    e is inf, s = 0 and 1 - s = 1 is exact. v^2 is clamped so the polynomial
    stays finite where s (1 - s) is 0 (else 0 * inf = NaN for |v| > 1.8e19).
    """
    e = _exp_m2u(v)
    s = ONE / (ONE + e)
    c = e * s if s > HALF else ONE - s  # 1 - s, accurately on both sides
    v2 = v * v
    v2 = X2_MAX if v2 > X2_MAX else v2
    return s + TWO * v * s * c * K * (ONE + A3 * v2)


# ----------------------------------------------------------- float64 elements
@njit(cache=True, inline="always", error_model="numpy")
def gelu_f64(v):
    return 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))


@njit(cache=True, inline="always", error_model="numpy")
def gelu_grad_f64(v):
    return (
        0.5 * (1.0 + math.erf(v / math.sqrt(2.0))) + v * math.exp(-0.5 * v * v) * 0.3989422804014327
    )


@njit(cache=True, inline="always", error_model="numpy")
def gelu_tanh_f64(v):
    return 0.5 * v * (1.0 + math.tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))


@njit(cache=True, inline="always", error_model="numpy")
def gelu_tanh_grad_f64(v):
    t = math.tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))
    return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * v * v)


# ------------------------------------------------------------------ kernels
# --8<-- [start:gelu_kernel]
@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def gelu_kernel(x, out, approximate):
    """out[i] = gelu(x[i]) over 1-D contiguous arrays; ``approximate``: the tanh form.

    One loop per (dtype, form), with nothing in it but arithmetic: for float32,
    LLVM vectorises it. ``np.float32(x[i])`` is a no-op on float32 arrays; it
    keeps the float32 branch well-typed in the float64 version, which drops it.
    """
    n = x.size
    if _is_float32(x):
        if approximate:
            for i in range(n):
                out[i] = gelu_tanh_f32(np.float32(x[i]))
        else:
            for i in range(n):
                out[i] = gelu_f32(np.float32(x[i]))
    else:
        if approximate:
            for i in range(n):
                out[i] = gelu_tanh_f64(x[i])
        else:
            for i in range(n):
                out[i] = gelu_f64(x[i])


# --8<-- [end:gelu_kernel]


# --8<-- [start:gelu_backward_kernel]
@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def gelu_backward_kernel(x, g, dx, approximate):
    """dx[i] = g[i] * gelu'(x[i]): the derivative and the chain rule's product in one pass."""
    n = x.size
    if _is_float32(x):
        if approximate:
            for i in range(n):
                dx[i] = g[i] * gelu_tanh_grad_f32(np.float32(x[i]))
        else:
            for i in range(n):
                dx[i] = g[i] * gelu_grad_f32(np.float32(x[i]))
    else:
        if approximate:
            for i in range(n):
                dx[i] = g[i] * gelu_tanh_grad_f64(x[i])
        else:
            for i in range(n):
                dx[i] = g[i] * gelu_grad_f64(x[i])


# --8<-- [end:gelu_backward_kernel]


# Arrays at least this long (about 30 us of GELU on one core) are split among
# numba's threads; below it, starting the threads would cost more than it saves.
PARALLEL_MIN = 1 << 17


@njit(cache=True, parallel=True)
def gelu_parallel(x, out, approximate, n_chunks):
    """gelu_kernel on n_chunks contiguous pieces at once, one per thread."""
    n = x.size
    for c in prange(n_chunks):
        lo, hi = c * n // n_chunks, (c + 1) * n // n_chunks
        gelu_kernel(x[lo:hi], out[lo:hi], approximate)


@njit(cache=True, parallel=True)
def gelu_backward_parallel(x, g, dx, approximate, n_chunks):
    """gelu_backward_kernel on n_chunks contiguous pieces at once, one per thread."""
    n = x.size
    for c in prange(n_chunks):
        lo, hi = c * n // n_chunks, (c + 1) * n // n_chunks
        gelu_backward_kernel(x[lo:hi], g[lo:hi], dx[lo:hi], approximate)


def _threads_for(n):
    """How many threads an elementwise pass over n values should use."""
    return numba.get_num_threads() if n >= PARALLEL_MIN else 1


def gelu_forward(x, out, approximate):
    """out = gelu(x) over flat contiguous arrays, on numba's threads when x is long."""
    threads = _threads_for(x.size)
    if threads > 1:
        gelu_parallel(x, out, approximate, threads)
    else:
        gelu_kernel(x, out, approximate)


def gelu_backward(x, g, dx, approximate):
    """dx = g * gelu'(x) over flat contiguous arrays, on numba's threads when x is long."""
    threads = _threads_for(x.size)
    if threads > 1:
        gelu_backward_parallel(x, g, dx, approximate, threads)
    else:
        gelu_backward_kernel(x, g, dx, approximate)
