"""Assignment for section 3.2: one step of Adam and of AdamW, on numpy arrays.

Fill in the two functions below, then run ``pytest --pyargs sitp.exercises.tests.test_adamw``.
Both update ``p``, ``m`` and ``v`` in place, as an optimizer's ``step()`` does, for step
number ``t`` (1 for the first step). The tests compare them with ``sitp.optim.Adam`` and
``sitp.optim.AdamW``, which follow PyTorch's definitions.
"""

import numpy as np


def adam_step(
    p: np.ndarray,
    g: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    t: int,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
) -> None:
    """Adam with an L2 penalty: ``weight_decay * p`` is added to the gradient first."""
    raise NotImplementedError("adam_step")


def adamw_step(
    p: np.ndarray,
    g: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    t: int,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 1e-2,
) -> None:
    """AdamW: the weights shrink by ``lr * weight_decay * p``, apart from the moments."""
    raise NotImplementedError("adamw_step")
