"""What the GPU nodes need from the CUDA backend, reached through one late import.

``sitp.kernels.cuda`` imports ``numba.cuda``, which is slow to import and absent on some
installs, so it is imported when a device tensor first reaches a fused GPU node, not
when ``sitp.nn`` is imported.
"""

from __future__ import annotations

import numpy as np

from sitp._tensor.tensor import Tensor


def backend():
    """(``sitp.kernels.cuda.fused``, ``sitp.kernels.cuda.ops``): the kernels and the backend."""
    from sitp.kernels.cuda import fused, ops  # late: imports numba.cuda

    return fused, ops


def is_device(t) -> bool:
    """Whether ``t`` is None or a device tensor."""
    return t is None or not isinstance(t._storage, np.ndarray)


def flat(t, dtype=None):
    """The flat device storage of t's entries, contiguous from index 0 (a view if it can)."""
    _, CB = backend()
    t = CB._operand(t)  # a 0-d host tensor (an upstream gradient) becomes a device constant
    if dtype is not None and t.dtype is not dtype:
        t = CB.copy(t, dtype)
    if not t.is_contiguous():
        t = CB.copy(t)
    return t._storage[t._offset : t._offset + t.numel()]


def new(shape, dtype):
    """A new contiguous device tensor."""
    return backend()[1]._new(shape, dtype, Tensor)
