"""One-pass optimizer kernels: the same arithmetic as the composed steps, one loop.

The composed Adam step in ``adam.py`` — the version the book reads — launches
about ten kernels per parameter, each a pass over memory and a trip through
Python. ``adam_kernel`` reads each parameter, gradient and moment once and
writes them once. It is used for contiguous CPU tensors; anything else takes
the composed path.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


# --8<-- [start:adam_kernel]
@njit(cache=True, error_model="numpy")
def adam_kernel(p, g, m, v, lr, beta1, beta2, eps, wd, decoupled, bc1, bc2_sqrt):
    """One Adam(W) step on flat arrays, entry by entry, in PyTorch's order of operations.

    ``error_model="numpy"``: a division by zero gives inf or NaN, as in numpy and
    torch, instead of a check per entry for Python's ZeroDivisionError, which keeps
    LLVM from vectorising the loop.
    """
    for i in range(p.size):
        gi = g[i]
        if wd != 0.0:
            if decoupled:
                p[i] = p[i] * (1.0 - lr * wd)       # AdamW: shrink the weight
            else:
                gi = gi + wd * p[i]                 # Adam: L2 term in the gradient
        m[i] = m[i] + (gi - m[i]) * (1.0 - beta1)   # m = lerp(m, g, 1 - beta1)
        v[i] = v[i] * beta2 + gi * gi * (1.0 - beta2)
        denom = math.sqrt(v[i]) / bc2_sqrt + eps
        p[i] = p[i] - (lr / bc1) * (m[i] / denom)
# --8<-- [end:adam_kernel]


def flat(t):
    """The storage of a contiguous CPU tensor as a 1-D array, or None."""
    s = t._storage
    if not isinstance(s, np.ndarray) or not t.is_contiguous():
        return None
    return s[t._offset:t._offset + t.numel()]


def bump(step):
    """``step += 1`` for an optimizer's 0-d step counter; returns the new count.

    On the CPU the counter's one entry is bumped in its storage, which skips the
    trip through the op layer (two kernel launches and ``.item()``) that would
    otherwise be paid once per parameter per step.
    """
    s = step._storage
    if isinstance(s, np.ndarray):
        s[step._offset] += 1
        return float(s[step._offset])
    step += 1
    return step.item()
