"""sitp.nn.functional against torch.nn.functional: forward values and gradients,
float32 and float64, odd sizes, hypothesis over shapes, and the error messages."""

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st

import sitp
from helpers import np_of
from sitp.bench import threads
from sitp.kernels.cpu.fused import layer_norm as ln_kernels
from sitp.nn import functional as F

SETTINGS = settings(max_examples=20, deadline=None)
DTYPES = [np.float32, np.float64]
TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-9, atol=1e-10)}


def rng(seed=0):
    return np.random.default_rng(seed)


def close(s, t, dt=np.float64, scale=1.0):
    tol = TOL[np.dtype(dt).type]
    tt = t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    ss = np_of(s) if isinstance(s, sitp.Tensor) else np.asarray(s)
    assert ss.shape == tt.shape, f"shape {ss.shape} vs torch {tt.shape}"
    np.testing.assert_allclose(ss, tt, rtol=tol["rtol"] * scale, atol=tol["atol"] * scale)


def leaves(*arrays, grad=True, frozen=()):
    """The same arrays as sitp and torch leaves (None stays None); float arrays
    require grad unless their position is in ``frozen``."""
    req = [
        grad and a is not None and a.dtype.kind == "f" and i not in frozen
        for i, a in enumerate(arrays)
    ]
    s = [None if a is None else sitp.tensor(a, requires_grad=r) for a, r in zip(arrays, req)]
    t = [None if a is None else torch.tensor(a, requires_grad=r) for a, r in zip(arrays, req)]
    return s, t


def check(fs, ft, arrays, dt, seed=1, scale=1.0, grad=True, frozen=()):
    """Forward and backward (with a random upstream gradient) of fs vs ft on the same
    inputs; the arguments at the positions in ``frozen`` (class weights, which torch
    does not differentiate) take no gradient."""
    s, t = leaves(*arrays, grad=grad, frozen=frozen)
    ys, yt = fs(*s), ft(*t)
    close(ys, yt, dt, scale)
    if not grad:
        return ys, yt
    g = rng(seed).standard_normal(tuple(yt.shape)).astype(dt)
    ys.backward(sitp.tensor(g))
    yt.backward(torch.tensor(g))
    for a, b in zip(s, t):
        if b is not None and b.requires_grad:
            assert (a.grad is None) == (b.grad is None)
            if b.grad is not None:
                close(a.grad, b.grad, dt, scale)
    return ys, yt


# ------------------------------------------------------------------ activations
ACTS = {
    "relu": (F.relu, TF.relu),
    "gelu": (F.gelu, TF.gelu),
    "gelu_tanh": (
        lambda x: F.gelu(x, approximate="tanh"),
        lambda x: TF.gelu(x, approximate="tanh"),
    ),
    "silu": (F.silu, TF.silu),
    "tanh": (F.tanh, torch.tanh),
    "sigmoid": (F.sigmoid, torch.sigmoid),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: TF.leaky_relu(x, 0.2)),
    "elu": (lambda x: F.elu(x, 0.7), lambda x: TF.elu(x, 0.7)),
    "softplus": (lambda x: F.softplus(x, 2.0, 5.0), lambda x: TF.softplus(x, 2.0, 5.0)),
    "logsigmoid": (F.logsigmoid, TF.logsigmoid),
    "softmax": (lambda x: F.softmax(x, -1), lambda x: TF.softmax(x, -1)),
    "log_softmax0": (lambda x: F.log_softmax(x, 0), lambda x: TF.log_softmax(x, 0)),
}


@pytest.mark.parametrize("name", ACTS)
@pytest.mark.parametrize("dt", DTYPES)
def test_activations(name, dt):
    x = rng().standard_normal((33, 27)).astype(dt) * 4
    x[np.abs(x) < 1e-2] = 0.5  # off the kinks (relu, leaky_relu, elu at 0)
    x[0, :3] = [30.0, -30.0, 0.5]  # far tails: no overflow
    check(*ACTS[name], [x], dt)


@pytest.mark.parametrize(
    "name", ["gelu", "gelu_tanh", "silu", "tanh", "sigmoid", "softplus", "logsigmoid"]
)
@pytest.mark.parametrize("dt", DTYPES)
def test_smooth_activations_at_zero(name, dt):
    """A smooth function has its slope at 0 too (test_activations keeps off 0 for the kinks)."""
    check(*ACTS[name], [np.array([0.0, -0.0, 1e-3, -1e-3], dt)], dt)


def test_softmax_implicit_dim_warns_like_torch():
    x = rng().standard_normal((3, 4))
    with pytest.warns(UserWarning, match="Implicit dimension"):
        ys = F.softmax(sitp.tensor(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        close(ys, TF.softmax(torch.tensor(x)))


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(RuntimeError, match="tanh"):
        F.gelu(sitp.ones(2), approximate="erf")


# ----------------------------------------------------------------------- linear
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", [(5,), (33, 7), (2, 3, 7)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(dt, shape, bias):
    r = rng()
    x = r.standard_normal(shape).astype(dt)
    w = r.standard_normal((11, shape[-1])).astype(dt)
    b = r.standard_normal(11).astype(dt) if bias else None
    check(F.linear, TF.linear, [x, w, b], dt)


def test_linear_shape_error_names_shapes():
    with pytest.raises(RuntimeError, match=r"\(4, 3\).*\(5, 2\)"):
        F.linear(sitp.ones(4, 3), sitp.ones(5, 2))


# ---------------------------------------------------------------- cross-entropy
def _ce(reduction, smoothing, weight, ignore_index=-100):
    def fs(x, t, w):
        return F.cross_entropy(
            x,
            t,
            weight=w if weight else None,
            ignore_index=ignore_index,
            reduction=reduction,
            label_smoothing=smoothing,
        )

    def ft(x, t, w):
        return TF.cross_entropy(
            x,
            t,
            weight=w if weight else None,
            ignore_index=ignore_index,
            reduction=reduction,
            label_smoothing=smoothing,
        )

    return fs, ft


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("weight", [False, True])
@pytest.mark.parametrize("shape", [(33, 27), (9, 27, 5)])
def test_cross_entropy(dt, reduction, smoothing, weight, shape):
    r = rng(len(shape))
    x = (r.standard_normal(shape) * 3).astype(dt)
    t = r.integers(0, shape[1], (shape[0],) + shape[2:])
    t.flat[[0, 4, 7]] = -100  # ignored rows
    w = r.random(shape[1]).astype(dt) + 0.1
    check(*_ce(reduction, smoothing, weight), [x, t, w], dt, frozen=(2,))


@pytest.mark.parametrize("ignore_index", [0, 3])
def test_cross_entropy_ignore_index_inside_the_classes(ignore_index):
    r = rng(2)
    x = r.standard_normal((33, 5))
    t = r.integers(0, 5, 33)
    check(*_ce("mean", 0.2, True, ignore_index), [x, t, r.random(5)], np.float64, frozen=(2,))


def test_cross_entropy_ignored_rows_get_zero_gradient():
    x = sitp.randn(4, 6, requires_grad=True)
    F.cross_entropy(x, sitp.tensor([1, -100, 2, -100])).backward()
    assert np.all(np_of(x.grad)[[1, 3]] == 0)
    assert np.all(np_of(x.grad)[[0, 2]] != 0)


def test_cross_entropy_all_ignored_mean_is_nan_like_torch():
    x = np.zeros((3, 4))
    t = np.full(3, -100)
    s = F.cross_entropy(sitp.tensor(x), sitp.tensor(t))
    assert math.isnan(s.item()) and math.isnan(
        TF.cross_entropy(torch.tensor(x), torch.tensor(t)).item()
    )


@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_cross_entropy_unbatched(smoothing):
    r = rng(3)
    x = r.standard_normal(27)
    check(*_ce("mean", smoothing, False), [x, np.array(4), r.random(27)], np.float64, frozen=(2,))
    check(*_ce("none", smoothing, True), [x, np.array(26), r.random(27)], np.float64, frozen=(2,))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weight", [False, True])
def test_cross_entropy_probability_targets(dt, reduction, weight):
    r = rng(4)
    x = r.standard_normal((9, 7, 3)).astype(dt)
    p = r.random((9, 7, 3)).astype(dt)
    p /= p.sum(1, keepdims=True)
    check(*_ce(reduction, 0.1, weight), [x, p, r.random(7).astype(dt)], dt, frozen=(2,))


@given(
    n=st.integers(1, 40),
    c=st.integers(1, 70),
    smoothing=st.sampled_from([0.0, 0.05]),
    seed=st.integers(0, 2**16),
)
@SETTINGS
def test_cross_entropy_shapes_hypothesis(n, c, smoothing, seed):
    r = rng(seed)
    x = (r.standard_normal((n, c)) * 5).astype(np.float32)
    t = r.integers(0, c, n)
    check(*_ce("mean", smoothing, False), [x, t, None], np.float32, seed)


def test_cross_entropy_is_stable_for_huge_logits():
    x = np.array([[1000.0, -1000.0, 0.0], [-1e4, 1e4, 3.0]], np.float32)
    t = np.array([1, 1])
    check(*_ce("none", 0.1, False), [x, t, None], np.float32)


def test_cross_entropy_errors():
    x = sitp.randn(33, 27)
    with pytest.raises(IndexError, match=r"Target 27 .*\[0, 27\)"):
        F.cross_entropy(x, sitp.full((33,), 27, dtype=sitp.int64))
    with pytest.raises(IndexError, match="Target -3"):
        F.cross_entropy(x, sitp.full((33,), -3, dtype=sitp.int64))
    with pytest.raises(ValueError, match=r"batch_size \(33\).*batch_size \(32\)"):
        F.cross_entropy(x, sitp.zeros(32, dtype=sitp.int64))
    with pytest.raises(RuntimeError, match=r"\(4, 27, 5\).*\(4, 5\).*\(4, 6\)"):
        F.cross_entropy(sitp.randn(4, 27, 5), sitp.zeros(4, 6, dtype=sitp.int64))
    with pytest.raises(RuntimeError, match="weight"):
        F.cross_entropy(x, sitp.zeros(33, dtype=sitp.int64), weight=sitp.ones(26))
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(x, sitp.zeros(33, dtype=sitp.int64), reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(x, sitp.zeros(33, dtype=sitp.int64), label_smoothing=1.5)


def test_cross_entropy_matches_the_composition_it_fuses():
    x = sitp.randn(17, 9, requires_grad=True, dtype=sitp.float64)
    t = sitp.randint(0, 9, (17,))
    F.cross_entropy(x, t).backward()
    fused = np_of(x.grad)
    x.grad = None
    (-x.log_softmax(-1).gather(1, t.unsqueeze(1))).mean().backward()
    np.testing.assert_allclose(fused, np_of(x.grad), rtol=1e-12, atol=1e-14)


# --------------------------------------------------------------------- nll_loss
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(33, 27), (6, 27, 4), (27,)])
def test_nll_loss(dt, reduction, shape):
    r = rng(5)
    x = r.standard_normal(shape).astype(dt)
    t = r.integers(0, 27, shape[:1] + shape[2:] if len(shape) > 1 else ())
    if t.ndim:
        t.flat[1] = -100
    w = r.random(27).astype(dt)
    for weight in (None, w):
        check(
            lambda x, t, w: F.nll_loss(x, t, w, reduction=reduction),
            lambda x, t, w: TF.nll_loss(x, t, w, reduction=reduction),
            [x, t, weight],
            dt,
            frozen=(2,),
        )


def test_nll_loss_errors():
    with pytest.raises(IndexError, match=r"Target 9 .*\[0, 5\)"):
        F.nll_loss(sitp.randn(3, 5), sitp.tensor([0, 9, 1]))
    with pytest.raises(ValueError, match="batch_size"):
        F.nll_loss(sitp.randn(3, 5), sitp.tensor([0, 1]))


def test_legacy_reduce_flags():
    r = rng(6)
    x, t = r.standard_normal((5, 4)), r.integers(0, 4, 5)
    for kw in (dict(reduce=False), dict(size_average=False), dict(size_average=True)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            close(
                F.cross_entropy(sitp.tensor(x), sitp.tensor(t), **kw),
                TF.cross_entropy(torch.tensor(x), torch.tensor(t), **kw),
            )


# ------------------------------------------------------------- regression losses
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss(dt, reduction):
    r = rng(7)
    x, y = r.standard_normal((33, 5)).astype(dt), r.standard_normal((33, 5)).astype(dt)
    check(
        lambda a, b: F.mse_loss(a, b, reduction=reduction),
        lambda a, b: TF.mse_loss(a, b, reduction=reduction),
        [x, y],
        dt,
    )


def test_mse_loss_broadcast_warns():
    with pytest.warns(UserWarning, match="different to the input size"):
        F.mse_loss(sitp.ones(3, 1), sitp.ones(3))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(dt, reduction, weighted):
    r = rng(8)
    x = r.random((33, 6)).astype(dt) * 0.98 + 0.01
    y = r.random((33, 6)).astype(dt)
    w = r.random((33, 6)).astype(dt) if weighted else None
    check(
        lambda a, b, w: F.binary_cross_entropy(a, b, w, reduction=reduction),
        lambda a, b, w: TF.binary_cross_entropy(a, b, w, reduction=reduction),
        [x, y, w],
        dt,
        frozen=(2,),
    )


def test_binary_cross_entropy_is_finite_at_0_and_1():
    x = np.array([0.0, 1.0, 0.0, 1.0, 0.5])
    y = np.array([0.0, 1.0, 1.0, 0.0, 1.0])
    s, t = check(
        lambda a, b: F.binary_cross_entropy(a, b, reduction="none"),
        lambda a, b: TF.binary_cross_entropy(a, b, reduction="none"),
        [x, y],
        np.float64,
        frozen=(1,),
        scale=10,
    )  # input gradients of +-1e12 at the wrong confident ends
    assert np.all(np.isfinite(np_of(s)))
    assert np_of(s)[2] == 100.0
    # The target's gradient is that of the clamped loss, log(1-x) - log(x) with both logs
    # clamped at -100: finite, where PyTorch's -logit(x) is infinite at 0 and 1.
    xs, ys = sitp.tensor(x), sitp.tensor(y, requires_grad=True)
    F.binary_cross_entropy(xs, ys, reduction="sum").backward()
    np.testing.assert_allclose(np_of(ys.grad), [100.0, -100.0, 100.0, -100.0, 0.0])


def test_binary_cross_entropy_errors():
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(sitp.tensor([1.5]), sitp.tensor([1.0]))
    with pytest.raises(ValueError, match="same size"):
        F.binary_cross_entropy(sitp.tensor([0.5, 0.5]), sitp.tensor([1.0]))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("pos_weight", [False, True])
def test_binary_cross_entropy_with_logits(dt, reduction, pos_weight):
    r = rng(9)
    x = (r.standard_normal((33, 6)) * 5).astype(dt)
    x[0, :4] = [100.0, -100.0, 0.0, 40.0]  # no overflow in either tail
    y = r.random((33, 6)).astype(dt)
    w = r.random((33, 6)).astype(dt)
    pw = r.random(6).astype(dt) * 3 if pos_weight else None
    check(
        lambda a, b, w, p: F.binary_cross_entropy_with_logits(
            a, b, w, reduction=reduction, pos_weight=p
        ),
        lambda a, b, w, p: TF.binary_cross_entropy_with_logits(
            a, b, w, reduction=reduction, pos_weight=p
        ),
        [x, y, w, pw],
        dt,
        frozen=(2, 3),
    )


# ------------------------------------------------------------------- layer_norm
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
@pytest.mark.parametrize("shape, norm", [((33, 27), 27), ((4, 5, 12), (5, 12)), ((7,), (7,))])
def test_layer_norm(dt, affine, shape, norm):
    r = rng(10)
    x = (r.standard_normal(shape) * 3 + 5).astype(dt)
    ns = (norm,) if isinstance(norm, int) else norm
    w = r.standard_normal(ns).astype(dt) if affine != "none" else None
    b = r.standard_normal(ns).astype(dt) if affine == "both" else None
    check(
        lambda x, w, b: F.layer_norm(x, norm, w, b, eps=1e-5),
        lambda x, w, b: TF.layer_norm(x, ns, w, b, eps=1e-5),
        [x, w, b],
        dt,
        scale=5,
    )


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("n_threads", [1, 2])
def test_layer_norm_large_inputs_split_among_threads(dt, n_threads):
    """Inputs past the fused kernels' parallel threshold run forward and backward in bands
    of rows on numba's threads, each band summing its own rows of dw and db; an odd row
    count splits unevenly. Against torch, on one thread and on two."""
    rows, n = 1031, 67
    assert rows * n >= ln_kernels._PARALLEL_ROWS_MIN
    r = rng(11)
    x = (r.standard_normal((rows, n)) * 2 + 1).astype(dt)
    w, b = r.standard_normal(n).astype(dt), r.standard_normal(n).astype(dt)
    with threads(n_threads):
        check(
            lambda x, w, b: F.layer_norm(x, (n,), w, b, eps=1e-5),
            lambda x, w, b: TF.layer_norm(x, (n,), w, b, eps=1e-5),
            [x, w, b],
            dt,
            scale=5,
        )


@given(rows=st.integers(1, 9), n=st.integers(1, 70), seed=st.integers(0, 2**16))
@SETTINGS
def test_layer_norm_shapes_hypothesis(rows, n, seed):
    r = rng(seed)
    x, w, b = r.standard_normal((rows, n)), r.standard_normal(n), r.standard_normal(n)
    check(
        lambda x, w, b: F.layer_norm(x, (n,), w, b),
        lambda x, w, b: TF.layer_norm(x, (n,), w, b),
        [x, w, b],
        np.float64,
        seed,
        scale=1e3,
    )


def test_layer_norm_non_contiguous_input():
    r = rng(11)
    x = r.standard_normal((6, 8))
    xs = sitp.tensor(x.T.copy()).t().requires_grad_(True)  # a transposed view
    xt = torch.tensor(x, requires_grad=True)
    F.layer_norm(xs, (8,)).pow(3).sum().backward()
    TF.layer_norm(xt, (8,)).pow(3).sum().backward()
    close(xs.grad, xt.grad)


def test_layer_norm_errors():
    with pytest.raises(RuntimeError, match=r"normalized_shape=\[5\].*\[3, 4\]"):
        F.layer_norm(sitp.ones(3, 4), (5,))
    with pytest.raises(RuntimeError, match=r"weight of shape \(3,\)"):
        F.layer_norm(sitp.ones(3, 4), (4,), weight=sitp.ones(3))


@pytest.mark.parametrize("weight", [False, True])
def test_rms_norm(weight):
    r = rng(12)
    x, w = r.standard_normal((5, 8)), r.standard_normal(8)
    check(
        lambda x, w: F.rms_norm(x, (8,), w if weight else None, eps=1e-6),
        lambda x, w: TF.rms_norm(x, (8,), w if weight else None, eps=1e-6),
        [x, w],
        np.float64,
    )


# ---------------------------------------------------------------------- dropout
def test_dropout_scales_and_masks():
    sitp.manual_seed(0)
    x = sitp.ones(1000, 10, requires_grad=True)
    y = F.dropout(x, 0.3)
    v = np_of(y)
    assert set(np.unique(v)) <= {0.0, np.float32(1 / 0.7)}
    assert abs((v == 0).mean() - 0.3) < 0.02
    y.sum().backward()
    np.testing.assert_array_equal(np_of(x.grad), v)  # d(x * m/(1-p))/dx = m/(1-p)


def test_dropout_eval_identity_edge_probabilities_and_seed():
    x = sitp.randn(4, 5)
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x
    assert np.all(np_of(F.dropout(x, 1.0)) == 0)
    sitp.manual_seed(3)
    a = np_of(F.dropout(x, 0.5))
    sitp.manual_seed(3)
    np.testing.assert_array_equal(a, np_of(F.dropout(x, 0.5)))
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match="between 0 and 1"):
            F.dropout(x, p)


# -------------------------------------------------------- embedding and one_hot
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_embedding(dt, padding_idx):
    r = rng(13)
    w = r.standard_normal((27, 10)).astype(dt)
    idx = r.integers(0, 27, (5, 7))
    idx[0, :3] = [2, 2, 26]  # repeats and the padding rows
    check(
        lambda i, w: F.embedding(i, w, padding_idx),
        lambda i, w: TF.embedding(i, w, padding_idx),
        [idx, w],
        dt,
    )


def test_embedding_index_error():
    with pytest.raises(IndexError, match="27"):
        F.embedding(sitp.tensor([27]), sitp.randn(27, 3))


def test_one_hot_is_reexported():
    t = np.array([0, 3, 1])
    np.testing.assert_array_equal(
        np_of(F.one_hot(sitp.tensor(t), 5)), TF.one_hot(torch.tensor(t), 5).numpy()
    )
    np.testing.assert_array_equal(
        np_of(F.one_hot(sitp.tensor(t))), TF.one_hot(torch.tensor(t)).numpy()
    )


# -------------------------------------------------------------------- attention
def _sdpa_arrays(dt, batch=(2, 3), L=6, S=7, D=4, Dv=5, seed=14):
    r = rng(seed)
    return [
        r.standard_normal(batch + (L, D)).astype(dt),
        r.standard_normal(batch + (S, D)).astype(dt),
        r.standard_normal(batch + (S, Dv)).astype(dt),
    ]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("kind", ["none", "causal", "causal_square", "bool", "float", "scale"])
def test_sdpa(dt, kind):
    arrays = _sdpa_arrays(dt)
    r = rng(15)
    kw = {}
    if kind == "causal":
        kw = dict(is_causal=True)
    elif kind == "causal_square":
        arrays = _sdpa_arrays(dt, S=6)
        kw = dict(is_causal=True)
    elif kind == "scale":
        kw = dict(scale=0.3)
    if kind == "bool":
        m = r.random((6, 7)) > 0.4
        m[:, 0] = True  # every row attends somewhere
        arrays.append(m)
    elif kind == "float":
        arrays.append(r.standard_normal((3, 6, 7)).astype(dt))  # broadcast over the batch dim
    else:
        arrays.append(None)
    check(
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, **kw),
        lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, attn_mask=m, **kw),
        arrays,
        dt,
        scale=3,
    )


def test_sdpa_fully_masked_row_gives_zeros_like_torch():
    """A query that may attend to no key: PyTorch's CPU kernels output 0 for that row
    (not the NaN of softmax over -inf), and so does sitp; gradients agree too."""
    q, k, v = _sdpa_arrays(np.float64, batch=(2,), L=3, S=4)
    m = np.array([[True, True, False, False], [False] * 4, [True] * 4])
    s, t = check(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=sitp.tensor(m)),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(m)),
        [q, k, v],
        np.float64,
    )
    assert np.all(np_of(s)[:, 1] == 0)


def test_sdpa_broadcast_batch_and_gqa():
    r = rng(16)
    q = r.standard_normal((2, 4, 5, 3))
    k = r.standard_normal((4, 6, 3))  # no batch dim: broadcast
    v = r.standard_normal((4, 6, 2))
    check(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v),
        [q, k, v],
        np.float64,
    )
    k2, v2 = r.standard_normal((2, 2, 6, 3)), r.standard_normal((2, 2, 6, 2))
    check(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        [q, k2, v2],
        np.float64,
    )


def test_sdpa_with_dropout_path():
    """dropout_p > 0 takes the unfused path (MaskedSoftmax, dropout, matmul); with a
    vanishing p the mask keeps everything, so it must agree with torch without dropout."""
    q, k, v = _sdpa_arrays(np.float64)
    check(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=1e-12, is_causal=True),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True),
        [q, k, v],
        np.float64,
    )
    sitp.manual_seed(0)
    out = F.scaled_dot_product_attention(*[sitp.tensor(a) for a in (q, k, v)], dropout_p=0.5)
    assert tuple(out.shape) == (2, 3, 6, 5) and np.all(np.isfinite(np_of(out)))


def test_sdpa_errors():
    q = sitp.randn(2, 5, 4)
    with pytest.raises(RuntimeError, match="is_causal"):
        F.scaled_dot_product_attention(
            q, q, q, attn_mask=sitp.ones(5, 5, dtype=sitp.bool), is_causal=True
        )
    with pytest.raises(RuntimeError, match=r"\(2, 5, 4\).*\(2, 5, 3\)"):
        F.scaled_dot_product_attention(q, sitp.randn(2, 5, 3), q)
    with pytest.raises(RuntimeError, match=r"attn_mask of shape \(4, 4\)"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=sitp.ones(4, 4, dtype=sitp.bool))


# ----------------------------------------------------------------- conv1d, pad
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize(
    "stride, padding, dilation, groups",
    [
        (1, 0, 1, 1),
        (1, 2, 1, 1),
        (1, 4, 2, 1),
        (2, 1, 3, 1),
        (1, "same", 2, 1),
        (1, "valid", 1, 1),
        (1, 1, 1, 3),
    ],
)
@pytest.mark.parametrize("bias", [True, False])
def test_conv1d(dt, stride, padding, dilation, groups, bias):
    r = rng(17)
    x = r.standard_normal((4, 6, 13)).astype(dt)
    w = r.standard_normal((9, 6 // groups, 3)).astype(dt)
    b = r.standard_normal(9).astype(dt) if bias else None
    check(
        lambda x, w, b: F.conv1d(x, w, b, stride, padding, dilation, groups),
        lambda x, w, b: TF.conv1d(x, w, b, stride, padding, dilation, groups),
        [x, w, b],
        dt,
        scale=3,
    )


def test_conv1d_unbatched_and_errors():
    r = rng(18)
    x, w = r.standard_normal((6, 10)), r.standard_normal((2, 6, 4))
    check(
        lambda x, w: F.conv1d(x, w, padding=1),
        lambda x, w: TF.conv1d(x, w, padding=1),
        [x, w],
        np.float64,
    )
    with pytest.raises(RuntimeError, match=r"to have 6 channels, but got 5"):
        F.conv1d(sitp.randn(1, 5, 10), sitp.randn(2, 6, 3))
    with pytest.raises(RuntimeError, match=r"Kernel size"):
        F.conv1d(sitp.randn(1, 6, 2), sitp.randn(2, 6, 3))


@pytest.mark.parametrize(
    "mode, pads",
    [
        ("constant", (2, 1)),
        ("constant", (1, 2, 0, 3)),
        ("constant", (-1, 2)),
        ("reflect", (2, 3)),
        ("replicate", (3, 1)),
        ("circular", (2, 2)),
    ],
)
def test_pad(mode, pads):
    x = rng(19).standard_normal((2, 3, 5))
    value = 1.5 if mode == "constant" else None
    check(
        lambda x: F.pad(x, pads, mode, value),
        lambda x: TF.pad(x, pads, mode, value),
        [x],
        np.float64,
    )


# ------------------------------------------- the composed (GPU) paths, run on the CPU
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weight", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_composed_path(smoothing, weight, reduction):
    """On a GPU, cross_entropy composes log_softmax and gather; same values and gradients."""
    r = rng(20)
    x, t, w = r.standard_normal((33, 27)), r.integers(0, 27, 33), r.random(27)
    t[[2, 5]] = -100
    check(
        lambda x, t, w: F._cross_entropy_composed(
            x, t, w if weight else None, -100, smoothing, reduction
        ),
        lambda x, t, w: TF.cross_entropy(
            x, t, w if weight else None, reduction=reduction, label_smoothing=smoothing
        ),
        [x, t, w],
        np.float64,
        frozen=(2,),
    )


def test_layer_norm_composed_path():
    r = rng(21)
    x, w, b = r.standard_normal((4, 5, 6)), r.standard_normal((5, 6)), r.standard_normal((5, 6))
    check(
        lambda x, w, b: F._layer_norm_composed(x, 2, w, b, 1e-5),
        lambda x, w, b: TF.layer_norm(x, (5, 6), w, b),
        [x, w, b],
        np.float64,
    )


@pytest.mark.parametrize("kind", ["none", "causal", "bool", "float"])
def test_sdpa_composed_path(kind):
    q, k, v = _sdpa_arrays(np.float64, batch=(2,), L=3, S=4)
    m = {
        "bool": np.array([[True, True, False, False], [False] * 4, [True] * 4]),
        "float": np.where(rng(22).random((3, 4)) > 0.3, rng(23).standard_normal((3, 4)), -np.inf),
    }.get(kind)
    if kind == "float":
        m[1] = -np.inf  # a fully masked row
    causal = kind == "causal"
    s, t = leaves(q, k, v)
    ms, mt = (sitp.tensor(m), torch.tensor(m)) if m is not None else (None, None)
    ys = F._sdpa_composed(*s, ms, 0.0, causal, 0.5)
    yt = TF.scaled_dot_product_attention(*t, attn_mask=mt, is_causal=causal, scale=0.5)
    close(ys, yt)
    ys.sum().backward()
    yt.sum().backward()
    for a, b in zip(s, t):
        assert np.all(np.isfinite(np_of(a.grad)))
        close(a.grad, b.grad)


@pytest.mark.skipif(
    sitp.cuda.device_count() == 0,
    reason="no CUDA device: no GPU answers and numba's simulator is off (NUMBA_ENABLE_CUDASIM=0)",
)
def test_functional_on_a_device_if_there_is_one():
    """On a GPU, or in numba's simulator (which the root conftest switches on where no GPU
    answers), the composed paths run on the device; any error there fails the test."""
    x = sitp.randn(4, 5).to("cuda")
    t = sitp.tensor([0, 4, -100, 2]).to("cuda")
    ce = F.cross_entropy(x, t, label_smoothing=0.1)
    close(
        ce.cpu(),
        TF.cross_entropy(
            torch.tensor(np_of(x.cpu())), torch.tensor([0, 4, -100, 2]), label_smoothing=0.1
        ),
        np.float32,
    )
    close(
        F.layer_norm(x, (5,)).cpu(), TF.layer_norm(torch.tensor(np_of(x.cpu())), (5,)), np.float32
    )
    q = x.reshape(1, 4, 5)
    qt = torch.tensor(np_of(q.cpu()))
    close(
        F.scaled_dot_product_attention(q, q, q, is_causal=True).cpu(),
        TF.scaled_dot_product_attention(qt, qt, qt, is_causal=True),
        np.float32,
    )
