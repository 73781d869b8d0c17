"""The fused GPU kernels of layer norm and cross-entropy (``sitp.kernels.cuda.fused``, run by
the nodes ``LayerNormGPU`` and ``CrossEntropyGPU`` of ``sitp.nn._functions``), forward and
backward, against sitp's CPU kernels and torch.

Under numba's CUDA simulator every GPU thread is a Python thread, so sizes are tiny, and
most tests shrink the block to 16 threads (``small_blocks``): rows of 37 entries then take
three strides of the block, the last one ragged, and 11 classes leave 5 threads idle.
The test marked ``gpu`` runs realistic sizes on real hardware only.
"""

import math

import numpy as np
import pytest

import sitp
import sitp.nn.functional as F
from helpers import host_device_copies

pytestmark = pytest.mark.skipif(
    not (sitp.cuda.is_available() or sitp.cuda.is_simulated()),
    reason="needs a GPU or NUMBA_ENABLE_CUDASIM=1",
)

torch = pytest.importorskip("torch")
TF = torch.nn.functional

from sitp.kernels.cuda import fused as FG  # noqa: E402  (imports numba after the skip check)
from sitp.nn._functions.cross_entropy import CrossEntropyGPU  # noqa: E402
from sitp.nn._functions.layer_norm import LayerNormGPU  # noqa: E402


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 16 threads, so that short rows still need several strides."""
    monkeypatch.setattr(FG, "NT", 16)


def _x(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _dev(a, grad=False):
    return sitp.tensor(a, device="cuda").detach().requires_grad_(grad)


def _cpu(a, grad=False):
    return sitp.tensor(a).detach().requires_grad_(grad)


def _t(a, grad=False):
    return torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=grad)


def close(got, want, rtol=1e-5, atol=1e-5):
    if isinstance(got, sitp.Tensor):
        assert got.is_cuda, "expected a device tensor"
        got = got.detach().cpu().numpy()
    if isinstance(want, sitp.Tensor):
        want = want.detach().numpy()
    elif isinstance(want, torch.Tensor):
        want = want.detach().numpy()
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# ------------------------------------------------------------------ layer norm
def _layer_norm_three_ways(x, shape, w, b, g):
    """(sitp on the device, sitp on the CPU, torch in float64): (y, dx, dw, db) each."""
    out = []
    for make in (_dev, _cpu):
        xs = make(x, True)
        ws = None if w is None else make(w, True)
        bs = None if b is None else make(b, True)
        y = F.layer_norm(xs, shape, ws, bs)
        if make is _dev:
            assert y.grad_fn.fn is LayerNormGPU  # the fused GPU kernels, not the composition
        y.backward(make(g))
        out.append((y, xs.grad, None if ws is None else ws.grad, None if bs is None else bs.grad))
    xt = _t(x, True)
    wt = None if w is None else _t(w, True)
    bt = None if b is None else _t(b, True)
    yt = TF.layer_norm(xt, shape, wt, bt)
    yt.backward(_t(g))
    out.append((yt, xt.grad, None if wt is None else wt.grad, None if bt is None else bt.grad))
    return out


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_matches_cpu_and_torch(small_blocks, affine):
    R, n = 5, 37  # 37 = 2 * 16 + 5: a ragged last stride
    x = _x(R, n) * 3 + 1
    w, b = (_x(n, seed=1), _x(n, seed=2)) if affine else (None, None)
    dev, cpu, ref = _layer_norm_three_ways(x, (n,), w, b, _x(R, n, seed=3))
    for got, want_cpu, want_ref in zip(dev, cpu, ref):
        if got is None:
            assert want_cpu is None and want_ref is None
            continue
        close(got, want_cpu)
        close(got, want_ref)


def test_layer_norm_weight_only_two_dims_and_a_strided_input(small_blocks):
    x = _x(7, 2, 3).transpose(1, 0, 2)  # (2, 7, 3)
    shape = (7, 3)  # n = 21 over the last two dims
    w = _x(7, 3, seed=4)
    g = _x(2, 7, 3, seed=5)
    xs = sitp.tensor(np.ascontiguousarray(x.transpose(1, 0, 2)), device="cuda").permute(1, 0, 2)
    xs = xs.detach().requires_grad_()  # a non-contiguous device tensor
    ws = _dev(w, True)
    y = F.layer_norm(xs, shape, ws, None)
    assert y.grad_fn.fn is LayerNormGPU
    y.backward(_dev(g))
    xt, wt = _t(x, True), _t(w, True)
    yt = TF.layer_norm(xt, shape, wt, None)
    yt.backward(_t(g))
    close(y, yt)
    close(xs.grad, xt.grad)
    close(ws.grad, wt.grad)


def test_layer_norm_default_block_and_float64():
    """The block size the model code gets (64 threads for 37 entries), in float64."""
    x, w, b, g = _x(3, 37, dtype=np.float64), _x(37, seed=1), _x(37, seed=2), _x(3, 37, seed=3)
    xs, ws, bs = _dev(x, True), _dev(w, True), _dev(b, True)
    y = F.layer_norm(xs, 37, ws, bs)
    assert y.dtype is sitp.float64 and y.grad_fn.fn is LayerNormGPU
    y.backward(_dev(g, False).double())
    xt, wt, bt = _t(x, True), _t(w, True), _t(b, True)
    TF.layer_norm(xt, (37,), wt, bt).backward(_t(g))
    close(y, TF.layer_norm(xt, (37,), wt, bt), rtol=1e-10, atol=1e-10)
    close(xs.grad, xt.grad, rtol=1e-10, atol=1e-10)
    close(ws.grad, wt.grad, rtol=1e-5, atol=1e-5)  # the weight's gradient is float32
    close(bs.grad, bt.grad, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ cross-entropy
CONFIGS = {  # (label smoothing, class weights?)
    "plain": (0.0, False),
    "smoothing": (0.1, False),
    "weights": (0.0, True),
    "smoothing+weights": (0.2, True),
}


def _cross_entropy_three_ways(z, target, weight, ignore_index, eps, reduction, g=None):
    out = []
    for make in (_dev, _cpu):
        zs = make(z, True)
        ts = sitp.tensor(target, device="cuda") if make is _dev else sitp.tensor(target)
        ws = None if weight is None else make(weight)
        loss = F.cross_entropy(
            zs, ts, ws, ignore_index=ignore_index, reduction=reduction, label_smoothing=eps
        )
        if make is _dev:
            node = loss.grad_fn
            if reduction == "none":  # reshaped to the batch shape: a view
                node = node.inputs[0].grad_fn
            assert node.fn is CrossEntropyGPU
        loss.backward(None if g is None else make(g))
        out.append((loss, zs.grad))
    zt = _t(z, True)
    loss = TF.cross_entropy(
        zt,
        torch.tensor(target),
        None if weight is None else _t(weight),
        ignore_index=ignore_index,
        reduction=reduction,
        label_smoothing=eps,
    )
    loss.backward(None if g is None else _t(g))
    out.append((loss, zt.grad))
    return out


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_cross_entropy_matches_cpu_and_torch(small_blocks, config, reduction):
    R, C = 4, 11  # 11 classes: a block of 16 with 5 idle
    eps, weighted = CONFIGS[config]
    z = _x(R, C) * 2
    target = np.array([3, -100, 10, 0])  # row 1 is ignored
    weight = np.random.default_rng(1).uniform(0.5, 2.0, C).astype(np.float32) if weighted else None
    g = _x(R, seed=2) if reduction == "none" else None
    (dl, dz), (cl, cz), (tl, tz) = _cross_entropy_three_ways(
        z, target, weight, -100, eps, reduction, g
    )
    assert dl.shape == cl.shape
    close(dl, cl)
    close(dl, tl)
    close(dz, cz, atol=1e-6)
    close(dz, tz, atol=1e-6)
    assert not dz.cpu().numpy()[1].any()  # the ignored row gets no gradient


def test_cross_entropy_long_rows_spatial_input_and_custom_ignore_index(small_blocks):
    """(N, C, d) logits (the permuted path), 37 classes (three strides of 16),
    ignore_index=2 (a valid class index that now means "skip")."""
    z = _x(2, 37, 3)
    target = np.array([[2, 36, 0], [5, 2, 17]])
    (dl, dz), (cl, cz), (tl, tz) = _cross_entropy_three_ways(z, target, None, 2, 0.05, "mean")
    close(dl, cl)
    close(dl, tl)
    close(dz, cz, atol=1e-6)
    close(dz, tz, atol=1e-6)


def test_cross_entropy_every_row_ignored(small_blocks):
    z = _x(3, 5)
    zs = _dev(z, True)
    loss = F.cross_entropy(zs, sitp.tensor([-100, -100, -100], device="cuda"))
    loss.backward()
    assert math.isnan(loss.item())  # 0 / 0, as on the CPU and in torch
    assert not zs.grad.cpu().numpy().any()
    total = F.cross_entropy(_dev(z), sitp.tensor([-100] * 3, device="cuda"), reduction="sum")
    assert total.item() == 0.0


def test_cross_entropy_bad_target_raises_at_the_next_sync(small_blocks):
    loss = F.cross_entropy(_dev(_x(2, 5)), sitp.tensor([1, 5], device="cuda"))  # no sync here
    with pytest.raises(IndexError, match="out of range"):
        loss.item()
    ok = F.cross_entropy(_dev(_x(2, 5)), sitp.tensor([1, 4], device="cuda"))  # the flag was reset
    assert math.isfinite(ok.item())


def test_probability_targets_still_take_the_composition(small_blocks):
    z, p = _x(3, 5), np.random.default_rng(3).dirichlet(np.ones(5), 3).astype(np.float32)
    zs = _dev(z, True)
    loss = F.cross_entropy(zs, _dev(p), label_smoothing=0.1)
    assert loss.grad_fn is not None and loss.grad_fn.fn is not CrossEntropyGPU
    loss.backward()
    zt = _t(z, True)
    lt = TF.cross_entropy(zt, _t(p), label_smoothing=0.1)
    lt.backward()
    close(loss, lt)
    close(zs.grad, zt.grad, atol=1e-6)


def test_no_data_crosses_the_bus_in_forward_or_backward(small_blocks, monkeypatch):
    """After a warm-up (device constants, the error flag), layer norm and cross-entropy,
    forward and backward, copy nothing between host and device."""

    x = _dev(_x(3, 7), True)
    w, b = _dev(_x(7, seed=1), True), _dev(_x(7, seed=2), True)
    cw = _dev(np.linspace(0.5, 1.5, 7).astype(np.float32))
    t = sitp.tensor([1, -100, 6], device="cuda")

    def step():
        h = F.layer_norm(x, (7,), w, b)
        loss = F.cross_entropy(h, t, cw, label_smoothing=0.1)
        loss.backward()
        return loss

    step()
    copies = host_device_copies(monkeypatch, type(x._storage))
    loss = step()
    assert copies == []
    monkeypatch.undo()
    assert math.isfinite(loss.item())


def test_block_size_covers_short_rows_with_a_warp_and_caps_long_ones():
    assert FG.block_size(4) == 32 and FG.block_size(37) == 64 and FG.block_size(128) == 128
    assert FG.block_size(50257) == FG.NT and FG.block_size(37, nt=16) == 16


# ------------------------------------------------------------------ real hardware only
@pytest.mark.gpu
def test_layer_norm_and_cross_entropy_at_gpt_sizes_against_torch():
    """4096 rows of 768 features (layer norm) and 4096 rows of GPT-2's 50257 classes."""
    R, n, C = 4096, 768, 50257
    x, w, b, g = _x(R, n) * 2 + 0.5, _x(n, seed=1), _x(n, seed=2), _x(R, n, seed=3)
    xs, ws, bs = _dev(x, True), _dev(w, True), _dev(b, True)
    y = F.layer_norm(xs, (n,), ws, bs)
    assert y.grad_fn.fn is LayerNormGPU
    y.backward(_dev(g))
    xt, wt, bt = _t(x, True), _t(w, True), _t(b, True)
    yt = TF.layer_norm(xt, (n,), wt, bt)
    yt.backward(_t(g))
    close(y, yt, rtol=1e-4, atol=1e-4)
    close(xs.grad, xt.grad, rtol=1e-3, atol=1e-4)
    close(ws.grad, wt.grad, rtol=1e-3, atol=1e-2)
    close(bs.grad, bt.grad, rtol=1e-3, atol=1e-2)

    z = _x(R, C, seed=4) * 3
    target = np.random.default_rng(5).integers(0, C, R)
    target[::7] = -100
    cw = np.random.default_rng(6).uniform(0.5, 2.0, C).astype(np.float32)
    zs = _dev(z, True)
    loss = F.cross_entropy(zs, sitp.tensor(target, device="cuda"), _dev(cw), label_smoothing=0.1)
    assert loss.grad_fn.fn is CrossEntropyGPU
    loss.backward()
    zt = _t(z, True)
    lt = TF.cross_entropy(zt, torch.tensor(target), _t(cw), label_smoothing=0.1)
    lt.backward()
    close(loss, lt, rtol=1e-4, atol=1e-4)
    close(zs.grad, zt.grad, rtol=1e-3, atol=1e-8)
