"""The fused CPU attention kernels (sitp.nn._functions.attention.Attention,
over sitp.kernels.cpu.fused.attention) against PyTorch.

``F.scaled_dot_product_attention`` without dropout runs attention_forward_kernel
on the inputs' strided storage and saves one logsumexp per query row; its
backward rebuilds P with attention_backward_kernel. Every case below checks the
output and the gradients of q, k and v (and of a float mask, which takes the
exact path when it requires grad) against torch, in float32 and float64.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st

import sitp
import sitp.nn.functional as F
from helpers import np_of
from sitp.autograd.gradcheck import gradcheck
from sitp.kernels.cpu import ops as cpu_ops
from sitp.nn._functions import attention as _attention

DTYPES = [np.float32, np.float64]
TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-9, atol=1e-11)}


def rng(seed):
    return np.random.default_rng(seed)


def compare(q, k, v, mask=None, dt=np.float64, grad_mask=False, **kw):
    """Forward and backward of sitp and torch on the same arrays; asserts they agree.

    q, k, v (and a float mask when ``grad_mask``) require grad; the output's
    gradient is random. Returns the sitp output and the sitp leaves.
    """
    r = rng(99)
    arrays = [a.astype(dt) for a in (q, k, v)]
    if mask is not None and mask.dtype != np.bool_:
        mask = mask.astype(dt)
    s_in = [sitp.tensor(a, requires_grad=True) for a in arrays]
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    sm = tm = None
    if mask is not None:
        sm, tm = sitp.tensor(mask), torch.tensor(mask)
        if grad_mask:
            sm.requires_grad_(True)
            tm.requires_grad_(True)
    ys = F.scaled_dot_product_attention(*s_in, attn_mask=sm, **kw)
    yt = TF.scaled_dot_product_attention(*t_in, attn_mask=tm, **kw)
    tol = TOL[dt]
    assert tuple(ys.shape) == tuple(yt.shape)
    np.testing.assert_allclose(np_of(ys), yt.detach().numpy(), **tol)
    g = r.standard_normal(tuple(yt.shape)).astype(dt)
    ys.backward(sitp.tensor(g))
    yt.backward(torch.tensor(g))
    for name, a, b in zip("qkv", s_in, t_in):
        np.testing.assert_allclose(np_of(a.grad), b.grad.numpy(), err_msg=f"d{name}", **tol)
    if grad_mask:
        np.testing.assert_allclose(np_of(sm.grad), tm.grad.numpy(), err_msg="dmask", **tol)
    return ys, s_in


def qkv(batch, L, S, D, Dv=None, seed=0, kbatch=None):
    r = rng(seed)
    kbatch = batch if kbatch is None else kbatch
    return (
        r.standard_normal(batch + (L, D)),
        r.standard_normal(kbatch + (S, D)),
        r.standard_normal(kbatch + (S, Dv or D)),
    )


# ------------------------------------------------------------------ causal
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("L,S", [(9, 9), (9, 7), (5, 9), (1, 1), (70, 70), (70, 45), (33, 80)])
def test_causal(dt, L, S):
    """Top-left aligned causal mask (key j for query i when j <= i), for L == S and
    L != S, across more than one block of query rows (L > 32)."""
    compare(*qkv((2, 3), L, S, 5, 3, seed=L * S), dt=dt, is_causal=True)


@pytest.mark.parametrize("dt", DTYPES)
def test_no_mask_and_scale(dt):
    compare(*qkv((2, 3), 9, 7, 5, 4, seed=1), dt=dt)
    compare(*qkv((2,), 9, 7, 5, 4, seed=2), dt=dt, scale=0.3)


# ------------------------------------------------------------------ masks
MASK_SHAPES = [
    lambda B, H, L, S: (L, S),
    lambda B, H, L, S: (1, 1, L, S),
    lambda B, H, L, S: (B, 1, 1, S),
    lambda B, H, L, S: (B, H, L, S),
    lambda B, H, L, S: (H, 1, S),
]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", MASK_SHAPES)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_masks_broadcast(dt, shape, kind):
    B, H, L, S = 2, 3, 9, 7
    r = rng(5)
    ms = shape(B, H, L, S)
    if kind == "bool":
        mask = r.random(ms) > 0.3
    else:
        mask = r.standard_normal(ms)
        mask[r.random(ms) < 0.2] = -np.inf
    compare(*qkv((B, H), L, S, 5, 4, seed=6), mask, dt=dt)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_fully_masked_rows_give_zeros_and_no_gradient(dt, kind):
    B, H, L, S = 2, 2, 6, 5
    allowed = rng(7).random((B, 1, L, S)) > 0.4
    allowed[:, :, 2] = False  # query 2 may attend to no key
    allowed[1, :, 4] = False
    mask = allowed if kind == "bool" else np.where(allowed, 0.5, -np.inf)
    ys, (q, k, v) = compare(*qkv((B, H), L, S, 4, 3, seed=8), mask, dt=dt)
    out = np_of(ys)
    assert np.all(out[:, :, 2] == 0) and np.all(out[1, :, 4] == 0)
    assert np.all(np_of(q.grad)[:, :, 2] == 0)


@pytest.mark.parametrize("dt", DTYPES)
def test_float_mask_that_requires_grad_takes_the_exact_path(dt):
    B, H, L, S = 2, 3, 6, 7
    mask = rng(9).standard_normal((H, L, S))
    compare(*qkv((B, H), L, S, 4, 5, seed=10), mask, dt=dt, grad_mask=True)


# ------------------------------------------------------------------ batch dims
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_broadcast_batch_dims(dt, causal):
    """k, v shared across the batch (stride 0): their gradients are summed back."""
    compare(*qkv((2, 3), 9, 7, 5, kbatch=(1, 3), seed=11), dt=dt, is_causal=causal)
    compare(*qkv((2, 3), 9, 7, 5, kbatch=(3,), seed=12), dt=dt, is_causal=causal)
    r = rng(13)
    q = r.standard_normal((1, 3, 9, 5))  # q broadcast over k's batch instead
    k, v = r.standard_normal((2, 3, 7, 5)), r.standard_normal((2, 3, 7, 4))
    compare(q, k, v, dt=dt, is_causal=causal)
    compare(
        r.standard_normal((3, 9, 5)),
        r.standard_normal((7, 5)),
        r.standard_normal((7, 2)),
        dt=dt,
        is_causal=causal,
    )  # 3-D q, 2-D k and v
    compare(
        r.standard_normal((9, 5)),
        r.standard_normal((7, 5)),
        r.standard_normal((7, 6)),
        dt=dt,
        is_causal=causal,
    )  # all 2-D


@pytest.mark.parametrize("dt", DTYPES)
def test_gqa(dt):
    compare(*qkv((2, 4), 9, 7, 5, kbatch=(2, 2), seed=14), dt=dt, is_causal=True, enable_gqa=True)
    compare(*qkv((2, 6), 5, 8, 3, kbatch=(2, 3), seed=15), dt=dt, enable_gqa=True)


# ------------------------------------------------------------------ the GPT's layout
def gpt_inputs(lib, x, B, T, H, D):
    q, k, v = x.split(H * D, dim=2)
    return [t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v)]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("B,T,H,D", [(4, 32, 4, 16), (3, 9, 2, 5), (2, 40, 3, 8)])
def test_gpt_layout(dt, B, T, H, D):
    """q, k, v as the GPT makes them (split of a (B, T, 3C) buffer, view, transpose:
    non-contiguous views); the output's transpose(1, 2) is contiguous already, so
    merging the heads copies nothing, and the gradient reaches the buffer."""
    r = rng(T)
    x = r.standard_normal((B, T, 3 * H * D)).astype(dt)
    g = r.standard_normal((B, T, H * D)).astype(dt)
    xs, xt = sitp.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ys = F.scaled_dot_product_attention(*gpt_inputs(sitp, xs, B, T, H, D), is_causal=True)
    yt = TF.scaled_dot_product_attention(*gpt_inputs(torch, xt, B, T, H, D), is_causal=True)
    merged = ys.transpose(1, 2)
    assert merged.is_contiguous()
    assert merged.contiguous() is merged  # no copy
    ms = merged.contiguous().view(B, T, H * D)
    assert ms._storage is ys._storage
    mt = yt.transpose(1, 2).contiguous().view(B, T, H * D)
    np.testing.assert_allclose(np_of(ms), mt.detach().numpy(), **TOL[dt])
    ms.backward(sitp.tensor(g))
    mt.backward(torch.tensor(g))
    np.testing.assert_allclose(np_of(xs.grad), xt.grad.numpy(), **TOL[dt])


def test_gpt_split_gets_its_gradient_without_a_copy(monkeypatch):
    """For the GPT's layout, attention's backward writes dq, dk, dv into the windows of
    one storage laid out as the (B, T, 3C) buffer, and the split's backward returns that
    storage: no copy runs in the whole backward, and x.grad equals torch's."""
    B, T, H, D = 3, 9, 2, 5
    x = rng(5).standard_normal((B, T, 3 * H * D))
    g = rng(6).standard_normal((B, H, T, D))
    xs, xt = sitp.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ys = F.scaled_dot_product_attention(*gpt_inputs(sitp, xs, B, T, H, D), is_causal=True)
    yt = TF.scaled_dot_product_attention(*gpt_inputs(torch, xt, B, T, H, D), is_causal=True)
    copies = []
    real_assign = cpu_ops.assign
    monkeypatch.setattr(cpu_ops, "assign", lambda d, s: (copies.append(d.shape), real_assign(d, s)))
    ys.backward(sitp.tensor(g))
    yt.backward(torch.tensor(g))
    assert copies == []
    np.testing.assert_allclose(np_of(xs.grad), xt.grad.numpy(), **TOL[np.float64])


@pytest.mark.parametrize("case", ["q twice", "fourth window unused", "permuted", "two of three"])
def test_windows_of_one_buffer_in_other_layouts_get_torchs_gradients(case):
    """Layouts near the GPT's where the gradient windows must not be packed (overlapping
    or not tiling the storage), or are packed in another order: gradients equal torch's."""
    B, T, H, D = 2, 7, 2, 3
    C = H * D
    x = rng(7).standard_normal((B, T, 4 * C))
    g = rng(8).standard_normal((B, H, T, D))
    leaves = []
    for lib in (sitp, torch):
        xl = lib.tensor(x, requires_grad=True)
        width = 4 * C if case == "fourth window unused" else 3 * C
        pieces = xl[..., :width].split(C, dim=2)
        a, b, c = [t.reshape(B, T, H, D).transpose(1, 2) for t in pieces[:3]]
        if case == "q twice":
            a, b, c = a, a, c
        elif case == "permuted":
            a, b, c = c, a, b
        elif case == "two of three":
            c = c.detach()
        y = lib.nn.functional.scaled_dot_product_attention(a, b, c, is_causal=True)
        y.backward(lib.tensor(g))
        leaves.append(xl.grad)
    np.testing.assert_allclose(np_of(leaves[0]), leaves[1].numpy(), **TOL[np.float64])


def test_gradients_are_laid_out_for_the_gpt():
    """dq, dk, dv of (B, H, T, D) inputs are (B, T, H, D) in memory: the backward of
    the model's view/transpose does not copy them."""
    B, T, H, D = 2, 5, 3, 4
    qs = [sitp.randn(B, H, T, D, dtype=sitp.float64).requires_grad_(True) for _ in range(3)]
    y = F.scaled_dot_product_attention(*qs, is_causal=True)
    ctx = y.grad_fn.ctx
    grads = _attention.Attention.backward(ctx, sitp.randn(B, H, T, D, dtype=sitp.float64))
    for gr in grads[:3]:
        assert gr.transpose(1, 2).is_contiguous()


def test_other_ranks_give_contiguous_outputs():
    for batch in [(), (3,), (2, 2, 3)]:
        q, k, v = qkv(batch, 5, 6, 4, seed=len(batch))
        y = F.scaled_dot_product_attention(sitp.tensor(q), sitp.tensor(k), sitp.tensor(v))
        assert y.is_contiguous()


# ------------------------------------------------------------------ edges
def test_nan_propagates_like_the_exact_path():
    q, k, v = qkv((2,), 4, 5, 3, seed=17)
    q[0, 1, 0] = np.nan
    k[1, 2, 1] = np.nan
    s = [sitp.tensor(a) for a in (q, k, v)]
    fused = np_of(F.scaled_dot_product_attention(*s, is_causal=True))
    exact = np_of(_attention._attention_exact_forward(_Ctx(), *s, None, 1 / 3**0.5, True))
    np.testing.assert_array_equal(np.isnan(fused), np.isnan(exact))
    np.testing.assert_allclose(fused[~np.isnan(fused)], exact[~np.isnan(exact)], rtol=1e-12)


class _Ctx:
    def save_for_backward(self, *t):
        self.saved_tensors = t


def test_empty_keys_and_queries():
    q, k, v = qkv((2,), 3, 0, 4, 2)
    s = [sitp.tensor(a, requires_grad=True) for a in (q, k, v)]
    y = F.scaled_dot_product_attention(*s)
    assert tuple(y.shape) == (2, 3, 2) and np.all(np_of(y) == 0)
    y.sum().backward()
    assert np.all(np_of(s[0].grad) == 0)
    q, k, v = qkv((2,), 0, 3, 4, 2)
    y = F.scaled_dot_product_attention(*[sitp.tensor(a) for a in (q, k, v)], is_causal=True)
    assert tuple(y.shape) == (2, 0, 2)


@pytest.mark.parametrize("threads", [1, 2])
def test_parallel_and_serial_agree_with_torch(threads):
    """Big enough to take the prange kernels when 2 threads are allowed; one case
    with shared (broadcast) k, v, whose backward must stay on one thread."""
    import numba

    old = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        compare(*qkv((4, 4), 128, 128, 16, seed=18), dt=np.float32, is_causal=True)
        compare(*qkv((4, 4), 128, 96, 16, kbatch=(1, 4), seed=19), dt=np.float64)
    finally:
        numba.set_num_threads(old)


# ------------------------------------------------------------------ gradcheck
@pytest.mark.parametrize("case", ["causal", "bool", "float", "broadcast"])
def test_gradcheck(case):
    r = rng(20)
    L, S = (4, 4) if case == "causal" else (4, 5)
    q, k, v = qkv((2,), L, S, 3, 2, seed=21, kbatch=(1,) if case == "broadcast" else None)
    mask = None
    if case == "bool":
        mask = sitp.tensor(r.random((L, S)) > 0.3)
    elif case == "float":
        mask = sitp.tensor(r.standard_normal((1, L, S)))
    ins = tuple(sitp.tensor(a, requires_grad=True) for a in (q, k, v))
    assert gradcheck(
        lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=case == "causal"
        ),
        ins,
    )


# ------------------------------------------------------------------ random shapes
@settings(max_examples=25, deadline=None)
@given(
    L=st.integers(1, 12),
    S=st.integers(1, 12),
    D=st.integers(1, 7),
    Dv=st.integers(1, 7),
    batch=st.sampled_from([(), (1,), (3,), (2, 3)]),
    kind=st.sampled_from(["none", "causal", "bool", "float"]),
    dt=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**16),
)
def test_random_shapes(L, S, D, Dv, batch, kind, dt, seed):
    r = rng(seed)
    q, k, v = qkv(batch, L, S, D, Dv, seed=seed)
    mask = None
    if kind == "bool":
        mask = r.random((L, S)) > 0.3
    elif kind == "float":
        mask = r.standard_normal((1,) * len(batch) + (L, S))
    compare(q, k, v, mask, dt=dt, is_causal=kind == "causal")


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("layout", ["dense", "cache", "heads_last", "transposed"])
@pytest.mark.parametrize("mask", [None, "bool", "float"])
def test_one_query_row_reads_k_and_v_in_place_with_the_copied_paths_bits(dt, layout, mask):
    """A decode step (one or two query rows) reads K and V where they are when their rows
    are contiguous (a cache's window included) instead of copying them into scratch; every
    query row is computed alone, so each row of a call with more rows (the copied path)
    must give the same bits. Transposed K and V (rows not contiguous) take the copied path."""
    r = rng(5)
    B, H, S, D, Lmax = 2, 3, 37, 24, 5
    q = sitp.tensor(r.standard_normal((B, H, Lmax, D)).astype(dt))
    if layout == "dense":
        k, v = (sitp.tensor(r.standard_normal((B, H, S, D)).astype(dt)) for _ in range(2))
    elif layout == "cache":  # the first S slots of a longer buffer, as the KV cache keeps them
        k, v = (sitp.tensor(r.standard_normal((B, H, S + 9, D)).astype(dt))[:, :, :S] for _ in "kv")
    elif layout == "heads_last":  # (B, S, H, D) seen as (B, H, S, D): rows H * D apart
        k, v = (
            sitp.tensor(r.standard_normal((B, S, H, D)).astype(dt)).transpose(1, 2) for _ in "kv"
        )
    else:  # (B, H, D, S) seen as (B, H, S, D): a column of each row is contiguous
        k, v = (sitp.tensor(r.standard_normal((B, H, D, S)).astype(dt)).mT for _ in "kv")
    m = None
    if mask == "bool":
        m = sitp.tensor(r.random((B, 1, Lmax, S)) > 0.3)
    elif mask == "float":
        m = sitp.tensor(r.standard_normal((1, H, Lmax, S)).astype(dt))
    with sitp.no_grad():
        many = F.scaled_dot_product_attention(q, k, v, attn_mask=m).numpy()
        for i in range(Lmax - 1):
            for n in (1, 2):
                mi = None if m is None else m[:, :, i : i + n]
                few = F.scaled_dot_product_attention(q[:, :, i : i + n], k, v, attn_mask=mi)
                assert few.numpy().tobytes() == many[:, :, i : i + n].tobytes(), (i, n)
    want = TF.scaled_dot_product_attention(
        *(torch.tensor(t.numpy()) for t in (q, k, v)),
        attn_mask=None if m is None else torch.tensor(m.numpy()),
    )
    np.testing.assert_allclose(many, want.numpy(), **TOL[dt])
