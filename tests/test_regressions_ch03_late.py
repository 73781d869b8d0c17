"""Regressions found while writing chapters 3.4 (RNN) and 3.5 (GPT)."""

import numpy as np
import pytest

import sitp

torch = pytest.importorskip("torch")


def test_autograd_grad_of_interior_tensors():
    # sitp.autograd.grad returned None for non-leaf inputs (torch returns their gradients),
    # and accumulated into the .grad of the graph's leaves (torch writes no .grad)
    x = sitp.tensor([0.5, -1.0, 2.0], requires_grad=True)
    a = x * 2
    b = a.tanh()
    c = b * 3
    ga, gb, gc = sitp.autograd.grad(c.sum(), [a, b, c])
    tx = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    ta = tx * 2
    tb = ta.tanh()
    tc = tb * 3
    tga, tgb, tgc = torch.autograd.grad(tc.sum(), [ta, tb, tc])
    for g, tg in ((ga, tga), (gb, tgb), (gc, tgc)):
        np.testing.assert_allclose(g.numpy(), tg.numpy(), rtol=1e-4)
    assert x.grad is None and a.grad is None


def test_autograd_grad_keeps_existing_grads_and_retain_grad():
    w = sitp.tensor([1.0, 2.0], requires_grad=True)
    w.grad = sitp.tensor([10.0, 10.0])
    h = w * w
    h.retain_grad()
    (gw,) = sitp.autograd.grad(h.sum(), [w], retain_graph=True)
    np.testing.assert_allclose(gw.numpy(), [2.0, 4.0])
    np.testing.assert_allclose(w.grad.numpy(), [10.0, 10.0])  # untouched
    np.testing.assert_allclose(h.grad.numpy(), [1.0, 1.0])  # as torch: retained, filled
    h.grad = None
    h.sum().backward()  # retain_grad still works
    np.testing.assert_allclose(h.grad.numpy(), [1.0, 1.0])
    np.testing.assert_allclose(w.grad.numpy(), [12.0, 14.0])


def test_autograd_grad_through_rnn_hidden_states():
    sitp.manual_seed(0)
    cell = sitp.nn.RNNCell(4, 8)
    x = sitp.randn(5, 2, 4)
    h, hs = None, []
    for t in range(5):
        h = cell(x[t], h)
        hs.append(h)
    grads = sitp.autograd.grad(hs[-1].sum(), hs)
    assert all(g is not None and tuple(g.shape) == (2, 8) for g in grads)
    np.testing.assert_allclose(grads[-1].numpy(), np.ones((2, 8)))
    assert cell.weight_hh.grad is None
