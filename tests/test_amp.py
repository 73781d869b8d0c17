"""``sitp.amp`` against ``torch.amp``: GradScaler's scaling, unscaling, skipped steps and
scale updates step by step; disabled scalers pass through; autocast is accepted."""

import numpy as np
import pytest
import torch

import sitp


def model_and_opt(lib, w0):
    w = lib.nn.Parameter(lib.tensor(w0))
    return w, lib.optim.SGD([w], lr=0.1)


def trajectory(lib, **kwargs):
    """Ten steps of a scaled loss; a loss of inf at steps 3 and 4 (what float16 overflow
    gives); the scale, the weights and the gradients seen after each step."""
    w0 = np.array([0.5, -1.5, 2.0], dtype=np.float64)
    w, opt = model_and_opt(lib, w0)
    scaler = lib.amp.GradScaler("cpu", **kwargs)
    out = []
    for step in range(10):
        opt.zero_grad()
        loss = (w * w * lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64)).sum()
        if step in (3, 4):
            loss = loss * float("inf")
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        grad = w.grad.numpy().copy()
        scaler.step(opt)
        scaler.update()
        out.append((scaler.get_scale(), w.detach().numpy().copy(), grad))
    return out, scaler


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(init_scale=1024.0, growth_interval=2),
        dict(init_scale=8.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=3),
        dict(enabled=False),
    ],
)
def test_grad_scaler_matches_torch_step_by_step(kwargs):
    mine, s = trajectory(sitp, **kwargs)
    theirs, t = trajectory(torch, **kwargs)
    for (ms, mw, mg), (ts, tw, tg) in zip(mine, theirs):
        assert ms == ts
        np.testing.assert_allclose(mw, tw, rtol=1e-15)
        np.testing.assert_allclose(mg, tg, rtol=1e-15)
    assert s.state_dict() == t.state_dict()
    assert s.is_enabled() == t.is_enabled()


def test_scaler_misuse_is_refused_as_in_torch():
    for lib in (sitp, torch):
        w, opt = model_and_opt(lib, [1.0])
        scaler = lib.amp.GradScaler("cpu")
        scaler.scale(w.sum()).backward()
        scaler.unscale_(opt)
        with pytest.raises(RuntimeError, match="already been called"):
            scaler.unscale_(opt)
        scaler.step(opt)
        with pytest.raises(RuntimeError, match="already been called"):
            scaler.step(opt)
        scaler.update()
        with pytest.raises(AssertionError, match="No inf checks"):
            scaler.update()
        one = lib.tensor(1.0)
        assert [x.item() for x in scaler.scale([one, one * 2])] == [2.0**16, 2.0**17]


def test_a_cuda_scaler_without_a_gpu_disables_itself():
    if sitp.cuda.is_available():
        pytest.skip("a GPU is there")
    with pytest.warns(UserWarning):
        scaler = sitp.amp.GradScaler()
    assert not scaler.is_enabled() and scaler.get_scale() == 1.0
    loss = sitp.tensor(2.0)
    assert scaler.scale(loss) is loss


def test_autocast_is_a_region_that_keeps_dtypes():
    x = sitp.ones(2, 3)

    @sitp.amp.autocast("cpu", dtype=sitp.float32)
    def f(a):
        return a @ a.T

    with sitp.amp.autocast(device_type="cpu", enabled=False):
        assert (x @ x.T).dtype is sitp.float32
    assert f(x).dtype is sitp.float32
    for lib in (sitp, torch):
        with pytest.raises(RuntimeError, match="tpu"):
            lib.amp.autocast(device_type="tpu")
