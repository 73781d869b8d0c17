"""The LSTM cell's gates as one kernel each way (chapter 3.4, section 4.2's "layers as
single nodes").

After its two linear maps, one LSTM step is three sigmoids, two tanhs and five
elementwise products and sums over rows of 4H gate pre-activations (torch's order i, f,
g, o). Here they are one kernel each way, with the derivatives written out once:

    a = gi + gh,   i = σ(a_i),  f = σ(a_f),  g = tanh(a_g),  o = σ(a_o)
    c' = f c + i g,   h' = o tanh(c')

    dc_tot = dc' + dh' o (1 - tanh²(c'))
    da_i = dc_tot g i (1 - i),   da_f = dc_tot c f (1 - f)
    da_g = dc_tot i (1 - g²),    da_o = dh' tanh(c') o (1 - o),   dc = dc_tot f

d(gi) = d(gh) = da. In float32 the sigmoids and tanhs use ``exp_f32`` of
``sitp.kernels.cpu.vecmath``, which vectorises (tanh a = 2 σ(2a) - 1, good to about an
ulp of 1 in absolute terms); float64 uses the C library's ``exp`` and ``tanh``. The
kernels work on flat, contiguous rows; the autograd nodes that call them are
``sitp.nn._functions.lstm.LSTMGates`` (one step) and
``sitp.nn._functions.recurrent.RecurrentLayer`` (a whole layer).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from sitp.kernels.cpu.fused.gelu import _is_float32
from sitp.kernels.cpu.vecmath import FASTMATH, exp_f32

_ONE, _TWO = np.float32(1.0), np.float32(2.0)


@njit(cache=True, inline="always", fastmath=FASTMATH, error_model="numpy")
def _sigmoid_f32(a):
    """σ(a) in float32, vectorisable; e^(-a) = inf for a very negative a gives 0."""
    return _ONE / (_ONE + exp_f32(-np.float32(a)))


@njit(cache=True, inline="always", fastmath=FASTMATH, error_model="numpy")
def _tanh_f32(a):
    """tanh(a) = 2 σ(2a) - 1 in float32, vectorisable."""
    return _TWO / (_ONE + exp_f32(-_TWO * np.float32(a))) - _ONE


@njit(cache=True, inline="always", error_model="numpy")
def _sigmoid(a):
    """σ(a), written so that exp never overflows."""
    if a >= 0:
        return 1.0 / (1.0 + math.exp(-a))
    e = math.exp(a)
    return e / (1.0 + e)


# --8<-- [start:lstm_gates_kernel]
@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def lstm_gates_kernel(gi, gh, c, H, h_out, c_out, gates, tc):
    """(h', c') = LSTM(gi, gh, c) for rows of ``H`` hidden units; gi, gh are rows of 4H.

    Saves the activated gates (i, f, g, o; rows of 4H) and tanh(c') for the backward.
    Two passes: the gates (reading gi, gh, writing gates), then the cell. Each loop
    touches few arrays, so LLVM can prove they do not overlap and vectorise it (one
    loop over all eight would need too many runtime overlap checks, and stays scalar).
    """
    R = c.size // H  # rows
    f32 = _is_float32(gi)
    for b in range(R):
        g4 = b * 4 * H
        for j in range(g4, g4 + 2 * H):  # i and f
            a = gi[j] + gh[j]
            gates[j] = _sigmoid_f32(a) if f32 else _sigmoid(a)
        for j in range(g4 + 2 * H, g4 + 3 * H):  # g
            a = gi[j] + gh[j]
            gates[j] = _tanh_f32(a) if f32 else math.tanh(a)
        for j in range(g4 + 3 * H, g4 + 4 * H):  # o
            a = gi[j] + gh[j]
            gates[j] = _sigmoid_f32(a) if f32 else _sigmoid(a)
    for b in range(R):
        g4 = b * 4 * H
        for j in range(H):
            k = b * H + j
            cc = gates[g4 + H + j] * c[k] + gates[g4 + j] * gates[g4 + 2 * H + j]
            t = _tanh_f32(cc) if f32 else math.tanh(cc)
            c_out[k] = cc
            tc[k] = t
            h_out[k] = gates[g4 + 3 * H + j] * t


@njit(cache=True, error_model="numpy")
def lstm_gates_backward_kernel(dh, dc_out, c, gates, tc, H, da, dc):
    """The chain rule through the gates for upstream gradients ``dh`` and ``dc_out``
    (rows of H); writes d(gate pre-activations) (rows of 4H) and dc."""
    for b in range(c.size // H):
        g4 = b * 4 * H
        for j in range(H):
            k = b * H + j
            i, f = gates[g4 + j], gates[g4 + H + j]
            g, o = gates[g4 + 2 * H + j], gates[g4 + 3 * H + j]
            t = tc[k]
            d_tot = dc_out[k] + dh[k] * o * (1.0 - t * t)
            da[g4 + j] = d_tot * g * i * (1.0 - i)
            da[g4 + H + j] = d_tot * c[k] * f * (1.0 - f)
            da[g4 + 2 * H + j] = d_tot * i * (1.0 - g * g)
            da[g4 + 3 * H + j] = dh[k] * t * o * (1.0 - o)
            dc[k] = d_tot * f


# --8<-- [end:lstm_gates_kernel]
