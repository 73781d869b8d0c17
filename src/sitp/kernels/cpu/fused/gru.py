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


# --8<-- [start:gru_gates_kernel]
@njit(cache=True, error_model="numpy")
def gru_gates_kernel(gi, gh, h, H, out, r, z, n, hn):
    """h' = GRU(gi, gh, h) for rows of ``H`` hidden units; gi, gh are rows of 3H.

    Saves r, z, n and h_n (the hidden part of the candidate) for the backward.
    The sigmoid is written so that exp never overflows.
    """
    for b in range(h.size // H):
        for j in range(H):
            g3, k = b * 3 * H, b * H + j
            a_r = gi[g3 + j] + gh[g3 + j]
            a_z = gi[g3 + H + j] + gh[g3 + H + j]
            if a_r >= 0:
                rr = 1.0 / (1.0 + math.exp(-a_r))
            else:
                e = math.exp(a_r)
                rr = e / (1.0 + e)
            if a_z >= 0:
                zz = 1.0 / (1.0 + math.exp(-a_z))
            else:
                e = math.exp(a_z)
                zz = e / (1.0 + e)
            h_n = gh[g3 + 2 * H + j]
            nn_ = math.tanh(gi[g3 + 2 * H + j] + rr * h_n)
            r[k], z[k], n[k], hn[k] = rr, zz, nn_, h_n
            out[k] = (1.0 - zz) * nn_ + zz * h[k]


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
