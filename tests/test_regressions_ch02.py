"""Regressions found while writing chapter 2 (sections 2.1 and 2.2)."""

import math

import numpy as np

import sitp


def test_softmax_of_a_fully_masked_row_is_nan_not_an_exception():
    # A row of -inf (every position masked) used to raise ZeroDivisionError inside the
    # numba kernel; PyTorch returns NaN for that row and the right values elsewhere.
    x = sitp.tensor([[-math.inf, -math.inf], [1.0, 2.0]])
    for y in (x.softmax(-1), x.log_softmax(-1)):
        out = y.numpy()
        assert np.isnan(out[0]).all()
    np.testing.assert_allclose(x.softmax(-1).numpy()[1], [0.26894143, 0.7310586], rtol=1e-6)
    np.testing.assert_allclose(x.log_softmax(-1).numpy()[1], [-1.3132616, -0.3132616], rtol=1e-6)
