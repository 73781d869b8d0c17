"""A solution of :mod:`sitp.exercises.adamw`."""

import numpy as np


# --8<-- [start:solution]
def _adam_update(p, g, m, v, t, lr, betas, eps):
    beta1, beta2 = betas
    m *= beta1
    m += (1 - beta1) * g  # first moment: a running mean of g
    v *= beta2
    v += (1 - beta2) * g * g  # second moment: a running mean of g^2
    m_hat = m / (1 - beta1**t)  # bias corrections: m and v start at 0
    v_hat = v / (1 - beta2**t)
    p -= lr * m_hat / (np.sqrt(v_hat) + eps)


def adam_step(p, g, m, v, t, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
    _adam_update(p, g + weight_decay * p, m, v, t, lr, betas, eps)


def adamw_step(p, g, m, v, t, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    p *= 1 - lr * weight_decay  # decoupled: the moments never see the decay
    _adam_update(p, g, m, v, t, lr, betas, eps)


# --8<-- [end:solution]
