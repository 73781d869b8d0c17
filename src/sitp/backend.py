"""Which backend runs an op: ``sitp/cpu.py`` or ``sitp/cuda_backend.py``.

A tensor's storage says where it lives: a numpy array on the CPU, a Numba
device array on the GPU. An op with any GPU operand runs on the GPU backend,
which accepts 0-d CPU tensors (Python scalars) and rejects every other CPU
tensor with an error naming both devices.
"""

from __future__ import annotations

import numpy as np

from . import cpu


def of(*tensors):
    """The backend module for an op on ``tensors`` (non-tensors are ignored)."""
    for t in tensors:
        s = getattr(t, "_storage", None)
        if s is not None and not isinstance(s, np.ndarray):
            from . import cuda_backend

            return cuda_backend
    return cpu
