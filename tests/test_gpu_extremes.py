"""The CUDA backend's (log-)softmax and the fused GPU cross-entropy at float32's extremes
(values up to +-3e38, signed zeros, subnormals, rows of -inf), forward and backward,
against torch on the CPU. Run under the simulator (NUMBA_ENABLE_CUDASIM=1) at tiny sizes,
or on a GPU. The CPU kernels get the same rows, and hypothesis, in
``test_numerics_extremes.py``."""

import math

import numpy as np
import pytest

import sitp
import sitp.nn.functional as F

pytestmark = pytest.mark.skipif(
    not (sitp.cuda.is_available() or sitp.cuda.is_simulated()),
    reason="needs a GPU or NUMBA_ENABLE_CUDASIM=1",
)

torch = pytest.importorskip("torch")
TF = torch.nn.functional

from sitp.kernels.cuda import fused as FG  # noqa: E402  (imports numba after the skip check)
from sitp.nn._functions import cross_entropy as CE  # noqa: E402
from test_numerics_extremes import close  # noqa: E402

INF = math.inf
ROWS = [
    [[1e20, 1e20, 1e20], [0.5, -1.0, 2.0]],
    [[3e38, 3e38, 3e38], [-3e38, -3e38, -3e38]],
    [[3e38, -3e38, 0.0], [1e8 + 1.0, 1e8, 1e8 - 3.0]],
    [[-INF, -INF, -INF], [-INF, 0.0, 1.0]],
    [[-INF, 3e38, 3e38], [INF, 0.0, 1.0]],
    [[0.0, -0.0, 1e-45], [-1e20, -1e20 + 1e13, -1e20]],
]


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(FG, "NT", 16)


def _both(x):
    return (sitp.tensor(x, device="cuda").requires_grad_(True), torch.tensor(x, requires_grad=True))


@pytest.mark.parametrize("rows", ROWS, ids=range(len(ROWS)))
@pytest.mark.parametrize("name", ["log_softmax", "softmax"])
def test_softmax_rows_on_the_device(rows, name):
    x = np.array(rows, np.float32)
    g = np.array([[1.0, -0.5, 2.0], [0.25, 1.0, -1.0]], np.float32)
    xs, xt = _both(x)
    ys, yt = getattr(xs, name)(1), getattr(xt, name)(1)
    assert ys.is_cuda
    close(ys.detach().cpu().numpy(), yt.detach().numpy())
    ys.backward(sitp.tensor(g, device="cuda"))
    yt.backward(torch.tensor(g))
    close(xs.grad.cpu().numpy(), xt.grad.numpy(), atol=1e-5)


@pytest.mark.parametrize("rows", ROWS, ids=range(len(ROWS)))
def test_logsumexp_on_the_device(rows):
    x = np.array(rows, np.float32)
    close(
        sitp.tensor(x, device="cuda").logsumexp(1).cpu().numpy(),
        torch.tensor(x).logsumexp(1).numpy(),
    )


@pytest.mark.parametrize("rows", ROWS, ids=range(len(ROWS)))
@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_fused_cross_entropy_on_the_device(small_blocks, rows, eps, reduction):
    x = np.array(rows, np.float32)
    target = np.array([0, 2])
    xs, xt = _both(x)
    ts = sitp.tensor(target, device="cuda")
    assert CE.gpu_fits(xs, ts, None)  # the fused kernel, not composed ops
    ls = F.cross_entropy(xs, ts, label_smoothing=eps, reduction=reduction)
    lt = TF.cross_entropy(xt, torch.tensor(target), label_smoothing=eps, reduction=reduction)
    close(ls.detach().cpu().numpy(), lt.detach().numpy())
    ls.sum().backward()
    lt.sum().backward()
    close(xs.grad.cpu().numpy(), xt.grad.numpy(), atol=1e-5)


@pytest.mark.parametrize("offset", [0.0, 1e8, 1e20, -3e38])
def test_attention_on_the_device_with_a_huge_mask_offset(offset):
    rng = np.random.default_rng(0)
    q, k, v = (rng.uniform(-1, 1, (1, 3, 2)).astype(np.float32) for _ in range(3))
    mask = np.array([[0.0, -INF, 0.5], [0.0, 0.0, 0.0], [-1.0, 0.0, -INF]], np.float32)
    mask = (mask + np.float32(offset)).astype(np.float32)
    outs = []
    for lib, f, dev in ((sitp, F, "cuda"), (torch, TF, "cpu")):
        qq, kk, vv = (lib.tensor(a, device=dev).requires_grad_(True) for a in (q, k, v))
        o = f.scaled_dot_product_attention(qq, kk, vv, attn_mask=lib.tensor(mask, device=dev))
        o.sum().backward()
        outs.append([t.detach().cpu().numpy() for t in (o, qq.grad, kk.grad, vv.grad)])
    for a, b in zip(*outs):
        close(a, b, rtol=1e-4, atol=1e-5)
