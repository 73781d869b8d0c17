"""Fit the coefficients of ``sitp/kernels/cpu/vecmath.py`` (float32 exp and erf) with numpy.

Usage::

    python scripts/fit_vecmath.py

Prints the constants to paste into ``src/sitp/kernels/cpu/vecmath.py`` and the largest
relative error each approximation makes, measured in float32 arithmetic (the
coefficients rounded to float32, Horner's rule evaluated in float32) against
float64 references on dense grids.

Method. A minimax (equal-ripple) fit is what we want: the smallest *largest*
relative error. We get close to it by Lawson's algorithm, iteratively
reweighted least squares: solve a weighted least-squares fit, then multiply
each grid point's weight by its current error, so the points where the fit is
worst pull harder next time. For the rational erf fit, the least-squares step
is linearized (Sanathanan-Koerner): P(t) - f(t) Q(t) = 0 is linear in the
coefficients, and dividing by the previous Q makes it approximate the true
error (P/Q - f).
"""

from __future__ import annotations

import math

import numpy as np

LN2 = math.log(2.0)


def lawson(A, b, scale, iters=100):
    """Coefficients c minimizing max |(A c - b) / scale| approximately (Lawson's IRLS)."""
    w = np.ones(len(b)) / len(b)
    best, best_err = None, np.inf
    for _ in range(iters):
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(A * (sw / scale)[:, None], b * sw / scale, rcond=None)
        e = np.abs(A @ c - b) / scale
        if e.max() < best_err:
            best, best_err = c, e.max()
        w = np.maximum(w * e, 1e-300)
        w /= w.sum()
    return best


def horner32(coefs, x):
    """sum coefs[k] x**k, in float32 (coefficients rounded to float32 first)."""
    x = np.float32(x)
    acc = np.full_like(x, np.float32(coefs[-1]))
    for c in coefs[-2::-1]:
        acc = (acc * x + np.float32(c)).astype(np.float32)
    return acc


# ---------------------------------------------------------------- exp
def split_ln2():
    """ln 2 = HI + LO with HI's low bits zero, so n * HI is exact for |n| < 256."""
    hi = np.float32(math.floor(LN2 * 2.0**16) / 2.0**16)  # 16 significant bits at most
    lo = np.float32(LN2 - float(hi))
    return hi, lo


def fit_exp(degree=6):
    """e^r = 1 + r + r^2 (c2 + c3 r + ... ) on |r| <= ln2 / 2, relative error."""
    r = LN2 / 2 * np.sin(np.linspace(-np.pi / 2, np.pi / 2, 4001))
    f = np.exp(r)
    A = np.stack([r**k for k in range(2, degree + 1)], axis=1)
    c = lawson(A, f - 1 - r, f)
    return [1.0, 1.0] + list(c)


def check_exp(coefs):
    """Max relative error of the float32 evaluation, on the reduced interval."""
    r = np.linspace(-LN2 / 2, LN2 / 2, 200001).astype(np.float32)
    p = horner32(coefs, r)
    exact = np.exp(r.astype(np.float64))
    return np.max(np.abs(p - exact) / exact)


# ---------------------------------------------------------------- erf
def fit_erf(np_, nq, xmax=4.0, iters=12):
    """erf(x) / x = P(t) / Q(t) in t = x^2 on 0 <= x <= xmax, Q(0) = 1, relative error.

    Returns (p, q) coefficient lists, lowest degree first (q[0] == 1). The fit
    runs in s = t / xmax^2 (in [0, 1], so the columns t^k stay well scaled);
    the coefficients are rescaled to powers of t at the end.
    """
    x = xmax * np.sin(np.linspace(0.0, np.pi / 2, 4001))  # denser near both ends
    t = (x / xmax) ** 2
    erf = np.vectorize(math.erf)
    f = np.where(x > 0, erf(x) / np.where(x > 0, x, 1.0), 2 / math.sqrt(math.pi))
    # unknowns: p_0..p_np, q_1..q_nq ; equation P(t) - f q_k t^k = f
    A = np.concatenate(
        [
            np.stack([t**k for k in range(np_ + 1)], axis=1),
            np.stack([-f * t**k for k in range(1, nq + 1)], axis=1),
        ],
        axis=1,
    )
    qprev = np.ones_like(t)
    best, best_err = None, np.inf
    for _ in range(iters):
        c = lawson(A, f, f * qprev, iters=200)
        p, q = c[: np_ + 1], np.concatenate([[1.0], c[np_ + 1 :]])
        qv = np.polyval(q[::-1], t)
        err = np.max(np.abs(np.polyval(p[::-1], t) / qv - f) / f)
        if err < best_err:
            best, best_err = (list(p), list(q)), err
        qprev = qv
    p, q = best
    return (
        [c / xmax ** (2 * k) for k, c in enumerate(p)],
        [c / xmax ** (2 * k) for k, c in enumerate(q)],
    )


def erf32(p, q, x):
    """The kernel's erf in float32: clamp |x| <= 4, x * P(x^2) / Q(x^2), clamp to [-1, 1]."""
    x = np.clip(np.float32(x), np.float32(-4), np.float32(4))
    t = (x * x).astype(np.float32)
    y = (x * horner32(p, t) / horner32(q, t)).astype(np.float32)
    return np.clip(y, np.float32(-1), np.float32(1))


def check_erf(p, q):
    """Max relative and absolute error of :func:`erf32` for 0 < x <= 6."""
    x = np.concatenate([np.geomspace(1e-30, 1e-3, 2001), np.linspace(1e-3, 6.0, 600001)])
    x32 = x.astype(np.float32)
    exact = np.vectorize(math.erf)(x32.astype(np.float64))
    y = erf32(p, q, x32).astype(np.float64)
    return np.max(np.abs(y - exact) / exact), np.max(np.abs(y - exact))


def fmt(name, values):
    body = ", ".join(f"{float(np.float32(v))!r}" for v in values)
    return f"{name} = ({body})"


def main():
    hi, lo = split_ln2()
    print("# exp: Cody-Waite split of ln 2")
    print(f"LN2_HI = {float(hi)!r}\nLN2_LO = {float(lo)!r}")
    for deg in (5, 6):
        c = fit_exp(deg)
        print(
            f"# exp: degree {deg}, max rel error (float32 Horner on |r| <= ln2/2): {check_exp(c):.3e}"
        )
    c = fit_exp(6)  # the one _vecmath.py uses
    print(fmt("EXP_C", c[2:]))
    print()
    for np_, nq in ((5, 4), (6, 4), (5, 5)):
        p, q = fit_erf(np_, nq)
        rel, ab = check_erf(p, q)
        print(
            f"# erf: P degree {np_}, Q degree {nq} in x^2: max rel error {rel:.3e}, abs {ab:.3e}"
            " (float32 Horner without FMA, 0 < x <= 6)"
        )
    p, q = fit_erf(6, 4)  # the one _vecmath.py uses
    print(fmt("ERF_P", p))
    print(fmt("ERF_Q", q[1:]))


if __name__ == "__main__":
    main()
