"""The GRU's gates as one kernel each way (chapter 3.4, section 4.2's "layers as single nodes").

Written with tensor operations, one step of a GRU cell after its two linear maps is
two chunks, two sigmoids, a tanh and seven elementwise products and sums: a dozen
nodes, each a trip through Python, for a (32, 64) state. A name of twelve letters
runs it twelve times forward and twelve times backward per batch. Here the gates
are one kernel each way, with the derivatives written out once:

    r = σ(a_r),  z = σ(a_z),  n = tanh(a_n),   with  a_r = i_r + h_r,  a_z = i_z + h_z,
                                                      a_n = i_n + r h_n
    h' = (1 - z) n + z h

    dh = dh' z,   dn = dh' (1 - z),   dz = dh' (h - n)
    da_n = dn (1 - n²),  da_z = dz z (1 - z),  da_r = da_n h_n r (1 - r)
    d(gi) = (da_r, da_z, da_n),   d(gh) = (da_r, da_z, da_n r)

The kernels work on flat, contiguous rows; the autograd node that calls them is
``sitp.nn._functions.gru.GRUGates``.
"""

from __future__ import annotations

import math

from numba import njit

from sitp.kernels.cpu.fused.gelu import _is_float32
from sitp.kernels.cpu.fused.lstm import _sigmoid, _sigmoid_f32, _tanh_f32
from sitp.kernels.cpu.vecmath import FASTMATH


# --8<-- [start:gru_gates_kernel]
@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def gru_gates_kernel(gi, gh, h, H, out, r, z, n, hn):
    """h' = GRU(gi, gh, h) for rows of ``H`` hidden units; gi, gh are rows of 3H.

    Saves r, z, n and h_n (the hidden part of the candidate) for the backward. In
    float32 the sigmoids and the tanh are the LSTM's vectorisable ones (``exp_f32``);
    float64 uses the C library's, with a sigmoid whose exp never overflows. Three
    loops, each touching few arrays, so that LLVM can vectorise them (as the LSTM's).
    """
    f32 = _is_float32(gi)
    for b in range(h.size // H):
        g3, k0 = b * 3 * H, b * H
        for j in range(H):  # the reset and update gates
            a_r = gi[g3 + j] + gh[g3 + j]
            a_z = gi[g3 + H + j] + gh[g3 + H + j]
            r[k0 + j] = _sigmoid_f32(a_r) if f32 else _sigmoid(a_r)
            z[k0 + j] = _sigmoid_f32(a_z) if f32 else _sigmoid(a_z)
        for j in range(H):  # the candidate
            h_n = gh[g3 + 2 * H + j]
            a_n = gi[g3 + 2 * H + j] + r[k0 + j] * h_n
            n[k0 + j] = _tanh_f32(a_n) if f32 else math.tanh(a_n)
            hn[k0 + j] = h_n
        for k in range(k0, k0 + H):  # the new state
            out[k] = (1.0 - z[k]) * n[k] + z[k] * h[k]


@njit(cache=True, error_model="numpy")
def gru_gates_backward_kernel(g, h, r, z, n, hn, H, dgi, dgh, dh):
    """The chain rule through the gates for upstream gradient ``g`` (rows of H)."""
    for b in range(h.size // H):
        for j in range(H):
            g3, k = b * 3 * H, b * H + j
            gk, rr, zz, nn_ = g[k], r[k], z[k], n[k]
            dh[k] = gk * zz
            da_n = gk * (1.0 - zz) * (1.0 - nn_ * nn_)
            da_z = gk * (h[k] - nn_) * zz * (1.0 - zz)
            da_r = da_n * hn[k] * rr * (1.0 - rr)
            dgi[g3 + j], dgi[g3 + H + j], dgi[g3 + 2 * H + j] = da_r, da_z, da_n
            dgh[g3 + j], dgh[g3 + H + j], dgh[g3 + 2 * H + j] = da_r, da_z, da_n * rr


# --8<-- [end:gru_gates_kernel]
