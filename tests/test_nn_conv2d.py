"""The image layers of sitp.nn against torch 2.13: conv2d, the poolings, batch norm 2-D,
channel dropout, interpolation and Embedding.from_pretrained. Same inputs and weights,
forward values and the gradients of inputs and parameters, odd sizes (N=3, C=6, H=7,
W=9), float64 (and float32 for conv2d), torch's errors."""

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import sitp
from helpers import np_of
from sitp import nn
from sitp.nn import functional as F

TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-10, atol=1e-11)}


def rng(seed):
    return np.random.default_rng(seed)


def close(s, t, dt=np.float64):
    tt = t.detach().numpy()
    ss = np_of(s)
    assert ss.shape == tt.shape, f"shape {ss.shape} vs torch {tt.shape}"
    if np.issubdtype(tt.dtype, np.integer):
        np.testing.assert_array_equal(ss, tt)
    else:
        np.testing.assert_allclose(ss, tt, **TOL[np.dtype(dt).type])


def both(sfn, tfn, arrays, dt=np.float64):
    """sitp and torch on the same arrays (None stays None): outputs, then the gradients of
    every array for a random upstream gradient."""
    arrays = [None if a is None else a.astype(dt) for a in arrays]
    s_in = [None if a is None else sitp.tensor(a, requires_grad=True) for a in arrays]
    t_in = [None if a is None else torch.tensor(a, requires_grad=True) for a in arrays]
    s_out, t_out = sfn(*s_in), tfn(*t_in)
    close(s_out, t_out, dt)
    g = rng(123).standard_normal(tuple(t_out.shape)).astype(dt)
    s_out.backward(sitp.tensor(g))
    t_out.backward(torch.tensor(g))
    for s, t in zip(s_in, t_in):
        if t is not None:
            close(s.grad, t.grad, dt)


def copy_params(src_torch, dst_sitp):
    for name, p in src_torch.named_parameters():
        getattr(dst_sitp, name).data = sitp.tensor(p.detach().numpy().copy())


# ------------------------------------------------------------------ conv2d
@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize(
    "stride, padding, dilation, groups",
    [
        (1, 0, 1, 1),
        (2, 1, 1, 1),
        (1, 1, 2, 1),
        ((2, 1), (0, 2), (1, 2), 1),
        (1, "same", 2, 1),
        (1, "valid", 1, 1),
        (2, 1, 1, 2),
        (1, 2, 2, 3),
        (1, 1, 1, 6),  # depthwise
    ],
)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_matches_torch(dt, stride, padding, dilation, groups, bias):
    r = rng(1)
    x = r.standard_normal((3, 6, 7, 9))
    w = r.standard_normal((12, 6 // groups, 3, 3))
    b = r.standard_normal(12) if bias else None
    both(
        lambda x, w, b: F.conv2d(x, w, b, stride, padding, dilation, groups),
        lambda x, w, b: TF.conv2d(x, w, b, stride, padding, dilation, groups),
        [x, w, b],
        dt,
    )


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")  # torch's note
def test_conv2d_even_kernel_same_and_unbatched():
    r = rng(2)
    x, w = r.standard_normal((3, 5, 8)), r.standard_normal((4, 3, 2, 4))
    both(
        lambda x, w: F.conv2d(x, w, padding="same"),
        lambda x, w: TF.conv2d(x, w, padding="same"),
        [x, w],
    )
    both(
        lambda x, w: F.conv2d(x, w, stride=(1, 2), dilation=(2, 1)),
        lambda x, w: TF.conv2d(x, w, stride=(1, 2), dilation=(2, 1)),
        [x, w],
    )


def test_conv2d_gradcheck_finite_differences():
    r = rng(3)
    x = sitp.tensor(r.standard_normal((2, 4, 5, 6)), requires_grad=True)
    w = sitp.tensor(r.standard_normal((4, 2, 3, 2)), requires_grad=True)
    b = sitp.tensor(r.standard_normal(4), requires_grad=True)
    assert sitp.autograd.gradcheck(
        lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=2), (x, w, b)
    )


@pytest.mark.parametrize("padding_mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize(
    "kw",
    [dict(padding=1), dict(padding="same", dilation=2), dict(stride=2, padding=(2, 1), groups=2)],
)
def test_conv2d_module_matches_torch(padding_mode, kw):
    torch.manual_seed(0)
    tc = torch.nn.Conv2d(4, 6, 3, padding_mode=padding_mode, dtype=torch.float64, **kw)
    sc = nn.Conv2d(4, 6, 3, padding_mode=padding_mode, dtype=sitp.float64, **kw)
    assert [n for n, _ in sc.named_parameters()] == [n for n, _ in tc.named_parameters()]
    assert tuple(sc.weight.shape) == tuple(tc.weight.shape)
    copy_params(tc, sc)
    x = rng(4).standard_normal((3, 4, 7, 9))
    xs, xt = sitp.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ys, yt = sc(xs), tc(xt)
    close(ys, yt)
    ys.square().sum().backward()
    yt.square().sum().backward()
    close(xs.grad, xt.grad)
    close(sc.weight.grad, tc.weight.grad)
    close(sc.bias.grad, tc.bias.grad)


def test_conv2d_init_has_torchs_bounds():
    sitp.manual_seed(0)
    c = nn.Conv2d(8, 16, (3, 5), bias=True)
    bound = 1 / np.sqrt(8 * 3 * 5)  # kaiming_uniform(a=sqrt 5) and the bias: 1/sqrt(fan_in)
    w, b = c.weight.detach().numpy(), c.bias.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert np.abs(b).max() <= bound
    assert nn.Conv2d(2, 2, 1, bias=False).bias is None


def test_conv2d_errors_like_torch():
    x = sitp.randn(2, 5, 7, 9)
    with pytest.raises(RuntimeError, match=r"Expected 3D \(unbatched\) or 4D \(batched\) input"):
        F.conv2d(sitp.randn(2, 3), sitp.randn(4, 3, 3, 3))
    with pytest.raises(RuntimeError, match=r"to have 3 channels, but got 5 channels instead"):
        F.conv2d(x, sitp.randn(4, 3, 3, 3))
    with pytest.raises(RuntimeError, match=r"Kernel size can't be greater than actual input"):
        F.conv2d(sitp.randn(2, 5, 2, 2), sitp.randn(4, 5, 3, 3))
    with pytest.raises(RuntimeError, match=r"expected weight to be divisible by 2"):
        F.conv2d(x, sitp.randn(5, 5, 3, 3), groups=2)
    with pytest.raises(RuntimeError, match=r"not supported for strided convolutions"):
        F.conv2d(x, sitp.randn(4, 5, 3, 3), stride=2, padding="same")
    with pytest.raises(RuntimeError, match=r"expected bias to be 1-dimensional with 4 elements"):
        F.conv2d(x, sitp.randn(4, 5, 3, 3), sitp.randn(3))
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        nn.Conv2d(5, 4, 3, groups=2)
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        nn.Conv2d(4, 4, 3, padding_mode="mirror")


# ----------------------------------------------------------------- pooling
@pytest.mark.parametrize(
    "kernel, stride, padding, dilation, ceil_mode",
    [
        (2, None, 0, 1, False),
        (3, 2, 1, 1, False),
        (3, 2, 1, 1, True),
        ((3, 2), (2, 3), (1, 0), 1, True),
        (3, 1, 1, 2, False),
        (2, 2, 1, 2, True),
    ],
)
def test_max_pool2d_matches_torch(kernel, stride, padding, dilation, ceil_mode):
    x = rng(5).standard_normal((3, 5, 7, 9))
    args = (kernel, stride, padding, dilation)
    both(
        lambda x: F.max_pool2d(x, *args, ceil_mode=ceil_mode),
        lambda x: TF.max_pool2d(x, *args, ceil_mode=ceil_mode),
        [x],
    )
    (vs, is_), (vt, it) = (
        F.max_pool2d(sitp.tensor(x), *args, ceil_mode=ceil_mode, return_indices=True),
        TF.max_pool2d(torch.tensor(x), *args, ceil_mode=ceil_mode, return_indices=True),
    )
    close(vs, vt)
    close(is_, it)
    sm = nn.MaxPool2d(kernel, stride, padding, dilation, return_indices=True, ceil_mode=ceil_mode)
    close(
        sm(sitp.tensor(x[0]))[1],
        TF.max_pool2d(torch.tensor(x[0]), *args, ceil_mode=ceil_mode, return_indices=True)[1],
    )


@pytest.mark.parametrize(
    "kernel, stride, padding, ceil_mode, count_include_pad, divisor",
    [
        (2, None, 0, False, True, None),
        (3, 2, 1, False, True, None),
        (3, 2, 1, True, True, None),
        (3, 2, 1, True, False, None),
        ((3, 2), (2, 3), (1, 1), True, False, None),
        (3, 2, 1, False, True, 4),
    ],
)
def test_avg_pool2d_matches_torch(kernel, stride, padding, ceil_mode, count_include_pad, divisor):
    x = rng(6).standard_normal((3, 5, 7, 9))
    args = (kernel, stride, padding, ceil_mode, count_include_pad, divisor)
    both(lambda x: F.avg_pool2d(x, *args), lambda x: TF.avg_pool2d(x, *args), [x])
    both(lambda x: nn.AvgPool2d(*args)(x), lambda x: torch.nn.AvgPool2d(*args)(x), [x[1]])


@pytest.mark.parametrize("size", [1, (3, 4), (7, None), (10, 12), (4, 9)])
def test_adaptive_avg_pool2d_matches_torch(size):
    x = rng(7).standard_normal((3, 5, 7, 9))
    both(
        lambda x: nn.AdaptiveAvgPool2d(size)(x),
        lambda x: torch.nn.AdaptiveAvgPool2d(size)(x),
        [x],
    )


def test_pooling_errors_like_torch():
    x = sitp.randn(2, 5, 7, 9)
    with pytest.raises(RuntimeError, match="pad should be at most half of effective kernel"):
        F.max_pool2d(x, 3, padding=2)
    with pytest.raises(RuntimeError, match="pad should be at most half of effective kernel"):
        F.avg_pool2d(x, 3, padding=2)
    with pytest.raises(RuntimeError, match=r"Calculated output size: \(5x0x0\)"):
        F.max_pool2d(sitp.randn(2, 5, 1, 1), 3)
    with pytest.raises(RuntimeError, match=r"3D \(unbatched\) or 4D \(batched\)"):
        F.max_pool2d(sitp.randn(5, 1), 3)
    with pytest.raises(RuntimeError, match=r"Expected 3D or 4D tensor, but got \[5, 1\]"):
        F.adaptive_avg_pool2d(sitp.randn(5, 1), 3)


# ------------------------------------------------------------- BatchNorm2d
@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(momentum=0.3, eps=1e-3),
        dict(momentum=None),
        dict(affine=False),
        dict(track_running_stats=False),
    ],
)
def test_batchnorm2d_train_and_eval_match_torch(kw):
    torch.manual_seed(0)
    tb = torch.nn.BatchNorm2d(5, dtype=torch.float64, **kw)
    sb = nn.BatchNorm2d(5, dtype=sitp.float64, **kw)
    assert list(sb.state_dict()) == list(tb.state_dict())
    if tb.affine:  # weights other than 1, 0
        with torch.no_grad():
            tb.weight.uniform_(0.5, 1.5)
            tb.bias.uniform_(-1, 1)
        copy_params(tb, sb)
    r = rng(8)
    for step in range(3):
        x = r.normal(1.0, 2.0, size=(3, 5, 7, 9))
        both(lambda x: sb(x), lambda x: tb(x), [x])
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        if getattr(tb, name) is None:
            assert getattr(sb, name) is None
        else:
            close(getattr(sb, name), getattr(tb, name))
    if tb.affine:
        for name in ("weight", "bias"):  # accumulated over the three steps
            close(getattr(sb, name).grad, getattr(tb, name).grad)
    sb.eval()
    tb.eval()
    x = r.normal(size=(2, 5, 3, 4))
    both(lambda x: sb(x), lambda x: tb(x), [x])


def test_batchnorm_errors_like_torch():
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input\)"):
        nn.BatchNorm2d(5)(sitp.randn(2, 5, 3))
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        nn.BatchNorm2d(5)(sitp.randn(1, 5, 1, 1))
    with pytest.raises(ValueError, match=r"expected input of shape \(N, 4, H, W\)"):
        nn.BatchNorm2d(4)(sitp.randn(2, 5, 3, 3))
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        nn.BatchNorm1d(4)(sitp.randn(2, 4, 3, 3))
    with pytest.raises(RuntimeError, match="running_mean should contain 5 elements not 4"):
        F.batch_norm(sitp.randn(2, 5, 3, 3), sitp.zeros(4), sitp.ones(4))


def test_functional_batch_norm_matches_torch():
    r = rng(9)
    x, w, b = r.standard_normal((4, 3, 5)), r.random(3) + 0.5, r.standard_normal(3)
    for training in (True, False):
        rm, rv = r.standard_normal(3), r.random(3) + 0.5
        srm, srv, trm, trv = sitp.tensor(rm), sitp.tensor(rv), torch.tensor(rm), torch.tensor(rv)
        both(
            lambda x, w, b: F.batch_norm(x, srm, srv, w, b, training, 0.2, 1e-4),
            lambda x, w, b: TF.batch_norm(x, trm, trv, w, b, training, 0.2, 1e-4),
            [x, w, b],
        )
        close(srm, trm)
        close(srv, trv)


# --------------------------------------------------------------- Dropout2d
def test_dropout2d_zeroes_whole_channels_and_scales():
    sitp.manual_seed(0)
    x = sitp.ones(40, 30, 4, 5)
    d = nn.Dropout2d(0.4)
    y = d(x).numpy()
    per_plane = y.reshape(40, 30, -1)
    assert np.all(per_plane.min(-1) == per_plane.max(-1))  # a plane is all kept or all zero
    kept = per_plane[:, :, 0] != 0
    np.testing.assert_allclose(per_plane[kept], 1 / 0.6)
    assert abs(kept.mean() - 0.6) < 0.05  # 1200 channels: sd of the mean 0.014
    d.eval()
    assert d(x) is x
    assert np.all(F.dropout2d(x, 1.0).numpy() == 0)
    with pytest.warns(UserWarning, match="Received a 3D input to dropout2d"):
        y3 = F.dropout2d(sitp.ones(6, 8, 10), 0.5).numpy()
    assert np.all(y3.min(-1) == y3.max(-1))  # taken as (N, C, L)
    with pytest.raises(ValueError, match="between 0 and 1, but got 1.5"):
        nn.Dropout2d(1.5)
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        F.dropout2d(sitp.ones(3))


def test_dropout2d_gradient_is_the_mask():
    sitp.manual_seed(1)
    x = sitp.tensor(rng(10).standard_normal((4, 6, 3, 3)), requires_grad=True)
    y = F.dropout2d(x, 0.5)
    y.sum().backward()
    ratio = np.where(x.detach().numpy() != 0, y.detach().numpy() / x.detach().numpy(), 0)
    np.testing.assert_allclose(x.grad.numpy(), ratio, atol=1e-12)


# ------------------------------------------------------------- interpolate
@pytest.mark.parametrize(
    "kw",
    [
        dict(scale_factor=2),
        dict(scale_factor=1.7),
        dict(size=(5, 13)),
        dict(size=(14, 4)),
        dict(scale_factor=(0.6, 2.5)),
        dict(size=(11, 10), mode="nearest-exact"),
        dict(scale_factor=2, mode="bilinear"),
        dict(scale_factor=1.7, mode="bilinear"),
        dict(size=(5, 13), mode="bilinear"),
        dict(size=(5, 13), mode="bilinear", align_corners=True),
        dict(size=(1, 20), mode="bilinear", align_corners=True),
        dict(scale_factor=0.5, mode="bilinear", align_corners=False),
        dict(scale_factor=1.7, mode="bilinear", recompute_scale_factor=True),
    ],
)
def test_interpolate_2d_matches_torch(kw):
    x = rng(11).standard_normal((3, 2, 7, 9))
    both(lambda x: F.interpolate(x, **kw), lambda x: TF.interpolate(x, **kw), [x])
    both(lambda x: nn.Upsample(**kw)(x), lambda x: torch.nn.Upsample(**kw)(x), [x])


@pytest.mark.parametrize(
    "kw",
    [
        dict(size=13),
        dict(scale_factor=0.7),
        dict(size=13, mode="linear"),
        dict(size=4, mode="linear", align_corners=True),
    ],
)
def test_interpolate_1d_matches_torch(kw):
    x = rng(12).standard_normal((3, 2, 9))
    both(lambda x: F.interpolate(x, **kw), lambda x: TF.interpolate(x, **kw), [x])


def test_upsampling_modules_and_interpolate_errors():
    x = rng(13).standard_normal((2, 3, 4, 5))
    for name in ("UpsamplingNearest2d", "UpsamplingBilinear2d"):
        both(
            lambda x: getattr(nn, name)(scale_factor=2)(x),
            lambda x: getattr(torch.nn, name)(scale_factor=2)(x),
            [x],
        )
    s = sitp.tensor(x)
    with pytest.raises(ValueError, match="only one of size or scale_factor should be defined"):
        F.interpolate(s, size=(3, 4), scale_factor=2)
    with pytest.raises(ValueError, match="either size or scale_factor should be defined"):
        F.interpolate(s, mode="bilinear")
    with pytest.raises(NotImplementedError, match="Got 3D input, but bilinear mode needs 4D"):
        F.interpolate(sitp.randn(2, 3, 4), size=5, mode="bilinear")
    with pytest.raises(ValueError, match="align_corners option can only be set"):
        F.interpolate(s, size=5, align_corners=True)
    with pytest.raises(NotImplementedError, match="bicubic"):
        F.interpolate(s, size=5, mode="bicubic")


# ------------------------------------------------------------------ Embedding
@pytest.mark.parametrize("freeze", [True, False])
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_embedding_from_pretrained_matches_torch(freeze, padding_idx):
    table = rng(14).standard_normal((5, 3))
    se = nn.Embedding.from_pretrained(sitp.tensor(table), freeze=freeze, padding_idx=padding_idx)
    te = torch.nn.Embedding.from_pretrained(
        torch.tensor(table), freeze=freeze, padding_idx=padding_idx
    )
    assert se.weight.requires_grad == te.weight.requires_grad == (not freeze)
    assert se.padding_idx == te.padding_idx
    idx = np.array([[0, 2, 4], [2, 1, 4]])
    ys, yt = se(sitp.tensor(idx)), te(torch.tensor(idx))
    close(ys, yt)
    if not freeze:
        ys.square().sum().backward()
        yt.square().sum().backward()
        close(se.weight.grad, te.weight.grad)  # no gradient into the padding row


def test_embedding_padding_idx_gets_no_gradient_and_errors():
    torch.manual_seed(0)
    te = torch.nn.Embedding(6, 4, padding_idx=1, dtype=torch.float64)
    se = nn.Embedding(6, 4, padding_idx=1, dtype=sitp.float64)
    assert np.all(se.weight.detach().numpy()[1] == 0)
    se.weight.data = sitp.tensor(te.weight.detach().numpy().copy())
    idx = np.array([1, 3, 1, 5])
    ys, yt = se(sitp.tensor(idx)), te(torch.tensor(idx))
    (ys * 2).sum().backward()
    (yt * 2).sum().backward()
    close(se.weight.grad, te.weight.grad)
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        nn.Embedding(3, 2, padding_idx=-4)
    with pytest.raises(AssertionError, match="expected to be 2-dimensional"):
        nn.Embedding.from_pretrained(sitp.randn(3))


def test_module_paths_are_torchs():
    assert nn.Conv2d.__module__ == "sitp.nn.modules.conv"
    assert nn.MaxPool2d.__module__ == "sitp.nn.modules.pooling"
    assert nn.BatchNorm2d.__module__ == "sitp.nn.modules.normalization"
    assert nn.Upsample.__module__ == "sitp.nn.modules.upsampling"
    assert nn.Dropout2d.__module__ == "sitp.nn.modules.dropout"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.MaxPool2d(2))(
            sitp.randn(2, 1, 8, 8)
        )


def test_image_layers_on_a_device_match_the_cpu():
    """Built with device='cuda' (numba's simulator when no GPU answers), the layers put
    their parameters and buffers there and compute what they compute on the CPU."""
    # small: the simulator runs each CUDA thread in Python (odd sizes all the same)
    x = rng(15).standard_normal((2, 2, 5, 3)).astype(np.float32)

    def build(device):
        sitp.manual_seed(0)
        return nn.Sequential(
            nn.Conv2d(2, 3, 3, padding=1, groups=1, device=device),
            nn.BatchNorm2d(3, device=device),
            nn.ReLU(),
            nn.MaxPool2d(2, ceil_mode=True),
            nn.Upsample(scale_factor=2, mode="bilinear"),
            nn.AvgPool2d(2, padding=1),
        )

    mc, md = build("cpu"), build("cuda")
    assert all(t.device.type == "cuda" for t in [*md.parameters(), *md.buffers()])
    xc = sitp.tensor(x, requires_grad=True)
    xd = sitp.tensor(x, device="cuda", requires_grad=True)
    yc, yd = mc(xc), md(xd)
    assert yd.device.type == "cuda"
    np.testing.assert_allclose(yd.detach().cpu().numpy(), np_of(yc), rtol=1e-5, atol=1e-6)
    yc.square().sum().backward()
    yd.square().sum().backward()
    np.testing.assert_allclose(xd.grad.cpu().numpy(), np_of(xc.grad), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        md[0].weight.grad.cpu().numpy(), np_of(mc[0].weight.grad), rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(md[1].running_var.cpu().numpy(), np_of(mc[1].running_var), rtol=1e-6)
    _, idx_d = F.max_pool2d(xd, 3, 2, 1, return_indices=True)
    _, idx_c = F.max_pool2d(xc, 3, 2, 1, return_indices=True)
    np.testing.assert_array_equal(idx_d.cpu().numpy(), np_of(idx_c))
