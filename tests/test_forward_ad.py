"""sitp.autograd.forward_ad: dual numbers and jvp, checked against reverse mode and calculus.

Forward mode pushes a tangent v through a function and returns J v; reverse
mode pulls a cotangent u back and returns u^T J. For f: R^n -> R the two meet
entry by entry: jvp with the basis vector e_i is the i-th entry of the
gradient, and in general jvp(v) = <grad f, v>.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sitp
from sitp.autograd.forward_ad import Dual, cos, exp, jvp, log, sigmoid, sin, sqrt, tanh

F64 = sitp.float64
floats = st.floats(-2.0, 2.0, allow_nan=False)


def f_seed(x1, x2):
    """The chapter's example: f(x1, x2) = exp(x1) sin(x2)^2."""
    return exp(x1) * sin(x2) ** 2


# ------------------------------------------------------------------ scalars
def test_dual_arithmetic_rules():
    x = Dual(3.0, 1.0)
    assert (x + 2).tangent == 1.0 and (2 - x).tangent == -1.0
    assert (x * x).tangent == 6.0  # 2x
    assert (1 / x).tangent == pytest.approx(-1 / 9)  # -1/x²
    assert (x / 2).tangent == 0.5
    assert (x**3).tangent == pytest.approx(27.0)  # 3x²
    assert (2**x).tangent == pytest.approx(8 * math.log(2))
    assert (x**x).tangent == pytest.approx(27 * (math.log(3) + 1))
    assert (-x).value == -3.0 and x.pow(2).value == 9.0


@settings(max_examples=30, deadline=None)
@given(x=floats)
def test_elementary_functions_match_their_derivatives(x):
    d = Dual(x, 1.0)
    assert exp(d).tangent == pytest.approx(math.exp(x))
    assert sin(d).tangent == pytest.approx(math.cos(x))
    assert cos(d).tangent == pytest.approx(-math.sin(x))
    assert tanh(d).tangent == pytest.approx(1 - math.tanh(x) ** 2)
    s = 1 / (1 + math.exp(-x))
    assert sigmoid(d).tangent == pytest.approx(s * (1 - s))
    p = Dual(abs(x) + 0.5, 1.0)
    assert log(p).tangent == pytest.approx(1 / (abs(x) + 0.5))
    assert sqrt(p).tangent == pytest.approx(0.5 / math.sqrt(abs(x) + 0.5))


def test_functions_pass_plain_values_through():
    assert exp(0.0) == 1.0 and sin(0.0) == 0.0
    t = sitp.tensor([0.0, 1.0], dtype=F64)
    assert exp(t).allclose(t.exp()) and tanh(t).allclose(t.tanh())


@settings(max_examples=30, deadline=None)
@given(x1=floats, x2=floats)
def test_seed_example_matches_symbolic_derivative(x1, x2):
    out, d1 = jvp(f_seed, (x1, x2), (1.0, 0.0))
    _, d2 = jvp(f_seed, (x1, x2), (0.0, 1.0))
    assert out == pytest.approx(math.exp(x1) * math.sin(x2) ** 2)
    assert d1 == pytest.approx(math.exp(x1) * math.sin(x2) ** 2)
    assert d2 == pytest.approx(2 * math.exp(x1) * math.sin(x2) * math.cos(x2), abs=1e-12)


@settings(max_examples=20, deadline=None)
@given(x1=floats, x2=floats)
def test_seed_example_jvp_with_e_i_equals_reverse_mode_grad_i(x1, x2):
    a = sitp.tensor(x1, dtype=F64, requires_grad=True)
    b = sitp.tensor(x2, dtype=F64, requires_grad=True)
    f_seed(a, b).backward()  # one reverse pass: both partials
    for i, g in enumerate([a.grad.item(), b.grad.item()]):
        e = tuple(1.0 if j == i else 0.0 for j in range(2))
        _, d = jvp(f_seed, (x1, x2), e)  # one forward pass per partial
        assert d == pytest.approx(g, abs=1e-12)


# ------------------------------------------------------------------ tensors
def rand(shape, seed, low=-1.0, high=1.0):
    return sitp.tensor(np.random.default_rng(seed).uniform(low, high, size=shape), dtype=F64)


def grad_of(f, *xs):
    """Reverse mode: the gradient of a scalar f at xs."""
    leaves = [x.detach().clone().requires_grad_() for x in xs]
    f(*leaves).backward()
    return [x.grad for x in leaves]


def mlp_loss(x, W, b):
    """A scalar loss built from the ops Dual supports: affine, tanh, log, mean."""
    h = (x @ W + b).tanh()
    return (1 + h * h).log().mean() + (W * W).sum() / 10


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 5), seed=st.integers(0, 100))
def test_jvp_with_basis_vectors_rebuilds_the_gradient(n, seed):
    x = rand((n,), seed)
    f = lambda t: (t.sin() * t.exp() / (2 + t.cos())).sum() + (t**2).mean()  # noqa: E731
    (g,) = grad_of(f, x)
    rebuilt = []
    for i in range(n):
        e = sitp.zeros(n, dtype=F64)
        e[i] = 1.0
        out, d = jvp(f, x, e)
        rebuilt.append(d.item())
    np.testing.assert_allclose(rebuilt, g.numpy(), rtol=1e-10, atol=1e-12)
    assert out.item() == pytest.approx(f(x).item())


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 1000))
def test_jvp_equals_gradient_dot_direction(seed):
    x, W, b = rand((4, 3), seed), rand((3, 2), seed + 1), rand((2,), seed + 2)
    v = [rand(t.shape, seed + 10 + k) for k, t in enumerate((x, W, b))]
    out, d = jvp(mlp_loss, (x, W, b), tuple(v))
    grads = grad_of(mlp_loss, x, W, b)
    expected = sum((g * vi).sum().item() for g, vi in zip(grads, v))
    assert d.item() == pytest.approx(expected, rel=1e-10)


def test_jvp_of_a_vector_function_is_the_jacobian_column():
    # f: R^3 -> R^2; J v from forward mode, and rows u^T J from reverse mode with
    # one-hot u: the same matrix read two ways.
    x = rand((3,), 4, 0.5, 1.5)
    A = rand((2, 3), 5)
    f = lambda t: t.log() @ A.T  # noqa: E731  (works on a Dual and on a tensor)
    J_fwd = np.stack(
        [jvp(f, x, sitp.eye(3, dtype=F64)[j].contiguous())[1].numpy() for j in range(3)], axis=1
    )
    xr = x.clone().requires_grad_()
    y = xr.log() @ A.T
    J_rev = np.stack(
        [
            sitp.autograd.grad(
                y, xr, sitp.eye(2, dtype=F64)[i].contiguous(), retain_graph=True
            ).numpy()
            for i in range(2)
        ]
    )
    np.testing.assert_allclose(J_fwd, J_rev, rtol=1e-12)
    np.testing.assert_allclose(J_fwd, A.numpy() / x.numpy(), rtol=1e-12)


def test_broadcasting_needs_no_unbroadcast_in_forward_mode():
    x, b = rand((2, 3), 0), rand((3,), 1)
    out, d = jvp(
        lambda u, c: (u * c + c).exp().sum(1),
        (x, b),
        (sitp.zeros(2, 3, dtype=F64), sitp.ones(3, dtype=F64)),
    )
    expected = ((x * b + b).exp() * (x + 1)).sum(1)
    np.testing.assert_allclose(d.numpy(), expected.numpy(), rtol=1e-12)
    assert tuple(out.shape) == (2,)


def test_tuple_outputs_and_constant_outputs():
    x = rand((3,), 2)
    (o1, o2), (d1, d2) = jvp(lambda t: (t * 2, sitp.ones(3, dtype=F64)), x, sitp.ones(3, dtype=F64))
    assert d1.tolist() == [2.0, 2.0, 2.0] and d2.tolist() == [0.0, 0.0, 0.0]
    out, d = jvp(lambda t: 5.0, 1.0, 1.0)
    assert (out, d) == (5.0, 0.0)


def test_jvp_checks_its_arguments():
    x = rand((3,), 2)
    with pytest.raises(ValueError, match="tangents"):
        jvp(lambda a, b: a * b, (1.0, 2.0), (1.0,))
    with pytest.raises(ValueError, match="shape"):
        jvp(lambda t: t.exp(), x, sitp.ones(2, dtype=F64))
