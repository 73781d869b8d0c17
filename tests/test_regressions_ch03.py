"""Regressions found while writing chapters 3.1, 3.3 and 4.2, each checked against PyTorch."""

import numpy as np
import pytest
import torch

import sitp


def test_retain_grad_keeps_the_gradient_of_an_interior_tensor():
    # retain_grad() was a no-op: an interior tensor's .grad stayed None after backward().
    x = np.random.default_rng(0).standard_normal((4, 3))
    w = sitp.tensor(x, requires_grad=True)
    a = (w * 2).tanh()
    a.retain_grad()
    b = a * 3
    b.retain_grad()
    (b * b + a).sum().backward()  # a is used twice: both uses count

    wt = torch.tensor(x, requires_grad=True)
    at = (wt * 2).tanh()
    at.retain_grad()
    bt = at * 3
    bt.retain_grad()
    (bt * bt + at).sum().backward()
    for mine, theirs in [(a, at), (b, bt), (w, wt)]:
        np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=1e-12)


def test_retain_grad_needs_requires_grad():
    with pytest.raises(RuntimeError, match="requires_grad=False"):
        sitp.ones(3).retain_grad()
