"""Fused masked softmax for attention on the CPU (chapter 4.2): scale, causal or explicit
mask and softmax in one pass over each row of scores.

Used when attention applies dropout to its weights (and by the exact attention path, for
a float mask that needs its gradient); the autograd node that calls it is
``sitp.nn._functions.softmax.MaskedSoftmax``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from sitp.kernels.cpu import kernels as K
from sitp.strides import numel

_I64 = np.int64


# --8<-- [start:masked_softmax_kernel]
@njit(cache=True, error_model="numpy")
def masked_softmax_kernel(s, n_rows, n, L, scale, causal, mask_kind, mask, m_starts, m_step, p):
    """Attention probabilities, in one pass per row of scores ``s`` (rows of n keys).

    Row r is query i = r % L. Key j takes part when ``causal`` is off or j <= i
    (PyTorch's top-left aligned causal mask), and, with ``mask_kind`` 1 (bool),
    when mask[j] is True; with ``mask_kind`` 2 the float mask is added to the
    scaled score. The mask row of r starts at m_starts[r] and steps by m_step
    (0 for a dim broadcast along keys). A row where no key takes part gets all
    zeros -- what PyTorch's fused CPU kernels return -- not the NaN of 0/0.
    """
    for r in range(n_rows):
        o = r * n
        i = r % L
        m = -np.inf
        for j in range(n):
            v = s[o + j] * scale
            if causal and j > i:
                v = -np.inf
            if mask_kind == 1:
                if not mask[m_starts[r] + j * m_step]:
                    v = -np.inf
            elif mask_kind == 2:
                v += mask[m_starts[r] + j * m_step]
            p[o + j] = v
            if v > m or v != v:
                m = v
        if m == -np.inf:  # nobody to attend to
            for j in range(n):
                p[o + j] = 0.0
            continue
        total = 0.0
        for j in range(n):
            e = math.exp(p[o + j] - m)
            p[o + j] = e
            total += e
        for j in range(n):
            p[o + j] /= total


# --8<-- [end:masked_softmax_kernel]


def masked_softmax(s, shape, scale, causal, mask_kind, mask, mask_strides, mask_offset, p):
    """p = softmax(s * scale + mask) over the last dim of the flat, contiguous scores ``s``
    of ``shape`` (..., L, S), into the flat array ``p``.

    ``mask_kind`` 0: no mask; 1: ``mask`` is a bool storage (True = attend); 2: a float
    storage added to the scaled scores. ``mask_strides`` are the mask's strides broadcast
    to ``shape``, from ``mask_offset``.
    """
    L, S = shape[-2:]
    rows = numel(shape) // S if S else 0
    if rows == 0 or S == 0:
        return
    if mask_kind == 0:
        m, starts, step = np.zeros(1, s.dtype), np.zeros(1, _I64), 0
    else:
        starts = K.positions(
            np.asarray(shape[:-1], _I64), np.asarray(mask_strides[:-1], _I64), mask_offset
        )
        m, step = mask, mask_strides[-1]
    masked_softmax_kernel(s, rows, S, L, float(scale), causal, mask_kind, m, starts, step, p)
