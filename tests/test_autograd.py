"""The engine: graph recording, accumulation, retain_graph, no_grad, misuse errors."""

import numpy as np
import pytest
import torch

import sitp
from helpers import assert_close


def test_leaves_accumulate_across_backward_calls():
    w = sitp.tensor([1.0, 2.0], requires_grad=True)
    (w * 3).sum().backward()
    (w * w).sum().backward()
    assert w.grad.tolist() == [3.0 + 2.0, 3.0 + 4.0]
    assert w.is_leaf and (w * 2).grad_fn is not None and not (w * 2).is_leaf


def test_diamond_graph_sums_both_paths_like_torch():
    def f(lib, x):
        a = x.exp()
        b = a * x
        c = a.sin() + b.tanh() * a
        return (c * c).sum()

    arr = np.array([0.3, -0.7, 1.1])
    s = sitp.tensor(arr, requires_grad=True)
    t = torch.tensor(arr, requires_grad=True)
    f(sitp, s).backward()
    f(torch, t).backward()
    assert_close(s.grad, t.grad, rtol=1e-12)


def test_second_backward_needs_retain_graph():
    x = sitp.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad.tolist() == [4.0, 8.0]
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_non_scalar_backward_needs_gradient():
    x = sitp.ones(3, requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="scalar outputs"):
        y.backward()
    y.backward(sitp.tensor([1.0, 0.0, 2.0]))
    assert x.grad.tolist() == [2.0, 0.0, 4.0]
    with pytest.raises(RuntimeError, match="shape"):
        (x * 2).backward(sitp.ones(2))


def test_requires_grad_errors():
    with pytest.raises(RuntimeError, match="floating point"):
        sitp.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="does not require grad"):
        sitp.ones(2).sum().backward()
    y = sitp.ones(2, requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad_(False)


def test_no_grad_enable_grad_and_decorator():
    x = sitp.ones(2, requires_grad=True)
    with sitp.no_grad():
        assert not (x * 2).requires_grad
        with sitp.enable_grad():
            assert (x * 2).requires_grad
    assert sitp.is_grad_enabled()

    @sitp.no_grad()
    def f(v):
        return v * 3

    assert not f(x).requires_grad and sitp.is_grad_enabled()


def test_detach_shares_data_and_cuts_graph():
    x = sitp.tensor([1.0, 2.0], requires_grad=True)
    d = (x * 2).detach()
    assert not d.requires_grad and d.grad_fn is None
    y = (x * d).sum()
    y.backward()
    assert x.grad.tolist() == [2.0, 4.0]


def test_gradients_of_shared_input_are_fresh_tensors():
    a = sitp.ones(2, requires_grad=True)
    b = sitp.ones(2, requires_grad=True)
    (a + b).sum().backward()
    a.grad.add_(1)  # must not change b.grad
    assert b.grad.tolist() == [1.0, 1.0]


def test_deep_graph_does_not_hit_recursion_limit():
    x = sitp.tensor([0.5], requires_grad=True)
    y = x
    for _ in range(3000):
        y = y * 1.0001
    y.sum().backward()
    assert abs(x.grad.item() - 1.0001**3000) < 1e-3


def test_autograd_grad_returns_without_accumulating():
    x = sitp.tensor([3.0], requires_grad=True)
    (gx,) = sitp.autograd.grad((x * x).sum(), [x])
    assert gx.tolist() == [6.0] and x.grad is None
