"""float32 ``exp``, ``erf`` and ``tanh`` that LLVM can vectorise.

numba turns ``math.exp(x)`` into a call to the C library's ``expf``, one value
at a time: a loop that contains a call cannot be vectorised (without a vector
math library, which numba's LLVM does not ship). The functions here use only
``+ - * /``, comparisons that become selects, and integer bit tricks, so a loop
over an array of float32 computes 8 values per AVX2 instruction.

Each one is the textbook recipe: reduce the argument to a small interval,
approximate there with a polynomial (or a ratio of two), and undo the
reduction. The coefficients are our own fits, made and checked by
``scripts/fit_vecmath.py`` (Lawson's iteratively reweighted least squares, a
near-minimax fit of the relative error); the errors quoted below are what
``tests/test_vecmath.py`` measures against float64 references.

All constants of the float32 functions are ``np.float32``: a Python float literal
would be float64 and promote the whole computation (and half the vector width) with it.

``tanh_f32`` and ``exp_f32_rounded``, the eager ``tanh`` and ``exp`` of float32 tensors,
work in float64 on purpose: computed with an error far below half a float32 ulp and
rounded once, they give the correctly rounded value (``tests/test_vecmath.py`` checks
dense grids), the same on every CPU. Their polynomial is Taylor's, which needs no fit.
``exp_f32`` and ``erf_f32`` serve the fused kernels, where a float32 result within an ulp
or so is what is asked.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

# Only "contract" (a * b + c may become one fused multiply-add): no "nnan" or
# "ninf", which would let LLVM delete the selects that give NaN and inf their
# right answers, and no "reassoc", which would let it regroup the Cody-Waite
# subtraction that is only exact in the order written.
FASTMATH = {"contract"}

_F = np.float32


# --8<-- [start:pow2]
@intrinsic
def _pow2(typingctx, n):
    """2**n as a float32, for a float32 ``n`` holding an integer in [-126, 127].

    A normal float32 is sign (1 bit), biased exponent (8 bits, bias 127) and
    mantissa (23 bits); 2**n has mantissa 0 and exponent n + 127. So: convert n
    to a 32-bit integer, add the bias, shift it into place and reinterpret the
    bits as a float (an LLVM ``bitcast``, which costs nothing).
    """
    if n != types.float32:
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        k = builder.fptosi(args[0], i32)
        bits = builder.shl(builder.add(k, i32(127)), i32(23))
        return builder.bitcast(bits, ir.FloatType())

    return types.float32(types.float32), codegen


# --8<-- [end:pow2]


# Coefficients: output of scripts/fit_vecmath.py (do not edit by hand; rerun it).
LN2_HI = _F(0.693145751953125)  # ln 2 to 16 bits: n * LN2_HI is exact for |n| < 256
LN2_LO = _F(1.428606765330187e-06)  # ln 2 - LN2_HI
# e^r ~ 1 + r + r^2 (C2 + C3 r + ... + C6 r^4) on |r| <= ln2 / 2
EXP_C2, EXP_C3, EXP_C4, EXP_C5, EXP_C6 = (
    _F(0.4999999403953552),
    _F(0.1666652113199234),
    _F(0.04166838899254799),
    _F(0.008368710055947304),
    _F(0.001381461275741458),
)
# erf(x) ~ x P(x^2) / Q(x^2) on |x| <= 4
ERF_P0, ERF_P1, ERF_P2, ERF_P3, ERF_P4, ERF_P5, ERF_P6 = (
    _F(1.1283791065216064),
    _F(0.20712603628635406),
    _F(0.05152498558163643),
    _F(0.003990610130131245),
    _F(0.000147287777508609),
    _F(-1.942326889547985e-06),
    _F(1.911103275631376e-08),
)
ERF_Q1, ERF_Q2, ERF_Q3, ERF_Q4 = (
    _F(0.5168918967247009),
    _F(0.11797107011079788),
    _F(0.014958139508962631),
    _F(0.0010211231419816613),
)

LOG2E = _F(1.4426950408889634)
EXP_LO = _F(-104.0)  # e^-104 is below half the smallest subnormal: rounds to 0
EXP_HI = _F(89.0)  # e^89 > the largest float32: overflows to inf
ERF_CLAMP = _F(4.0)  # 1 - erf(4) = 1.5e-8 < half an ulp of 1: erf is 1.0 from here on
ZERO, HALF, ONE = _F(0.0), _F(0.5), _F(1.0)


# --8<-- [start:exp_f32]
@njit(cache=True, inline="always", fastmath=FASTMATH, error_model="numpy")
def exp_f32(x):
    """e**x in float32 arithmetic, vectorisable.

    Reduction: x = n ln2 + r with n = round(x / ln2), so |r| <= ln2 / 2 and
    e**x = 2**n e**r. ln 2 is split in two (Cody and Waite) so that x - n ln2
    loses nothing to rounding. The scale 2**n is applied as two factors
    2**h 2**(n - h), h = floor(n / 2), each a normal float: that covers the
    whole float32 range, subnormal results included.

    Edges: the result is 0 for x <= -104 and inf above 89, as for the exact
    function; NaN gives NaN. Below -104 the polynomial runs on x = 0 and the 0 is
    selected afterwards: scaling down to a subnormal there would cost a microcode
    assist (on Intel CPUs, over a hundred cycles) for every masked key of a causal
    softmax, whose -inf scores all land here. Error: about 1 ulp relative for
    normal results (``tests/test_vecmath.py`` states the bound it checks).
    """
    live = x > EXP_LO  # False for NaN, -inf and tiny x
    xc = x if live else ZERO  # (NaN -> 0: fptosi stays defined)
    xc = xc if xc < EXP_HI else EXP_HI
    n = np.floor(xc * LOG2E + HALF)  # nearest integer to x / ln2
    r = (xc - n * LN2_HI) - n * LN2_LO  # exact, then the tiny correction
    p = ONE + r + r * r * (EXP_C2 + r * (EXP_C3 + r * (EXP_C4 + r * (EXP_C5 + r * EXP_C6))))
    h = np.floor(n * HALF)
    y = (p * _pow2(h)) * _pow2(n - h)
    y = y if live else ZERO
    return y if x == x else x  # NaN in, NaN out


# --8<-- [end:exp_f32]


# --8<-- [start:erf_f32]
@njit(cache=True, inline="always", fastmath=FASTMATH, error_model="numpy")
def erf_f32(x):
    """erf(x) in float32 arithmetic, vectorisable: x P(x^2) / Q(x^2) on |x| <= 4.

    erf is odd, so a ratio of x times even polynomials keeps the symmetry
    exactly. Beyond |x| = 4 erf rounds to +-1 in float32, so x is clamped
    there, and the result to [-1, 1] (so that 1 + erf(x) is never negative).
    The clamps are written ``c if x > c else x``: NaN fails every comparison,
    so it passes through unchanged.
    """
    xc = ERF_CLAMP if x > ERF_CLAMP else x
    xc = -ERF_CLAMP if xc < -ERF_CLAMP else xc
    t = xc * xc
    p = ERF_P0 + t * (
        ERF_P1 + t * (ERF_P2 + t * (ERF_P3 + t * (ERF_P4 + t * (ERF_P5 + t * ERF_P6))))
    )
    q = ONE + t * (ERF_Q1 + t * (ERF_Q2 + t * (ERF_Q3 + t * ERF_Q4)))
    y = xc * p / q
    y = ONE if y > ONE else y
    return -ONE if y < -ONE else y


# --8<-- [end:erf_f32]


# float32 tanh, rounded from float64 arithmetic. The C library's tanhf takes about 15 ns
# a value on the book's machines (glibc 2.36) and cannot be vectorised; older and newer
# C libraries also round differently (glibc 2.41 made tanhf correctly rounded), so the
# last bit of a float32 tanh depended on the reader's Linux. Here the function is
# computed in float64 from e**(2|x|) - 1 and rounded once to float32: an error of
# about 2**-50 before the rounding, far below half a float32 ulp (2**-25), so the result
# is the correctly rounded tanh except for the rare x whose tanh lies within 2**-50 of a
# rounding boundary. No fastmath flag: without fused multiply-adds the float64 steps are
# the same on every CPU, and so is every bit of the result.
_D = np.float64
LN2_HI_D = _D(6.93147180369123816490e-01)  # ln 2 to 32 bits: n * LN2_HI_D is exact
LN2_LO_D = _D(1.90821492927058770002e-10)  # ln 2 - LN2_HI_D
LOG2E_D = _D(1.4426950408889634)
# e^r - 1 = r + r^2 (1/2! + r/3! + ... + r^11/13!) on |r| <= ln2 / 2: the Taylor
# coefficients (no fit needed: the first term left out, r^14/14!, is below 5e-18)
EXPM1_C = tuple(_D(1.0 / np.prod(np.arange(1, k + 1, dtype=np.float64))) for k in range(2, 14))
EXP_CLAMP_D = _D(200.0)  # e**200 overflows float32 (and e**-200 rounds to 0), not float64
TANH_CLAMP_D = _D(10.0)  # 1 - tanh(10) = 4e-9 < half an ulp of 1.0: tanh is 1.0 from here on


@intrinsic
def _pow2_f64(typingctx, n):
    """2**n as a float64, for a float64 ``n`` holding an integer in [-1022, 1023]: the
    float64 form of ``_pow2`` (exponent bias 1023, 52 mantissa bits)."""
    if n != types.float64:
        return None

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        k = builder.fptosi(args[0], i64)
        bits = builder.shl(builder.add(k, i64(1023)), i64(52))
        return builder.bitcast(bits, ir.DoubleType())

    return types.float64(types.float64), codegen


# --8<-- [start:tanh_f32]
@njit(cache=True, inline="always", error_model="numpy")
def _exp_parts(y):
    """(2**n, e**r - 1) for a float64 ``y`` = n ln2 + r, |r| <= ln2 / 2 (Cody and Waite,
    as in :func:`exp_f32`): e**y = 2**n + 2**n (e**r - 1), and e**y - 1 =
    2**n (e**r - 1) + (2**n - 1) without cancellation, for e**r - 1 is a polynomial
    that starts at r and 2**n - 1 is exact."""
    n = np.floor(y * LOG2E_D + _D(0.5))
    r = (y - n * LN2_HI_D) - n * LN2_LO_D
    c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13 = EXPM1_C
    q = c12 + r * c13
    q = c11 + r * q
    q = c10 + r * q
    q = c9 + r * q
    q = c8 + r * q
    q = c7 + r * q
    q = c6 + r * q
    q = c5 + r * q
    q = c4 + r * q
    q = c3 + r * q
    q = c2 + r * q
    return _pow2_f64(n), r + r * r * q


@njit(cache=True, inline="always", error_model="numpy")
def tanh_f32(x):
    """tanh of a float32 ``x``, computed in float64 and rounded once: vectorisable.

    With m = e**(2a) - 1 for a = |x|, tanh a = m / (m + 2). The sign is copied back,
    so -0.0 stays -0.0.
    """
    a = abs(_D(x))
    live = a == a  # False for NaN
    a = a if live else _D(0.0)
    a = TANH_CLAMP_D if a > TANH_CLAMP_D else a
    s, em1_r = _exp_parts(a + a)
    m = s * em1_r + (s - _D(1.0))
    t = np.float32(m / (m + _D(2.0)))
    t = np.float32(math.copysign(t, x))
    return t if live else x  # NaN in, NaN out


# --8<-- [end:tanh_f32]


@njit(cache=True, inline="always", error_model="numpy")
def exp_f32_rounded(x):
    """e**x of a float32 ``x``, computed in float64 and rounded once, as :func:`tanh_f32`
    (:func:`exp_f32` is the float32-arithmetic one of the fused kernels). Beyond
    |x| = 200 the float32 result is 0 or inf already; NaN gives NaN."""
    live = x == x
    y = _D(x) if live else _D(0.0)
    y = EXP_CLAMP_D if y > EXP_CLAMP_D else y
    y = -EXP_CLAMP_D if y < -EXP_CLAMP_D else y
    s, em1_r = _exp_parts(y)
    e = np.float32(s + s * em1_r)
    return e if live else x
