"""The sum of squares of a flat buffer in one pass (gradient clipping, chapter 3.2).

``clip_grad_norm_`` needs the 2-norm of every gradient. Composed from ops, that is a
cast to float64, a square and a sum per parameter: three passes over memory, two
temporaries and three kernel launches. :func:`sum_of_squares` reads each entry once
and accumulates in float64.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, fastmath={"reassoc", "contract"})
def sum_of_squares(x):
    """The sum of ``x[i]**2`` over a 1-D array, accumulated in float64.

    ``reassoc`` lets LLVM keep several partial sums in a vector register (the order of
    the additions changes, the same way in every run); a NaN or an infinity still
    propagates to the result.
    """
    s = 0.0
    for i in range(x.size):
        v = np.float64(x[i])
        s += v * v
    return s
