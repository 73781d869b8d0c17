"""Version counters: a tensor saved for backward and written in place afterwards makes
``backward`` raise, as in torch; writes that backward does not read are allowed, as in
torch. Each scenario runs under both libraries and must end the same way."""

import numpy as np
import pytest
import torch

import sitp


def _w_x(lib):
    return lib.ones(3, requires_grad=True), lib.arange(3.0)


def mul_then_modify_input(lib):
    w, x = _w_x(lib)
    y = (w * x).sum()
    x.mul_(10)
    y.backward()
    return w.grad


def no_grad_modify_leaf_not_read(lib):
    # (w * x).sum() reads only x for dw: torch allows changing w afterwards
    w, x = _w_x(lib)
    y = (w * x).sum()
    with lib.no_grad():
        w.mul_(10)
    y.backward()
    return w.grad


def no_grad_modify_leaf_read(lib):
    w, x = _w_x(lib)
    y = (w * w * x).sum()
    with lib.no_grad():
        w.mul_(10)
    y.backward()
    return w.grad


def add_then_modify(lib):
    # add saves nothing
    w, x = _w_x(lib)
    y = (w + x).sum()
    x.mul_(10)
    y.backward()
    return w.grad


def modify_base_of_saved_view(lib):
    w = lib.ones(3, requires_grad=True)
    x = lib.arange(6.0).reshape(2, 3)
    y = (w * x[1]).sum()
    x.mul_(10)
    y.backward()
    return w.grad


def modify_view_of_saved(lib):
    w = lib.ones(2, 3, requires_grad=True)
    x = lib.arange(6.0).reshape(2, 3)
    y = (w * x).sum()
    x[0].add_(1)
    y.backward()
    return w.grad


def modify_transposed_view(lib):
    w = lib.ones(3, 2, requires_grad=True)
    x = lib.arange(6.0).reshape(2, 3)
    y = (w * x.t()).sum()
    x.t().zero_()
    y.backward()
    return w.grad


def setitem_saved(lib):
    w, x = _w_x(lib)
    y = (w * x).sum()
    x[0] = 5.0
    y.backward()
    return w.grad


def fill_copy_saved(lib):
    w, x = _w_x(lib)
    y = (w * x).sum()
    x.copy_(lib.ones(3))
    y.backward()
    return w.grad


def detach_shares_counter(lib):
    w, x = _w_x(lib)
    y = (w * x).sum()
    x.detach().fill_(2.0)
    y.backward()
    return w.grad


def data_does_not_share_counter(lib):
    # writes through .data are invisible to autograd (and change the gradient), as in torch
    w, x = _w_x(lib)
    y = (w * x).sum()
    x.data.mul_(10)
    y.backward()
    return w.grad


def modify_saved_output_exp(lib):
    w = lib.ones(3, requires_grad=True)
    a = w.exp()
    with lib.no_grad():
        a.mul_(2)
    a.sum().backward()
    return w.grad


def modify_output_of_relu_input(lib):
    # relu reads its output, not its input
    w = lib.tensor([-1.0, 0.5, 2.0], requires_grad=True)
    h = w * 1.0
    y = h.relu().sum()
    with lib.no_grad():
        h.mul_(-1)
    y.backward()
    return w.grad


def matmul_weight_changed(lib):
    # x @ W with x not requiring grad: dW reads x only, so changing W is allowed
    x = lib.ones(2, 3)
    W = lib.ones(3, 4, requires_grad=True)
    y = (x @ W).sum()
    with lib.no_grad():
        W.add_(1)
    y.backward()
    return W.grad


def matmul_input_changed(lib):
    x = lib.ones(2, 3)
    W = lib.ones(3, 4, requires_grad=True)
    y = (x @ W).sum()
    x.add_(1)
    y.backward()
    return W.grad


def optimizer_step_after_backward(lib):
    lin_w = lib.ones(3, requires_grad=True)
    opt = lib.optim.SGD([lin_w], lr=0.1, momentum=0.9)
    for _ in range(3):
        opt.zero_grad()
        (lin_w * lin_w).sum().backward()
        opt.step()
    return lin_w.detach()


def adam_step_after_backward(lib):
    w = lib.ones(3, requires_grad=True)
    opt = lib.optim.Adam([w], lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
    return w.detach()


def optimizer_step_before_backward(lib):
    # stepping between forward and backward changes a tensor the graph reads
    w = lib.ones(3, requires_grad=True)
    w.grad = lib.ones(3)
    opt = lib.optim.SGD([w], lr=0.1)
    y = (w * w).sum()
    opt.step()
    y.backward()
    return w.grad


def adam_step_before_backward(lib):
    w = lib.ones(3, requires_grad=True)
    w.grad = lib.ones(3)
    opt = lib.optim.Adam([w], lr=0.1)
    y = (w * w).sum()
    opt.step()
    y.backward()
    return w.grad


def retain_graph_second_backward_after_write(lib):
    w, x = _w_x(lib)
    y = (w * x).sum()
    y.backward(retain_graph=True)
    x.add_(1)
    y.backward()
    return w.grad


def inplace_on_leaf_requiring_grad(lib):
    w = lib.ones(3, requires_grad=True)
    w.add_(1)
    return w


SCENARIOS = [
    mul_then_modify_input,
    no_grad_modify_leaf_not_read,
    no_grad_modify_leaf_read,
    add_then_modify,
    modify_base_of_saved_view,
    modify_view_of_saved,
    modify_transposed_view,
    setitem_saved,
    fill_copy_saved,
    detach_shares_counter,
    data_does_not_share_counter,
    modify_saved_output_exp,
    modify_output_of_relu_input,
    matmul_weight_changed,
    matmul_input_changed,
    optimizer_step_after_backward,
    adam_step_after_backward,
    optimizer_step_before_backward,
    adam_step_before_backward,
    retain_graph_second_backward_after_write,
    inplace_on_leaf_requiring_grad,
]


def _outcome(fn, lib):
    try:
        return "ok", fn(lib)
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return type(e), str(e)


@pytest.mark.parametrize("fn", SCENARIOS, ids=lambda f: f.__name__)
def test_same_outcome_as_torch(fn):
    kind_t, val_t = _outcome(fn, torch)
    kind_s, val_s = _outcome(fn, sitp)
    assert kind_s == kind_t, (val_t, val_s)
    if kind_t == "ok":
        np.testing.assert_allclose(np.asarray(val_s.detach()), val_t.detach().numpy(), rtol=1e-6)


@pytest.mark.parametrize(
    "fn",
    [f for f in SCENARIOS if "version" in str(_outcome(f, torch)[1])],
    ids=lambda f: f.__name__,
)
def test_message_names_op_tensor_and_versions(fn):
    kind, msg = _outcome(fn, sitp)
    assert kind is RuntimeError
    assert "modified by an inplace operation" in msg
    assert "Backward" in msg and "shape" in msg and "is at version" in msg


def test_version_counts_like_torch():
    for lib in (torch, sitp):
        x = lib.zeros(4)
        v = x[1:3]
        seq = [x._version]
        x.add_(1)
        seq.append(x._version)
        v.mul_(2)
        seq.append(x._version)
        x[0] = 3.0
        seq.append(v._version)
        x.zero_()
        seq.append(x._version)
        seq.append(x.clone()._version)
        seq.append(x.detach()._version)
        if lib is torch:
            expected = seq
        else:
            assert seq == expected
