"""In-place ops on tensors in the autograd graph are recorded, as torch records them.

``a = w * 2; a.add_(1)`` gives ``a`` a new grad_fn; backward through it, and through
tensors computed from ``a`` before the write, matches torch's forward and gradients.
Where sitp cannot record the write (an indexed write, a tensor that another live tensor
views), it raises instead of dropping or misrouting a gradient. A write to a tensor that
an op saved for its backward makes that backward fail exactly when it does in torch, for
every op of the tables (``UNARY_READS``, ``BINARY_READS``).
"""

import numpy as np
import pytest
import torch

import sitp
from sitp.autograd.derivatives import BINARY_GRAD, BINARY_READS, UNARY_GRAD, UNARY_READS
from test_ops import BINARY, UNARY, call, main_form

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


# ------------------------------------------- a write after an op, for every op
def _row(table, op):
    """The first row of test_ops' table that runs ``op``."""
    return next(r for r in table.values() if r.op == op)


def _write_then_backward(L, row, wants_grad, written):
    """Run a row on fresh inputs (those in ``wants_grad`` require grad), write one of the
    inputs or the output (``written``: its position in operands + [output]) in place,
    then backward: whether backward refused, and the gradients if it did not."""
    values = ([0.5, 1.5, 0.7], [1.2, 0.3, 0.9])
    leaves = [L.tensor(v, dtype=L.float64, requires_grad=w) for v, w in zip(values, wants_grad)]
    operands = [x * 1 for x in leaves]  # not leaves: those would refuse any in-place write
    y = call(L, row, main_form(row), *operands)
    with L.no_grad():
        (operands + [y])[written].add_(1)
    try:
        y.sum().backward()
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e)
        return True, None
    return False, [x.grad for x in leaves]


def _same_as_torch(row, wants_grad, written):
    refused, grads = _write_then_backward(sitp, row, wants_grad, written)
    t_refused, t_grads = _write_then_backward(torch, row, wants_grad, written)
    what = ["a", "b", "y"][written] if len(wants_grad) == 2 else ["x", "y"][written]
    assert refused == t_refused, (
        f"{row.op}, {what} written: sitp refused {refused}, torch {t_refused}"
    )
    for g, t in zip(grads or [], t_grads or []):
        assert (g is None) == (t is None)
        if t is not None:
            np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=1e-12)


def test_every_differentiable_op_lists_what_its_backward_reads():
    assert set(UNARY_READS) == set(UNARY_GRAD)
    assert set(BINARY_READS) == set(BINARY_GRAD)


@pytest.mark.parametrize("op", sorted(UNARY_GRAD))
def test_writing_after_a_unary_op_fails_only_as_in_torch(op):
    """Writing x or y in place after y = op(x) makes backward fail in sitp exactly when it
    does in torch: when the gradient reads what was written (UNARY_READS)."""
    for written in (0, 1):
        _same_as_torch(_row(UNARY, op), (True,), written)


@pytest.mark.parametrize("op", sorted(BINARY_GRAD))
def test_writing_after_a_binary_op_fails_only_as_in_torch(op):
    """As above for y = op(a, b) (BINARY_READS), for each choice of inputs wanting a gradient."""
    for wants_grad in ((True, False), (False, True), (True, True)):
        for written in (0, 1, 2):
            _same_as_torch(_row(BINARY, op), wants_grad, written)
