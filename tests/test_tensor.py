"""The Tensor: creation, metadata, views, indexing, conversions and errors."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import sitp
from helpers import assert_close, pair

SETTINGS = settings(max_examples=40, deadline=None)


# ------------------------------------------------------------------ creation
def test_dtypes_default_like_torch():
    assert sitp.tensor([1, 2]).dtype is sitp.int64
    assert sitp.tensor([1.0, 2]).dtype is sitp.float32
    assert sitp.tensor([True, False]).dtype is sitp.bool
    assert sitp.tensor(np.zeros(3)).dtype is sitp.float64
    assert sitp.tensor([1, 2], dtype=sitp.float64).dtype is sitp.float64
    assert sitp.zeros(2, 3).dtype is sitp.float32
    assert sitp.arange(5).dtype is sitp.int64
    assert sitp.arange(0, 1, 0.25).dtype is sitp.float32


def test_creation_functions_match_torch():
    assert_close(sitp.zeros(2, 3), torch.zeros(2, 3))
    assert_close(sitp.ones((4,)), torch.ones(4))
    assert_close(sitp.full((2, 2), 7.5), torch.full((2, 2), 7.5))
    assert_close(sitp.arange(2, 11, 3), torch.arange(2, 11, 3))
    assert_close(sitp.arange(1.0, 0.0, -0.3), torch.arange(1.0, 0.0, -0.3))
    assert_close(sitp.linspace(-1, 1, 7), torch.linspace(-1, 1, 7))
    assert_close(sitp.eye(3, 4), torch.eye(3, 4))
    x = sitp.randn(3, 2)
    assert_close(sitp.zeros_like(x), torch.zeros(3, 2))
    assert_close(sitp.ones_like(x), torch.ones(3, 2))
    assert sitp.full_like(x, 2).dtype is sitp.float32


def test_random_is_reproducible_with_seed_and_generator():
    sitp.manual_seed(3)
    a = sitp.randn(5)
    sitp.manual_seed(3)
    b = sitp.randn(5)
    assert a.equal(b)
    g = sitp.Generator().manual_seed(7)
    c = sitp.rand(4, generator=g)
    g.manual_seed(7)
    assert c.equal(sitp.rand(4, generator=g))
    r = sitp.randint(0, 10, (1000,))
    assert r.dtype is sitp.int64 and int(r.min()) >= 0 and int(r.max()) <= 9
    p = sitp.randperm(10)
    assert sorted(p.tolist()) == list(range(10))


def test_multinomial_frequencies_and_errors():
    g = sitp.Generator().manual_seed(0)
    p = sitp.tensor([0.1, 0.0, 0.6, 0.3])
    s = sitp.multinomial(p, 20000, replacement=True, generator=g)
    counts = np.bincount(s.numpy(), minlength=4) / 20000
    np.testing.assert_allclose(counts, [0.1, 0.0, 0.6, 0.3], atol=0.015)
    s2 = sitp.multinomial(sitp.tensor([[1.0, 1, 1], [0, 0, 1]]), 3, generator=g)
    assert sorted(s2[0].tolist()) == [0, 1, 2] and s2[1, 0].item() == 2
    with pytest.raises(RuntimeError, match="without replacement"):
        sitp.multinomial(p, 5)
    with pytest.raises(RuntimeError, match="< 0"):
        sitp.multinomial(sitp.tensor([0.5, -0.1]), 1)


def test_multinomial_checks_the_weights_as_torch_does():
    """The kernel checks the weights in the pass that draws: each bad input gets torch's
    error (torch itself is the reference), and the same weights in float32 and float64,
    contiguous or strided, draw the same indices from the same generator."""
    torch = pytest.importorskip("torch")
    nan, inf = float("nan"), float("inf")
    cases = [
        ([0.5, -0.1], True),
        ([[1.0, 2.0], [1.0, nan]], True),
        ([[1.0, 2.0], [inf, 1.0]], False),
        ([[1.0, 2.0], [0.0, 0.0]], True),
        ([[0.0, 0.0], [1.0, -1.0]], True),
        ([0.0, 0.0, 0.0], False),
    ]
    for rows, replacement in cases:
        with pytest.raises(RuntimeError) as want:
            torch.multinomial(torch.tensor(rows), 1, replacement)
        with pytest.raises(RuntimeError) as got:
            sitp.multinomial(sitp.tensor(rows), 1, replacement)
        assert str(got.value) == str(want.value), rows
    with pytest.raises(
        RuntimeError, match=r"no categories to draw from \(weights of shape \(2, 0\)\)"
    ):
        sitp.multinomial(sitp.zeros(2, 0), 1, True)
    with pytest.raises(RuntimeError, match="floating-point dtypes for input, got: "):
        sitp.multinomial(sitp.tensor([1, 2, 3]), 1)
    w = sitp.rand(5, 13, generator=sitp.Generator().manual_seed(1), dtype=sitp.float64)

    def draws(x):
        return sitp.multinomial(x, 4, generator=sitp.Generator().manual_seed(7)).tolist()

    assert draws(sitp.stack([w, w], 2)[:, :, 0]) == draws(w) == draws(w.t().contiguous().t())
    assert draws(w.float()) == draws(w.float().double())  # float32 read as it is


@pytest.mark.parametrize(
    "bad, err",
    [
        ("abc", TypeError),
        ([[1, 2], [3]], ValueError),
        ([object()], TypeError),
        ({"a": 1}, TypeError),
    ],
)
def test_tensor_rejects_bad_data(bad, err):
    with pytest.raises(err):
        sitp.tensor(bad)


def test_negative_size_is_an_error():
    with pytest.raises(RuntimeError, match="negative dimension"):
        sitp.zeros(2, -1)


# ------------------------------------------------------------------ metadata
def test_shape_strides_offset_contiguity():
    x = sitp.arange(24).view(2, 3, 4)
    assert x.shape == (2, 3, 4) and x.stride() == (12, 4, 1) and x.storage_offset() == 0
    assert x.is_contiguous()
    t = x.transpose(0, 2)
    assert t.shape == (4, 3, 2) and t.stride() == (1, 4, 12) and not t.is_contiguous()
    s = x[1, :, 1:]
    assert s.shape == (3, 3) and s.stride() == (4, 1) and s.storage_offset() == 13
    assert x.size(-1) == 4 and x.dim() == 3 and x.numel() == 24
    assert repr(x.shape) == "sitp.Size([2, 3, 4])"


def test_views_share_memory():
    x = sitp.zeros(3, 4)
    v = x.T
    v[1, 2] = 5.0
    assert x[2, 1].item() == 5.0
    y = x.view(12)
    y[0] = 1.0
    assert x[0, 0].item() == 1.0
    n = x.numpy()
    n[0, 1] = 9.0
    assert x[0, 1].item() == 9.0


def test_view_fails_on_incompatible_strides_reshape_copies():
    x = sitp.arange(6).view(2, 3).T
    with pytest.raises(RuntimeError, match="reshape"):
        x.view(6)
    r = x.reshape(6)
    assert r.tolist() == [0, 3, 1, 4, 2, 5]
    with pytest.raises(RuntimeError, match="invalid for input of size 6"):
        x.reshape(4, 2)
    with pytest.raises(RuntimeError, match="only one dimension can be inferred"):
        x.reshape(-1, -1)


@SETTINGS
@given(hnp.array_shapes(min_dims=1, max_dims=4, max_side=5), st.data())
def test_view_reshape_match_numpy(shape, data):
    arr = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    perm = data.draw(st.permutations(range(len(shape))))
    s = sitp.tensor(arr).permute(perm)
    a = arr.transpose(perm)
    # every factorisation of the element count
    n = a.size
    divs = [d for d in range(1, n + 1) if n % d == 0]
    d = data.draw(st.sampled_from(divs))
    np.testing.assert_array_equal(s.reshape(d, -1).numpy(), a.reshape(d, -1))
    np.testing.assert_array_equal(s.flatten().numpy(), a.reshape(-1))
    np.testing.assert_array_equal(s.contiguous().numpy(), a)
    assert s.contiguous().is_contiguous()


def test_expand_unsqueeze_squeeze_flatten():
    x = sitp.tensor([[1.0], [2.0], [3.0]])
    e = x.expand(2, 3, 4)
    assert e.shape == (2, 3, 4) and e.stride() == (0, 1, 0)
    assert e[1, 2, 3].item() == 3.0
    assert x.expand(-1, 5).shape == (3, 5)
    with pytest.raises(RuntimeError, match="must match the existing size"):
        x.expand(4, 4)
    assert x.unsqueeze(0).shape == (1, 3, 1) and x.unsqueeze(-1).shape == (3, 1, 1)
    assert x.squeeze().shape == (3,) and x.squeeze(0).shape == (3, 1)
    assert sitp.zeros(2, 3, 4).flatten(1).shape == (2, 12)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.unsqueeze(5)


# ------------------------------------------------------------------ indexing
INDEX_CASES = [
    (1,),
    (-1,),
    (slice(None, None, 2),),
    (slice(1, None), 2),
    (Ellipsis, 1),
    (None, 0),
    (slice(None), None, slice(1, 3)),
    ([0, 2, 2],),
    ([[0, 1], [2, 0]],),
    (slice(None), [1, 0, 1]),
    ([0, 1], [2, 3]),
    ([0, 2], slice(None), [1, 1]),
    (1, [0, 2]),
    (Ellipsis, [3, 0]),
    (slice(None, None, -1 + 3),),
    (Ellipsis,),
    (Ellipsis, slice(None, 2)),
    (slice(1, 3), Ellipsis),
    (1, Ellipsis, slice(1, 4, 2)),
    (0, 1, Ellipsis, 2),
    (Ellipsis, None, 1),
]


def test_ellipsis_slices_match_torch_in_gradients_and_errors():
    arr = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    for key in [(Ellipsis, slice(None, 2)), (1, Ellipsis, slice(3, None)), (Ellipsis, 0)]:
        s = sitp.tensor(arr, requires_grad=True)
        t = torch.tensor(arr, requires_grad=True)
        (s[key] * 3).sum().backward()
        (t[key] * 3).sum().backward()
        assert_close(s.grad, t.grad)
    with pytest.raises(IndexError, match="single ellipsis"):
        sitp.tensor(arr)[..., 0, ...]
    with pytest.raises(IndexError, match="too many indices"):
        sitp.tensor(arr)[0, 0, 0, 0, ...]


@pytest.mark.parametrize("key", INDEX_CASES)
def test_getitem_matches_torch(key):
    arr = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    s, t = pair(arr)

    def conv(k, lib):
        return lib.tensor(k) if isinstance(k, list) else k

    ks = tuple(conv(k, sitp) for k in key)
    kt = tuple(conv(k, torch) for k in key)
    assert_close(s[ks], t[kt])
    # the same key on a non-contiguous view
    assert_close(s.transpose(0, 1).contiguous().transpose(0, 1)[ks], t[kt])


def test_mask_indexing_and_setitem():
    arr = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    s, t = pair(arr)
    assert_close(s[s > 0], t[t > 0])
    assert_close(s[:, s[0] > -4], t[:, t[0] > -4])
    s[s < 0] = 0.0
    t[t < 0] = 0.0
    assert_close(s, t)
    s[1] = sitp.tensor([9.0, 8, 7, 6])
    t[1] = torch.tensor([9.0, 8, 7, 6])
    s[:, 0] = 1
    t[:, 0] = 1
    s[[0, 2], [1, 3]] = sitp.tensor([-1.0, -2.0])
    t[[0, 2], [1, 3]] = torch.tensor([-1.0, -2.0])
    assert_close(s, t)


def test_index_put_accumulate_counts_repeats():
    n = sitp.zeros(3, 3, dtype=sitp.int64)
    rows = sitp.tensor([0, 0, 1, 0])
    cols = sitp.tensor([1, 1, 2, 1])
    n.index_put_((rows, cols), sitp.ones(4, dtype=sitp.int64), accumulate=True)
    assert n.tolist() == [[0, 3, 0], [0, 0, 1], [0, 0, 0]]


@pytest.mark.parametrize(
    "key, err, msg",
    [
        ((5,), IndexError, "out of bounds for dimension 0 with size 3"),
        ((0, 0, 0), IndexError, "too many indices"),
        (([0, 7],), IndexError, "index 7 is out of bounds"),
        ((1.5,), TypeError, "valid indices"),
        ((slice(None, None, -1),), ValueError, "step must be greater than zero"),
    ],
)
def test_bad_indices_have_clear_errors(key, err, msg):
    x = sitp.zeros(3, 4)
    k = tuple(sitp.tensor(v) if isinstance(v, list) else v for v in key)
    with pytest.raises(err, match=msg):
        x[k]


def test_one_index_tensor_matches_torch_and_the_general_path():
    """``x[t]`` with one int64 tensor (an embedding's lookup) is made directly, not through
    the general plan: the same values, gradients and errors as torch, for contiguous,
    strided and 0-d keys, negative indices, and the general path's key ``x[(t, ...)]``."""
    torch = pytest.importorskip("torch")
    w = np.random.default_rng(0).standard_normal((7, 5)).astype(np.float32)
    keys = [
        np.array([[3, 0, -1], [6, 3, 3]]),  # repeated rows: their gradients add up
        np.array([[1, 2, 3], [4, 5, 6]]).T,  # a strided key
        np.array(4),  # a 0-d key: one row
        np.zeros((0, 2), np.int64),  # no rows
    ]
    for k in keys:
        xs = sitp.tensor(w, requires_grad=True)
        xt = torch.tensor(w, requires_grad=True)
        ks, kt = sitp.tensor(k), torch.tensor(k)
        ys, yt = xs[ks], xt[kt]
        assert ys.shape == yt.shape, k
        np.testing.assert_array_equal(ys.detach().numpy(), yt.detach().numpy())
        np.testing.assert_array_equal(xs.detach()[(ks, ...)].numpy(), yt.detach().numpy())
        g = np.arange(yt.numel(), dtype=np.float32).reshape(tuple(yt.shape))
        ys.backward(sitp.tensor(g))
        yt.backward(torch.tensor(g))
        np.testing.assert_array_equal(xs.grad.numpy(), xt.grad.numpy())
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0 with size 7"):
        sitp.tensor(w)[sitp.tensor([[0, 7]])]
    with pytest.raises(IndexError, match="index -8 is out of bounds for dimension 0 with size 7"):
        sitp.tensor(w)[sitp.tensor(-8)]


def test_mask_shape_mismatch_and_float_index_tensor():
    x = sitp.zeros(3, 4)
    with pytest.raises(IndexError, match="shape of the mask"):
        x[sitp.tensor([True, False])]
    with pytest.raises(IndexError, match="long, int or bool"):
        x[sitp.tensor([0.0, 1.0])]


# -------------------------------------------------------------- conversions
def test_conversions():
    x = sitp.tensor([[1.5, -2.0]])
    assert x.tolist() == [[1.5, -2.0]]
    assert x[0, 0].item() == 1.5 and isinstance(x[0, 0].item(), float)
    assert x.long().tolist() == [[1, -2]] and x.long().dtype is sitp.int64
    assert x.double().dtype is sitp.float64
    assert x.to(sitp.float64).dtype is sitp.float64
    assert (x > 0).dtype is sitp.bool
    assert float(sitp.tensor(2.5)) == 2.5 and int(sitp.tensor(3)) == 3
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        x.item()
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(x)
    with pytest.raises(RuntimeError, match="requires grad"):
        sitp.ones(2, requires_grad=True).numpy()


def test_repr_like_torch():
    assert repr(sitp.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    assert repr(sitp.tensor([1.5, 2.25])) == "tensor([1.5000, 2.2500])"
    assert repr(sitp.tensor([1, 2])) == "tensor([1, 2])"
    assert repr(sitp.tensor([True])) == "tensor([True])"
    assert repr(sitp.tensor([1.0], dtype=sitp.float64)) == "tensor([1.], dtype=sitp.float64)"
    assert repr(sitp.ones(1, requires_grad=True)) == "tensor([1.], requires_grad=True)"
    assert "grad_fn=<MulBackward>" in repr(sitp.ones(1, requires_grad=True) * 2)


def test_device_errors_are_clear():
    assert sitp.zeros(1).device == "cpu"
    assert not sitp.cuda.is_available()  # no GPU on the test machines
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda"):
        sitp.zeros(2, device="tpu")
    if sitp.cuda.is_simulated():
        with pytest.raises(RuntimeError, match="same device.*cuda and cpu"):
            sitp.zeros(2, device="cuda") + sitp.zeros(2)


# -------------------------------------------------------------- in-place ops
def test_inplace_ops_match_torch():
    arr = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    s, t = pair(arr)
    o_s, o_t = pair(np.full((4,), 0.5, np.float32))
    s.add_(o_s, alpha=2)
    t.add_(o_t, alpha=2)
    s.mul_(3)
    t.mul_(3)
    s.addcmul_(s, s, value=0.1)
    t.addcmul_(t, t, value=0.1)
    s.addcdiv_(o_s, s.abs() + 1, value=-0.5)
    t.addcdiv_(o_t, t.abs() + 1, value=-0.5)
    s.clamp_(-1, 2)
    t.clamp_(-1, 2)
    assert_close(s, t)
    s.T.zero_()
    assert s.abs().sum().item() == 0
    s.fill_(2)
    s.sub_(1)
    s.div_(4)
    assert s.tolist() == [[0.25] * 4] * 3


def test_inplace_on_leaf_requiring_grad_raises():
    w = sitp.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        w.add_(1)
    with sitp.no_grad():
        w.add_(1)
    assert w.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(RuntimeError, match="broadcast shape"):
        sitp.zeros(3).add_(sitp.ones(2, 3))


def test_split_chunk_cat_stack():
    arr = np.arange(20, dtype=np.float32).reshape(4, 5)
    s, t = pair(arr)
    for a, b in zip(s.split(2, 1), t.split(2, 1)):
        assert_close(a, b)
    for a, b in zip(s.split([1, 3]), t.split([1, 3])):
        assert_close(a, b)
    for a, b in zip(s.chunk(3, 1), t.chunk(3, 1)):
        assert_close(a, b)
    assert_close(sitp.cat([s, s[:2]], 0), torch.cat([t, t[:2]], 0))
    assert_close(sitp.stack([s, s], 1), torch.stack([t, t], 1))
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        sitp.cat([s, s[:, :2]], 0)
    with pytest.raises(RuntimeError, match="equal size"):
        sitp.stack([s, s[:2]])
    with pytest.raises(RuntimeError, match="sum exactly"):
        s.split([1, 1])


@pytest.mark.parametrize(
    "call",
    [
        lambda x: x.new_zeros(2, 3),
        lambda x: x.new_zeros((2, 3)),
        lambda x: x.new_ones([4]),
        lambda x: x.new_empty(2, 5),
        lambda x: x.new_full((2,), 7.0),
        lambda x: x.new_tensor([1, 2]),
        lambda x: x.new_zeros(3, dtype=x.new_tensor([1]).long().dtype),
    ],
)
def test_new_factories_take_sizes_as_torch_does(call):
    torch = pytest.importorskip("torch")
    import sitp

    ours, theirs = call(sitp.ones(2, 3)), call(torch.ones(2, 3))
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    if "empty" not in repr(call.__code__.co_names):
        assert ours.tolist() == theirs.tolist()
    assert call(sitp.ones(2)).requires_grad is False
