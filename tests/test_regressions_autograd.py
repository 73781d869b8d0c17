"""Regression tests for autograd bugs found by gradcheck (chapter 4.1).

Each test names the bug it guards against.
"""

from __future__ import annotations

import pytest

import sitp
from sitp.autograd.gradcheck import GradcheckError, gradcheck

F64 = sitp.float64


# In-place writes of a tensor that requires grad into one that does not
# (``z[1:] = x * 2``, ``z += x``, ``z.copy_(x)``, ``z.masked_fill_(m, x)``) silently
# dropped the gradient: sitp does not record in-place ops, and ``z`` came out with
# requires_grad=False, so ``backward`` through it gave zeros (PyTorch records them).
# gradcheck showed it as "numerical 2 vs analytical 0". They now raise instead.
@pytest.mark.parametrize(
    "write",
    [
        lambda z, x: z.__setitem__(slice(1, None), x * 2),
        lambda z, x: z[1:].__iadd__(x),
        lambda z, x: z[1:].add_(x, alpha=2),
        lambda z, x: z[1:].mul_(x),
        lambda z, x: z[1:].copy_(x),
        lambda z, x: z[1:].lerp_(x, 0.5),
        lambda z, x: z.index_put_((sitp.tensor([0, 1, 2]),), x),
        lambda z, x: z[1:].masked_fill_(sitp.tensor([True, False, True]), x[0]),
    ],
    ids=["setitem", "iadd", "add_", "mul_", "copy_", "lerp_", "index_put_", "masked_fill_"],
)
def test_inplace_write_of_a_grad_tensor_raises_instead_of_dropping_the_gradient(write):
    x = sitp.tensor([1.0, 2.0, 3.0], dtype=F64, requires_grad=True)
    z = sitp.zeros(4, dtype=F64)
    with pytest.raises(RuntimeError, match="in-place"):
        write(z, x)


def test_inplace_writes_without_a_gradient_still_work():
    x = sitp.tensor([1.0, 2.0, 3.0], dtype=F64, requires_grad=True)
    z = sitp.zeros(4, dtype=F64)
    z[1:] = x.detach() * 2  # detached: nothing to lose
    with sitp.no_grad():  # not recording: nothing to lose
        z[0] = x[0]
        z += x.sum()
    assert z.tolist() == [7.0, 8.0, 10.0, 12.0]


def test_the_out_of_place_form_keeps_the_gradient():
    x = sitp.tensor([1.0, 2.0, 3.0], dtype=F64, requires_grad=True)
    assert gradcheck(lambda t: sitp.cat([sitp.zeros(1, dtype=F64), t * 2]), (x,))
    with pytest.raises((GradcheckError, RuntimeError)):
        gradcheck(lambda t: _write_into_zeros(t), (x,))


def _write_into_zeros(t):
    z = sitp.zeros(4, dtype=F64)
    z[1:] = t * 2
    return z


# Leaves that shared one gradient tensor. ``a + b`` hands the same tensor to both
# operands, and the engine let the first leaf keep it as its ``.grad`` and the second
# too, so that both ``.grad`` were one tensor: the next backward added into it twice
# (3 and 2 became 4 and 4). The pieces of a ``stack`` (views of one gradient) and the
# caller's own ``gradient`` were kept the same way. Now a leaf takes a gradient's memory
# only when nothing else holds it, as torch's AccumulateGrad does.
def _shared_gradient_cases(lib):
    c, d = lib.ones(3, requires_grad=True), lib.ones(3, requires_grad=True)
    (c + d).backward(lib.ones(3))
    (c * 2 + d).backward(lib.ones(3))
    x = lib.ones(2, 3, requires_grad=True)
    a, b = lib.ones(3, requires_grad=True), lib.ones(3, requires_grad=True)
    (lib.stack([a, b]) + x).backward(lib.ones(2, 3))
    (lib.stack([a, b]) * 2 + x).backward(lib.ones(2, 3))
    e = lib.ones(3, requires_grad=True)
    (e + e.view(3) * 1 + e).backward(lib.ones(3))
    leaf, given = lib.ones(3, requires_grad=True), lib.full((3,), 2.0)
    leaf.backward(given)
    given.mul_(10)  # the caller's tensor, written after backward: not the leaf's .grad
    mid = lib.ones(3, requires_grad=True)
    g = lib.ones(3)
    (mid * 1).backward(g)
    g.add_(5)
    return [t.grad.tolist() for t in (c, d, x, a, b, e, leaf, mid)]


def test_leaves_do_not_share_one_gradient_tensor():
    torch = pytest.importorskip("torch")
    assert _shared_gradient_cases(sitp) == _shared_gradient_cases(torch)
