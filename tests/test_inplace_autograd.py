"""In-place ops on tensors in the autograd graph are recorded, as torch records them.

``a = w * 2; a.add_(1)`` gives ``a`` a new grad_fn; backward through it, and through
tensors computed from ``a`` before the write, matches torch's forward and gradients.
Where sitp cannot record the write (an indexed write, a tensor that another live tensor
views), it raises instead of dropping or misrouting a gradient.
"""

import numpy as np
import pytest
import torch

import sitp

_KEPT = []  # a non-leaf tensor whose retained .grad is compared too


def _earlier_use(L, w, b):
    a = w * 2
    u = a * 1  # uses a's first version
    a.mul_(3)
    return u + a


def _iadd(L, w, b):
    a = w * 2
    a += b
    return a


def _retained(L, w, b):
    a = w * 2
    a.retain_grad()
    a.mul_(b)
    _KEPT.append(a)
    return a * 3


CASES = {
    "add_": lambda L, w, b: (w * 2).add_(1),
    "add_tensor_alpha": lambda L, w, b: (w * 2).add_(b, alpha=3),
    "sub_": lambda L, w, b: (w * 2).sub_(b),
    "mul_tensor": lambda L, w, b: (w * 2).mul_(b),
    "div_tensor": lambda L, w, b: (w * 2).div_(b),
    "exp_": lambda L, w, b: (w * 2).exp_(),
    "pow_": lambda L, w, b: (w * 2).pow_(2),
    "sqrt_": lambda L, w, b: (w * w + 1).sqrt_(),
    "neg_": lambda L, w, b: (w * 2).neg_(),
    "clamp_": lambda L, w, b: (w * 2).clamp_(-1, 1),
    "zero_": lambda L, w, b: (w * 2).zero_() + w,
    "fill_": lambda L, w, b: (w * 2).fill_(3) * w,
    "copy_": lambda L, w, b: (w * 2).copy_(b * 3),
    "masked_fill_": lambda L, w, b: (w * 2).masked_fill_(L.tensor([True, False, True]), 0.0),
    "lerp_": lambda L, w, b: (w * 2).lerp_(b, 0.25),
    "addcmul_": lambda L, w, b: (w * 2).addcmul_(b, w, value=2),
    "addcdiv_": lambda L, w, b: (w * 2).addcdiv_(w, b, value=0.5),
    "no_grad_tensor_add_grad_one": lambda L, w, b: L.zeros(3, dtype=L.float64).add_(b),
    "no_grad_tensor_mul_grad_one": lambda L, w, b: L.ones(3, dtype=L.float64).mul_(b),
    "iadd": _iadd,
    "chain": lambda L, w, b: (w * 2).mul_(b).add_(w).exp_(),
    "earlier_use_keeps_old_version": _earlier_use,
    "retain_grad": _retained,
}


def _run(L, case):
    w = L.tensor([0.5, -1.0, 2.0], dtype=L.float64, requires_grad=True)
    b = L.tensor([1.5, 0.25, -0.75], dtype=L.float64, requires_grad=True)
    _KEPT.clear()
    out = CASES[case](L, w, b)
    assert out.requires_grad and not out.is_leaf
    (out * L.tensor([1.0, -2.0, 0.5], dtype=L.float64)).sum().backward()
    kept = _KEPT[0] if _KEPT else None
    return (out.detach().numpy(), w.grad, b.grad, None if kept is None else kept.grad)


@pytest.mark.parametrize("case", CASES)
def test_inplace_on_a_graph_tensor_matches_torch(case):
    got, want = _run(sitp, case), _run(torch, case)
    np.testing.assert_allclose(got[0], want[0].astype(np.float64), rtol=1e-12)
    for g, t in zip(got[1:], want[1:]):
        assert (g is None) == (t is None)
        if t is not None:
            np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=1e-12, atol=1e-12)


def test_the_version_check_still_guards_saved_outputs():
    """exp saves its output: writing it in place, then backward, raises in both."""
    for L in (torch, sitp):
        w = L.ones(3, requires_grad=True)
        a = w.exp()
        a.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            a.sum().backward()


@pytest.mark.parametrize(
    "write",
    [
        lambda a: a[0:2].mul_(3),  # a view of a graph tensor
        lambda a: a.view(3).mul_(3),
    ],
    ids=["slice", "view"],
)
def test_a_view_of_a_graph_tensor_is_refused(write):
    w = sitp.ones(3, requires_grad=True)
    a = w * 2
    with pytest.raises(RuntimeError, match="in-place"):
        write(a)


def test_a_graph_tensor_with_a_live_view_is_refused():
    w = sitp.ones(3, requires_grad=True)
    a = w * 2
    v = a[1:]  # noqa: F841  (alive: its graph would go stale)
    with pytest.raises(RuntimeError, match="views"):
        a.mul_(3)


def test_indexed_writes_in_the_graph_are_refused():
    w = sitp.ones(3, requires_grad=True)
    a = w * 2
    with pytest.raises(RuntimeError, match="in-place"):
        a[0] = 5.0
    with pytest.raises(RuntimeError, match="in-place"):
        a.index_put_((sitp.tensor([0]),), sitp.tensor([5.0]))


def test_leaf_requiring_grad_still_refused_like_torch():
    for L in (torch, sitp):
        with pytest.raises(RuntimeError, match="leaf Variable"):
            L.ones(2, requires_grad=True).mul_(2)


def test_no_grad_writes_are_not_recorded():
    w = sitp.ones(3, requires_grad=True)
    a = w * 2
    node = a.grad_fn
    with sitp.no_grad():
        a.add_(1)
    assert a.grad_fn is node and a._version == 1
