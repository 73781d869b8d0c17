"""The engine's post-accumulate hooks and end-of-backward callbacks, against torch's.

``sitp.autograd.engine.register_post_accumulate_grad_hook(leaf, hook)`` is torch's
``Tensor.register_post_accumulate_grad_hook``; ``queue_callback`` is torch's
``Variable._execution_engine.queue_callback``. DistributedDataParallel is built on both.
"""

import numpy as np
import pytest
import torch

import sitp
from sitp.autograd import engine


def _graph(lib, w, b):
    """A leaf used three times (w) and one used once (b); the loss is a scalar."""
    h = (w * w).sum() + (w * 3.0).sum()
    return h + (b * w[:2]).sum()


def _record(lib, register, queue):
    w = lib.tensor([0.5, -1.0, 2.0], dtype=lib.float64, requires_grad=True)
    b = lib.tensor([1.0, 4.0], dtype=lib.float64, requires_grad=True)
    events = []
    register(w, lambda p: events.append(("w", p.grad.numpy().copy())))
    register(b, lambda p: events.append(("b", p.grad.numpy().copy())))
    register(b, lambda p: queue(lambda: events.append(("end", None))))
    _graph(lib, w, b).backward()
    return events


def test_hooks_fire_once_with_the_whole_gradient_like_torch():
    theirs = _record(
        torch,
        lambda t, h: t.register_post_accumulate_grad_hook(h),
        torch.autograd.Variable._execution_engine.queue_callback,
    )
    ours = _record(sitp, engine.register_post_accumulate_grad_hook, engine.queue_callback)
    # each leaf's hook runs once per backward, after its last gradient arrived
    assert sorted(n for n, _ in ours) == sorted(n for n, _ in theirs) == ["b", "end", "w"]
    for name in ("w", "b"):
        (tg,) = [g for n, g in theirs if n == name]
        (sg,) = [g for n, g in ours if n == name]
        np.testing.assert_array_equal(sg, tg)
    # the queued callback runs at the very end, after every hook
    assert ours[-1][0] == theirs[-1][0] == "end"


def test_hooks_see_accumulation_across_passes_and_can_be_removed():
    w = sitp.tensor([1.0, 2.0], dtype=sitp.float64, requires_grad=True)
    seen = []
    handle = engine.register_post_accumulate_grad_hook(w, lambda p: seen.append(p.grad.tolist()))
    (w * w).sum().backward()
    (w * w).sum().backward()  # no zero_grad: the hook sees the sum of both passes
    handle.remove()
    (w * w).sum().backward()
    assert seen == [[2.0, 4.0], [4.0, 8.0]]


def test_hooks_fire_on_a_leaf_root_and_not_in_autograd_grad():
    w = sitp.tensor(3.0, dtype=sitp.float64, requires_grad=True)
    seen = []
    engine.register_post_accumulate_grad_hook(w, lambda p: seen.append(p.grad.item()))
    w.backward()
    assert seen == [1.0]
    (g,) = sitp.autograd.grad(w * w, [w])  # as torch: grad() accumulates nothing, runs no hook
    assert g.item() == 6.0 and seen == [1.0]


def test_refusals_match_torch():
    x = sitp.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="non-leaf"):
        engine.register_post_accumulate_grad_hook(x * 2, lambda p: None)
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        engine.register_post_accumulate_grad_hook(sitp.zeros(2), lambda p: None)
    with pytest.raises(RuntimeError, match="only be installed during backward"):
        engine.queue_callback(lambda: None)
    tx = torch.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="non-leaf"):
        (tx * 2).register_post_accumulate_grad_hook(lambda p: None)
    with pytest.raises(RuntimeError, match="only be installed during backward"):
        torch.autograd.Variable._execution_engine.queue_callback(lambda: None)


def test_tensor_method_is_the_engine_hook():
    """``Tensor.register_post_accumulate_grad_hook`` is torch's method: it fires once per
    backward with the leaf, sees the whole gradient, and its handle removes it."""
    w = sitp.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    handle = w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.tolist()))
    ((w * 3).sum() + (w * w).sum()).backward()
    assert seen == [[5.0, 7.0]]
    handle.remove()
    (w * 3).sum().backward()
    assert seen == [[5.0, 7.0]]
    with pytest.raises(RuntimeError, match="non-leaf"):
        (w * 2).register_post_accumulate_grad_hook(lambda t: None)
