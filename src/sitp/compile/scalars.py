"""Scalar functions the generated float32 kernels call: ``tanh`` and ``sigmoid`` in forms
LLVM vectorises.

numba compiles ``math.tanh`` on a float32 to a call of the C library's ``tanhf``, one
value at a time (16 ns each on the benchmark's CPU); a loop containing a call is not
vectorised. ``tanh_f32`` uses ``sitp.kernels.cpu.vecmath.exp_f32`` (adds, multiplies,
selects) and the odd series near zero, where ``1 - 2 / (exp(2|x|) + 1)`` would cancel.
Its relative error is below 1e-6 (``tests/test_compile_passes.py`` measures it).
``sigmoid_f32`` is ``1 / (1 + exp_f32(-x))``: for x far below 0 the exp is inf and the
result 0, as it should be, so the branch of the scalar form (``sitp/kernels/scalar.py``,
which keeps exp from overflowing) is not needed; within 3e-7 relative of the float64
sigmoid (``tests/test_compile_gru.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sitp.kernels.cpu.vecmath import FASTMATH, exp_f32


@njit(cache=True, inline="always", fastmath=FASTMATH, error_model="numpy")
def tanh_f32(x):
    a = abs(x)
    e = exp_f32(np.float32(2.0) * a)
    far = np.float32(1.0) - np.float32(2.0) / (e + np.float32(1.0))
    a2 = a * a
    near = a + a * a2 * (
        np.float32(-1.0 / 3.0) + a2 * (np.float32(2.0 / 15.0) + a2 * np.float32(-17.0 / 315.0))
    )
    r = near if a < np.float32(0.25) else far
    return r if x >= np.float32(0.0) else -r


@njit(cache=True, inline="always", fastmath=FASTMATH, error_model="numpy")
def sigmoid_f32(x):
    return np.float32(1.0) / (np.float32(1.0) + exp_f32(-x))
