"""Tests of the section 4.1 assignment: ``pytest --pyargs sitp.exercises.tests.test_engine``.

Gradients are checked against central differences and against sitp's autograd.
"""

import math

import numpy as np

import sitp


def f(V, x, y, z):
    """A function using every op, with x used three times."""
    a = x * y + z.exp()
    b = (a * x).tanh() + (y**2 + 1).log()
    return b * x - a / (z**2 + 2)


def grads(impl, values):
    leaves = [impl.Value(v) for v in values]
    out = f(impl.Value, *leaves)
    impl.backward(out)
    return out.data, [leaf.grad for leaf in leaves]


def test_local_grads(impl):
    V = impl.Value
    x, y = V(3.0), V(-2.0)
    assert impl.local_grads(x + y) == (1.0, 1.0)
    assert impl.local_grads(x * y) == (-2.0, 3.0)
    np.testing.assert_allclose(impl.local_grads(x**3), (27.0,))
    np.testing.assert_allclose(impl.local_grads(x.tanh()), (1 - math.tanh(3.0) ** 2,))
    np.testing.assert_allclose(impl.local_grads(y.exp()), (math.exp(-2.0),))
    np.testing.assert_allclose(impl.local_grads(x.log()), (1 / 3,))


def test_topological_order(impl):
    V = impl.Value
    x = V(1.0)
    a = x * 2
    b = x + a
    out = a * b
    order = impl.topological_order(out)
    assert order[-1] is out
    assert len(order) == len({id(n) for n in order}) == 5  # x, the constant 2, a, b, out: once each
    where = {id(n): k for k, n in enumerate(order)}
    for node in order:
        for p in node.parents:
            assert where[id(p)] < where[id(node)]


def test_gradients_match_central_differences(impl):
    point = [0.7, -1.3, 0.4]
    _, analytic = grads(impl, point)
    h = 1e-6
    for k in range(3):
        up, down = list(point), list(point)
        up[k] += h
        down[k] -= h
        numeric = (f(None, *map(impl.Value, up)).data - f(None, *map(impl.Value, down)).data) / (
            2 * h
        )
        np.testing.assert_allclose(analytic[k], numeric, rtol=1e-6, atol=1e-8)


def test_gradients_match_sitp_autograd(impl):
    point = [0.7, -1.3, 0.4]
    value, analytic = grads(impl, point)
    ts = [sitp.tensor(v, dtype=sitp.float64, requires_grad=True) for v in point]
    out = f(None, *ts)
    out.backward()
    np.testing.assert_allclose(value, out.item(), rtol=1e-12)
    np.testing.assert_allclose(analytic, [t.grad.item() for t in ts], rtol=1e-10)


def test_backward_twice_gives_the_same_gradients(impl):
    x = impl.Value(0.5)
    out = x * x * x
    impl.backward(out)
    impl.backward(out)
    assert math.isclose(x.grad, 0.75)


def test_a_deep_graph(impl):
    """5,000 nodes in a chain: a recursive walk would pass Python's recursion limit."""
    x = impl.Value(1.0)
    y = x
    for _ in range(5000):
        y = y * 1.0001
    impl.backward(y)
    assert math.isclose(x.grad, 1.0001**5000, rel_tol=1e-9)
