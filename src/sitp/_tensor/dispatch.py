"""The one dispatch point: which backend runs an op (``sitp/kernels/cpu`` or ``sitp/kernels/cuda``).

A tensor's storage says where it lives: a numpy array on the CPU, a Numba device array on
the GPU. An op with any GPU operand runs on the GPU backend, which accepts 0-d CPU tensors
(Python scalars) and rejects every other CPU tensor with an error naming both devices.

Both backends implement ``sitp/kernels/interface.py``, module-level functions with the
same names and parameters, so the module that :func:`of` returns is the backend: a call is
``dispatch.of(x).unary("exp", x)``, with no object in between. A backend reads a tensor
only through its storage and layout and makes results with the tensor's own ``_make``;
the functions with no tensor operand (``fill``, ``empty``, ``arange``) return a bare
storage that the caller wraps (``sitp/_tensor/creation.py``).
"""

from __future__ import annotations

import numpy as np

from sitp.kernels.cpu import ops as cpu

_cuda = None


def cuda():
    """The CUDA backend's ops module, imported on first use: it imports numba.cuda, which
    costs a second at start-up and is not needed by a program that stays on the CPU."""
    global _cuda
    if _cuda is None:
        from sitp.kernels.cuda import ops  # late: imports numba.cuda (see the docstring)

        _cuda = ops
    return _cuda


def of(*tensors):
    """The backend module for an op on ``tensors`` (non-tensors are ignored)."""
    for t in tensors:
        s = getattr(t, "_storage", None)
        if s is not None and s.__class__ is not _NDARRAY and not isinstance(s, np.ndarray):
            return cuda()
    return cpu


def of_tensor(t):
    """:func:`of` for one tensor ``t``: the CPU backend when its storage is a numpy array
    (tested by identity: the common case, the one test of a small op), else :func:`of`'s answer."""
    return cpu if t._storage.__class__ is _NDARRAY else of(t)


_NDARRAY = np.ndarray  # the common case, tested by identity before isinstance
