"""The Adam(W) step as one kernel: the same arithmetic as the composed step, one loop
(chapter 4.2).

The composed Adam step in ``sitp/optim/adam.py`` -- the version the book reads --
launches about ten kernels per parameter, each a pass over memory and a trip through
Python. :func:`adam_kernel` reads each parameter, gradient and moment once and writes
them once. ``Adam.step`` calls it on the flat storages of contiguous CPU tensors;
anything else takes the composed path.
"""

from __future__ import annotations

import math

from numba import get_num_threads, njit, prange


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
                p[i] = p[i] * (1.0 - lr * wd)  # AdamW: shrink the weight
            else:
                gi = gi + wd * p[i]  # Adam: L2 term in the gradient
        m[i] = m[i] + (gi - m[i]) * (1.0 - beta1)  # m = lerp(m, g, 1 - beta1)
        v[i] = v[i] * beta2 + gi * gi * (1.0 - beta2)
        denom = math.sqrt(v[i]) / bc2_sqrt + eps
        p[i] = p[i] - (lr / bc1) * (m[i] / denom)


# --8<-- [end:adam_kernel]


# Parameters of at least this many entries (a GPT's matrices; about 30 us on one core)
# have their entries split among numba's threads.
_PARALLEL_MIN = 1 << 15


@njit(cache=True, parallel=True)
def adam_parallel(p, g, m, v, lr, beta1, beta2, eps, wd, decoupled, bc1, bc2_sqrt, n_chunks):
    """adam_kernel on n_chunks threads, each on one band of the entries."""
    n = p.size
    for c in prange(n_chunks):
        i0, i1 = c * n // n_chunks, (c + 1) * n // n_chunks
        adam_kernel(
            p[i0:i1],
            g[i0:i1],
            m[i0:i1],
            v[i0:i1],
            lr,
            beta1,
            beta2,
            eps,
            wd,
            decoupled,
            bc1,
            bc2_sqrt,
        )


def adam_update(p, g, m, v, lr, beta1, beta2, eps, wd, decoupled, bc1, bc2_sqrt):
    """One Adam(W) step on flat arrays: :func:`adam_kernel`, on numba's threads when the
    parameter is large (the entries are independent: any split gives the same result)."""
    threads = get_num_threads() if p.size >= _PARALLEL_MIN else 1
    args = (p, g, m, v, lr, beta1, beta2, eps, wd, decoupled, bc1, bc2_sqrt)
    if threads > 1:
        adam_parallel(*args, threads)
    else:
        adam_kernel(*args)
