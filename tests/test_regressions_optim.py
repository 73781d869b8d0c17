"""Regressions in sitp's core found while building sitp.optim (chapter 3.2)."""

import numpy as np
import torch

import sitp


def test_tensor_of_a_python_scalar_is_0d():
    # np.ascontiguousarray turns a 0-d array into a 1-d one; sitp.tensor(3.0) must be 0-d
    # like torch.tensor(3.0) (the optimizers keep their step counter in such a tensor).
    for value in (3.0, 5, np.float64(2.5), np.array(1.5)):
        s, t = sitp.tensor(value), torch.tensor(value)
        assert tuple(s.shape) == tuple(t.shape) == ()
        assert s.item() == t.item()
    assert tuple(sitp.from_numpy(np.array(2.0)).shape) == ()
    s = sitp.tensor(0.0)
    s += 1
    assert tuple(s.shape) == () and s.item() == 1.0
