"""log_softmax, softmax, logsumexp, cross_entropy and attention at the extremes of float32:
values up to +-3e38, subnormals, signed zeros, infinities, NaN and rows of -inf, forward
and backward, against torch (CPU). The CUDA kernels get the same cases under the
simulator in ``test_gpu_extremes.py``."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import sitp
import sitp.nn.functional as F

TF = torch.nn.functional
SETTINGS = settings(max_examples=60, deadline=None)
INF = math.inf

# --8<-- [start:extreme_floats]
# Values that break naive formulas: huge (x - (m + log s) loses the log s term when
# |m| >~ 1e8), tiny and subnormal, signed zeros, the float32 limits, infinities, NaN.
EXTREMES = [
    3e38,
    -3e38,
    3.4028235e38,
    -3.4028235e38,
    1e20,
    -1e20,
    1e8,
    -1e8,
    1e-45,
    -1e-45,
    1.2e-38,
    0.0,
    -0.0,
    INF,
    -INF,
    math.nan,
]


def extreme_floats(allow_nan=True, allow_infinity=True):
    """float32 values, mixing ordinary numbers with the EXTREMES."""
    pool = [v for v in EXTREMES if (allow_nan or v == v) and (allow_infinity or abs(v) != INF)]
    return st.one_of(
        st.sampled_from(pool),
        st.floats(-50, 50, width=32),
        st.floats(width=32, allow_nan=allow_nan, allow_infinity=allow_infinity),
    )


def extreme_arrays(shape, **kw):
    return hnp.arrays(np.float32, shape, elements=extreme_floats(**kw))


def shifted_rows(draw, R, C):
    """Ordinary rows plus one huge common offset (±1e20, ±3e38, ...): the stable
    formula must give the same answer as for the unshifted rows."""
    base = draw(hnp.arrays(np.float32, (R, C), elements=st.floats(-20, 20, width=32)))
    shift = draw(st.sampled_from([0.0, 1e8, -1e8, 1e20, -1e20, 3e38, -3e38]))
    return (base + np.float32(shift)).astype(np.float32)


# --8<-- [end:extreme_floats]


def close(a, b, rtol=2e-5, atol=2e-6):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    assert a.shape == b.shape
    assert np.array_equal(np.isnan(a), np.isnan(b)), (a, b)
    fin = np.isfinite(b)
    assert np.array_equal(a[~fin & ~np.isnan(b)], b[~fin & ~np.isnan(b)]), (a, b)
    np.testing.assert_allclose(a[fin], b[fin], rtol=rtol, atol=atol)


def _pair(x):
    return (sitp.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True))


def _forward_backward(x, f_s, f_t, g=None):
    xs, xt = _pair(x)
    ys, yt = f_s(xs), f_t(xt)
    close(ys.detach().numpy(), yt.detach().numpy())
    if g is None:
        g = np.ones(tuple(yt.shape), np.float32)
    ys.backward(sitp.tensor(g))
    yt.backward(torch.tensor(g))
    return xs.grad.numpy(), xt.grad.numpy()


rows = st.tuples(st.integers(1, 4), st.integers(1, 6))


@SETTINGS
@given(data=st.data(), rc=rows, log=st.booleans(), dim=st.sampled_from([0, 1, -1]))
def test_softmax_extremes(data, rc, log, dim):
    x = data.draw(extreme_arrays(rc))
    g = data.draw(hnp.arrays(np.float32, rc, elements=st.floats(-2, 2, width=32)))
    name = "log_softmax" if log else "softmax"
    gs, gt = _forward_backward(
        x, lambda t: getattr(t, name)(dim), lambda t: getattr(t, name)(dim), g
    )
    close(gs, gt, atol=1e-5)


@SETTINGS
@given(data=st.data(), rc=rows, log=st.booleans())
def test_softmax_of_shifted_rows(data, rc, log):
    x = shifted_rows(data.draw, *rc)
    name = "log_softmax" if log else "softmax"
    g = data.draw(hnp.arrays(np.float32, rc, elements=st.floats(-2, 2, width=32)))
    gs, gt = _forward_backward(x, lambda t: getattr(t, name)(1), lambda t: getattr(t, name)(1), g)
    close(gs, gt, atol=1e-5)


@SETTINGS
@given(data=st.data(), rc=rows, keepdim=st.booleans())
def test_logsumexp_extremes(data, rc, keepdim):
    x = data.draw(st.one_of(extreme_arrays(rc), st.just(None)))
    if x is None:
        x = shifted_rows(data.draw, *rc)
    xs, xt = _pair(x)
    ys, yt = xs.logsumexp(1, keepdim=keepdim), xt.logsumexp(1, keepdim=keepdim)
    close(ys.detach().numpy(), yt.detach().numpy())
    ys.sum().backward()
    # d logsumexp / dx is softmax(x). torch's backward computes it as exp(x - lse),
    # which is 1 (not 1/C) when lse rounds to the max (|x| >~ 1e8); sitp's is exact,
    # so the reference is torch's softmax of the same rows.
    ref = torch.tensor(x).softmax(1)
    fin = np.isfinite(x).all(1)
    close(xs.grad.numpy()[fin], ref.numpy()[fin], atol=1e-6)


@SETTINGS
@given(
    data=st.data(),
    rc=rows,
    smoothing=st.sampled_from([0.0, 0.1]),
    reduction=st.sampled_from(["mean", "sum", "none"]),
)
def test_cross_entropy_extremes(data, rc, smoothing, reduction):
    R, C = rc
    x = data.draw(st.one_of(extreme_arrays(rc, allow_nan=False), st.just(None)))
    if x is None:
        x = shifted_rows(data.draw, R, C)
    target = np.array(data.draw(st.lists(st.integers(0, C - 1), min_size=R, max_size=R)))
    kw = dict(label_smoothing=smoothing, reduction=reduction)
    xs, xt = _pair(x)
    ls = F.cross_entropy(xs, sitp.tensor(target), **kw)
    lt = TF.cross_entropy(xt, torch.tensor(target), **kw)
    ls.sum().backward()
    lt.sum().backward()
    # torch sums -log p over classes (label smoothing) and rows (the mean) in float32, so a
    # few losses near 3e38 overflow to inf; sitp sums in float64. Where torch's float32
    # loss is inf and its float64 one rounds to a float32 number (one within half an ulp
    # of 3.4028235e38 rounds to that largest float32), the rounded float64 one is the
    # reference.
    ref = lt.detach()
    l64 = TF.cross_entropy(torch.tensor(x, dtype=torch.float64), torch.tensor(target), **kw)
    ref = torch.where(ref.isinf() & l64.float().isfinite(), l64.float(), ref)
    close(ls.detach().numpy(), ref.numpy())
    close(xs.grad.numpy(), xt.grad.numpy(), atol=1e-5)


@pytest.mark.parametrize(
    "row",
    [
        [1e20, 1e20, 1e20],
        [3e38, 3e38, 3e38],
        [-3e38, -3e38],
        [3e38, -3e38, 0.0],
        [-INF, -INF, -INF],
        [-INF, 0.0, 1.0],
        [-INF, 3e38],
        [INF, 0.0],
        [0.0, -0.0, 1e-45],
    ],
)
def test_rows_named_in_the_issue(row):
    x = np.array([row], np.float32)
    for name in ("log_softmax", "softmax"):
        gs, gt = _forward_backward(x, lambda t: getattr(t, name)(1), lambda t: getattr(t, name)(1))
        close(gs, gt, atol=1e-5)
    gs, gt = _forward_backward(
        x,
        lambda t: F.cross_entropy(t, sitp.tensor([0])),
        lambda t: TF.cross_entropy(t, torch.tensor([0])),
    )
    close(gs, gt, atol=1e-5)
    close(sitp.tensor(x).logsumexp(1).numpy(), torch.tensor(x).logsumexp(1).numpy())


def _attention_case(data, L, S, D, mask_kind):
    # The softmax's input is scores + mask. A huge offset common to a row of the
    # float mask (plus -inf keys) is what breaks a logsumexp saved as m + log(sum);
    # huge q or k instead would make the *gradient* ill-conditioned for any method.
    q, k, v = (
        data.draw(hnp.arrays(np.float32, shape, elements=st.floats(-1, 1, width=32)))
        for shape in ((L, D), (S, D), (S, D))
    )
    mask = None
    if mask_kind == "bool":
        mask = data.draw(hnp.arrays(np.bool_, (L, S)))
    elif mask_kind == "float":
        offset = data.draw(
            hnp.arrays(
                np.float32,
                (L, 1),
                elements=st.sampled_from([0.0, 1e8, -1e8, 1e20, -1e20, 3e38, -3e38]),
            )
        )
        mask = data.draw(
            hnp.arrays(np.float32, (L, S), elements=st.sampled_from([0.0, 0.5, -1.0, -INF]))
        )
        mask = (mask + offset).astype(np.float32)
    return q, k, v, mask


@SETTINGS
@given(
    data=st.data(),
    L=st.integers(1, 4),
    S=st.integers(1, 5),
    D=st.integers(1, 3),
    mask_kind=st.sampled_from([None, "bool", "float"]),
    causal=st.booleans(),
)
def test_attention_extremes(data, L, S, D, mask_kind, causal):
    q, k, v, mask = _attention_case(data, L, S, D, mask_kind)
    if causal and mask is not None:
        causal = False  # torch refuses both at once
    outs = []
    for lib, f in ((sitp, F), (torch, TF)):
        qq, kk, vv = (lib.tensor(a[None], requires_grad=True) for a in (q, k, v))
        m = None if mask is None else lib.tensor(mask)
        o = f.scaled_dot_product_attention(qq, kk, vv, attn_mask=m, is_causal=causal)
        o.sum().backward()
        outs.append([o.detach().numpy()] + [t.grad.numpy() for t in (qq, kk, vv)])
    s_out, t_out = outs
    # rows with no key left: torch's math path gives NaN, its fused CPU kernel and
    # sitp give zeros (sitp/kernels/cpu/fused/attention.py); compare the rows that have a key
    keep = ~np.isnan(t_out[0]).any(-1)
    close(s_out[0][keep], t_out[0][keep], atol=1e-5)
    if keep.all():
        for a, b in zip(s_out[1:], t_out[1:]):
            close(a, b, rtol=1e-4, atol=1e-4)
