"""``sitp.nn.RMSNorm`` and ``F.rms_norm`` against torch: forward, backward, the default
eps, the module's parameters and repr, central differences, and torch's errors."""

import numpy as np
import pytest
import torch

import sitp
import sitp.nn.functional as F
from helpers import np_of
from sitp.autograd.gradcheck import gradcheck

TF = torch.nn.functional

# (input shape, normalized_shape): one and several normalized dims, odd sizes
SHAPES = [((5, 8), (8,)), ((2, 3, 7), (7,)), ((2, 3, 5), (3, 5)), ((4, 1, 3, 2), (1, 3, 2))]


def _pair(a, requires_grad=True):
    s, t = sitp.tensor(a), torch.tensor(a)
    return s.requires_grad_(requires_grad), t.requires_grad_(requires_grad)


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_weight", [False, True])
@pytest.mark.parametrize("eps", [None, 1e-5])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_forward_and_backward_match_torch(shapes, eps, with_weight, dtype):
    shape, norm = shapes
    r = np.random.default_rng(len(shape) + len(norm))
    xs, xt = _pair(r.standard_normal(shape).astype(dtype))
    ws, wt = (
        _pair((1 + 0.5 * r.standard_normal(norm)).astype(dtype)) if with_weight else (None,) * 2
    )
    ys = F.rms_norm(xs, norm, ws, eps)
    yt = TF.rms_norm(xt, norm, wt, eps)
    assert ys.dtype.np == dtype
    np.testing.assert_allclose(np_of(ys), yt.detach().numpy(), **_tol(dtype))
    g = r.standard_normal(shape).astype(dtype)  # a loss that weights every output differently
    ys.backward(sitp.tensor(g))
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(np_of(xs.grad), xt.grad.numpy(), **_tol(dtype))
    if with_weight:
        np.testing.assert_allclose(np_of(ws.grad), wt.grad.numpy(), **_tol(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_default_eps_is_the_dtypes_machine_epsilon(dtype):
    """Tiny inputs, where eps decides the output: eps=None must be finfo(dtype).eps."""
    x = np.full((2, 3), 1e-4, dtype)
    got = np_of(F.rms_norm(sitp.tensor(x), (3,)))
    want = TF.rms_norm(torch.tensor(x), (3,)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)
    explicit = np_of(F.rms_norm(sitp.tensor(x), (3,), eps=float(np.finfo(dtype).eps)))
    np.testing.assert_array_equal(got, explicit)


def test_output_has_the_inputs_dtype():
    x64 = np.random.default_rng(0).standard_normal((3, 4))
    for x, w in ((x64, np.ones(4, np.float32)), (x64.astype(np.float32), np.ones(4))):
        got = F.rms_norm(sitp.tensor(x), (4,), sitp.tensor(w))
        want = TF.rms_norm(torch.tensor(x), (4,), torch.tensor(w))
        assert got.dtype.np == want.numpy().dtype
        np.testing.assert_allclose(np_of(got), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("with_weight", [False, True])
def test_gradcheck_float64(with_weight):
    r = np.random.default_rng(3)
    x = sitp.tensor(r.standard_normal((3, 2, 5))).requires_grad_()
    w = sitp.tensor(r.standard_normal((2, 5))).requires_grad_()
    if with_weight:
        assert gradcheck(lambda x, w: F.rms_norm(x, (2, 5), w, 1e-6), (x, w))
    else:
        assert gradcheck(lambda x: F.rms_norm(x, (2, 5), None, 1e-6), (x,))


@pytest.mark.parametrize("affine", [True, False])
def test_module_matches_torch(affine):
    kw = dict(eps=1e-6, elementwise_affine=affine)
    ms, mt = sitp.nn.RMSNorm([3, 4], **kw), torch.nn.RMSNorm([3, 4], **kw)
    assert repr(ms) == repr(mt)
    assert [n for n, _ in ms.named_parameters()] == [n for n, _ in mt.named_parameters()]
    assert list(ms.state_dict()) == list(mt.state_dict())
    assert ms.normalized_shape == mt.normalized_shape and ms.eps == mt.eps
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(
        np_of(ms(sitp.tensor(x))), mt(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6
    )
    if affine:
        ys = ms(sitp.tensor(x))
        ys.pow(2).sum().backward()
        mt(torch.tensor(x)).pow(2).sum().backward()
        np.testing.assert_allclose(np_of(ms.weight.grad), mt.weight.grad.numpy(), rtol=1e-5)


def test_module_defaults_dtype_and_reset():
    m = sitp.nn.RMSNorm(5, dtype=sitp.float64)
    assert (
        repr(m) == repr(torch.nn.RMSNorm(5)) == "RMSNorm((5,), eps=None, elementwise_affine=True)"
    )
    assert m.weight.dtype == sitp.float64 and tuple(m.weight.shape) == (5,)
    with sitp.no_grad():
        m.weight.mul_(3.0)
    m.reset_parameters()
    np.testing.assert_array_equal(np_of(m.weight), np.ones(5))


# name: (case taking the library, strings the message must contain)
ERRORS = {
    "input_shape": (lambda L: L.nn.functional.rms_norm(L.ones(3, 4), (5,)), ["[5]", "[3, 4]"]),
    "too_many_dims": (lambda L: L.nn.RMSNorm([2, 3, 4])(L.ones(3, 4)), ["[2, 3, 4]", "[3, 4]"]),
    "weight_shape": (
        lambda L: L.nn.functional.rms_norm(L.ones(3, 4), (4,), L.ones(3)),
        ["[3]", "[4]"],
    ),
    "empty_shape": (lambda L: L.nn.functional.rms_norm(L.ones(3, 4), ()), ["[]"]),
    "integer_input": (
        lambda L: L.nn.functional.rms_norm(L.ones(3, 4, dtype=L.long), (4,)),
        ["rms_norm"],
    ),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_like_torch(name):
    case, names = ERRORS[name]
    with pytest.raises(Exception) as want:
        case(torch)
    with pytest.raises(type(want.value)) as got:
        case(sitp)
    for s in names:
        assert s in str(got.value), (str(got.value), s)


@pytest.mark.parametrize("with_weight", [False, True])
@pytest.mark.parametrize(
    "shape,norm", [((256, 256), (256,)), ((0, 4), (4,)), ((3, 5), (3, 5))], ids=str
)
def test_fused_kernel_on_large_empty_and_strided_input(shape, norm, with_weight):
    """The input is a transposed view (the kernel gets a contiguous copy); 256 x 256
    takes the threaded forward; (0, 4) has no rows."""
    r = np.random.default_rng(5)
    a = r.standard_normal(shape).astype(np.float32)
    xs = sitp.tensor(a.T.copy()).t().requires_grad_()
    xt = torch.tensor(a).requires_grad_()
    w = (1 + r.standard_normal(norm)).astype(np.float32)
    ws, wt = _pair(w) if with_weight else (None, None)
    ys, yt = F.rms_norm(xs, norm, ws), TF.rms_norm(xt, norm, wt)
    if a.size:
        assert "RMSNormBackward" in repr(ys)  # the fused node, not the composition
    g = r.standard_normal(shape).astype(np.float32)
    ys.backward(sitp.tensor(g))
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(np_of(ys), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np_of(xs.grad), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    if with_weight:
        np.testing.assert_allclose(np_of(ws.grad), wt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_fused_kernel_equals_the_composition():
    """A weight of another dtype takes the composed path: the two agree."""
    r = np.random.default_rng(6)
    x, w = r.standard_normal((4, 6)), r.standard_normal(6)
    xs = sitp.tensor(x).requires_grad_()
    fused = F.rms_norm(xs, (6,), sitp.tensor(w))
    composed = F.rms_norm(xs, (6,), sitp.tensor(w.astype(np.float32)))
    assert "RMSNormBackward" in repr(fused) and "RMSNormBackward" not in repr(composed)
    np.testing.assert_allclose(np_of(fused), np_of(composed), rtol=1e-6)
