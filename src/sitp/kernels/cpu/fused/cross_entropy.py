"""Fused cross-entropy on the CPU: log-softmax, negative log-likelihood, label smoothing
and class weights in one pass over each row of logits (chapter 4.2).

Its gradient is ``softmax - target distribution``, scaled (chapter 1's formula, now a
kernel): :func:`cross_entropy_backward_kernel`, one more pass per row. Both kernels take
contiguous rows (flat arrays) and accumulate in float64, so float32 rows of any length
keep their small terms. The autograd node that calls them is
``sitp.nn._functions.cross_entropy.CrossEntropy``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


# --8<-- [start:cross_entropy_kernel]
@njit(cache=True, error_model="numpy")
def cross_entropy_kernel(z, n_rows, C, target, w, ignore_index, eps, loss, p, stats):
    """Per-row loss of logits ``z`` (rows of C) against class indices ``target``.

    With p = softmax(z), w the class weights (ones when none are given) and
    label smoothing eps, row r with target t loses

        (1 - eps) * w[t] * (-log p[t])  +  (eps / C) * sum_c w[c] * (-log p[c])

    and -log p[c] = log s - (z[c] - m), with m the row max and s = sum_c exp(z[c] - m)
    (not lse - z[c] with lse = m + log s: for |z| >~ 1e8, m + log s rounds to m). A row whose target
    is ``ignore_index`` loses 0 and weighs 0. Writes ``loss[r]`` and the row's
    probabilities into ``p`` (the backward needs them: saving them halves the
    number of exps, the expensive part); ``stats`` gets (sum of losses, sum of
    the rows' weights w[t]) for the reductions.
    Returns -1, or the first row whose target is out of [0, C).
    """
    w_all = 0.0
    for c in range(C):
        w_all += w[c]
    total = 0.0
    weight = 0.0
    for r in range(n_rows):
        o = r * C
        t = target[r]
        if t == ignore_index:
            loss[r] = 0.0
            continue
        if t < 0 or t >= C:
            return r
        m = z[o]  # pass 1: the row max, for a stable exp
        for c in range(1, C):  # (m keeps z's dtype: float32 rows use expf)
            v = z[o + c]
            if v > m or v != v:
                m = v
        s = 0.0  # pass 2: exp(z - m) and their sum (in float64)
        for c in range(C):
            e = math.exp(z[o + c] - m)
            p[o + c] = e
            s += e
        wz = 0.0
        if eps != 0.0:  # sum of w * (z - m), for the smoothing term, in
            for c in range(C):  # float64: z - m of float32 rows overflows past 3.4e38
                wz += w[c] * (np.float64(z[o + c]) - np.float64(m))
        inv = 1.0 / s  # pass 3: normalize
        for c in range(C):
            p[o + c] *= inv
        ls = math.log(s)
        row = (1.0 - eps) * w[t] * (ls - (np.float64(z[o + t]) - np.float64(m)))
        if eps != 0.0:
            row += eps / C * (w_all * ls - wz)
        loss[r] = row
        total += row
        weight += w[t]
    stats[0] = total
    stats[1] = weight
    return -1


# --8<-- [end:cross_entropy_kernel]


# --8<-- [start:cross_entropy_backward_kernel]
@njit(cache=True)
def cross_entropy_backward_kernel(p, n_rows, C, target, w, ignore_index, eps, g, g_step, dz):
    """d(loss)/dz for :func:`cross_entropy_kernel`: softmax minus the target distribution.

    For row r with target t, probabilities p and upstream gradient g[r * g_step]
    (``g_step`` is 0 for a reduced loss):

        dz[c] = g * ( p[c] * ((1 - eps) w[t] + eps/C * sum w)  -  (1 - eps) w[t] [c == t]  -  eps/C w[c] )

    which, without weights, is g * (p - ((1 - eps) one_hot(t) + eps / C)).
    Ignored rows get zero.
    """
    w_all = 0.0
    for c in range(C):
        w_all += w[c]
    for r in range(n_rows):
        o = r * C
        t = target[r]
        if t == ignore_index:
            for c in range(C):
                dz[o + c] = 0.0
            continue
        gr = g[r * g_step]
        a = gr * ((1.0 - eps) * w[t] + eps / C * w_all)
        b = gr * eps / C
        for c in range(C):
            dz[o + c] = p[o + c] * a - b * w[c]
        dz[o + t] -= gr * (1.0 - eps) * w[t]


# --8<-- [end:cross_entropy_backward_kernel]
