"""``roll``, ``log10``, ``log2``, ``exp2`` as functions and methods: forward and backward
against PyTorch, and the backward against central differences (``sitp.autograd.gradcheck``).

The elementwise three also have rows in the ``UNARY`` tables of ``test_ops.py`` and
``test_gradcheck.py``; this file covers the function forms and ``roll``'s argument forms.
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import sitp
from helpers import assert_close, non_contiguous
from sitp.autograd.gradcheck import gradcheck

ROLLS = [  # (shape, shifts, dims)
    ((5,), 2, 0),
    ((5,), -7, 0),
    ((3, 4), 1, None),
    ((3, 4), -5, None),
    ((3, 4), 1, 1),
    ((3, 4), (1, -2), (0, 1)),
    ((2, 3, 4), (3, 1), (-1, 0)),
    ((2, 3, 4), 0, 1),
    ((2, 3, 4), (1, 1), (2, 2)),
    ((4, 1), 3, 1),
    ((3,), 1, None),
]


@pytest.mark.parametrize("shape,shifts,dims", ROLLS)
@pytest.mark.parametrize("kind", [0, 1, 2])
def test_roll_forward_backward_like_torch(shape, shifts, dims, kind):
    rng = np.random.default_rng(len(shape) + kind)
    arr = rng.standard_normal(shape)
    s = non_contiguous(arr, kind).requires_grad_(True)
    t = torch.tensor(arr, requires_grad=True)
    ys, yt = sitp.roll(s, shifts, dims), torch.roll(t, shifts, dims)
    assert_close(ys, yt, rtol=0, atol=0)
    assert_close(s.roll(shifts, dims), yt, rtol=0, atol=0)
    g = rng.standard_normal(shape)
    # a non-uniform weighting, so that a wrong index map in the backward shows
    (ys * sitp.tensor(g)).sum().backward()
    (yt * torch.tensor(g)).sum().backward()
    assert_close(s.grad, t.grad, rtol=0, atol=0)


def test_roll_returns_a_new_tensor_even_when_nothing_moves():
    x = sitp.tensor([1.0, 2.0, 3.0])
    y = x.roll(3, 0)
    y[0] = 10.0
    assert x.tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("shape,shifts,dims", ROLLS[:8])
def test_roll_gradcheck(shape, shifts, dims):
    x = sitp.tensor(
        np.random.default_rng(0).standard_normal(shape), dtype=sitp.float64, requires_grad=True
    )
    assert gradcheck(lambda t: t.roll(shifts, dims), (x,))


def test_roll_bad_arguments_fail_like_torch():
    x, tx = sitp.zeros(2, 3), torch.zeros(2, 3)
    for args, err in [(((1, 2), 0), RuntimeError), ((1, 2), IndexError), ((1, -3), IndexError)]:
        with pytest.raises(err):
            torch.roll(tx, *args)
        with pytest.raises(err):
            sitp.roll(x, *args)


FUNCS = {"log10": "pos", "log2": "pos", "exp2": None}


@pytest.mark.parametrize("name", sorted(FUNCS))
@settings(max_examples=10, deadline=None)
@given(
    arr=hnp.arrays(
        np.float64, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4), elements=st.floats(-3, 3)
    ),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_pointwise_function_forms_like_torch(name, arr, dtype):
    if FUNCS[name] == "pos":
        arr = np.abs(arr) + 0.1
    arr = arr.astype(dtype)
    s = sitp.tensor(arr, requires_grad=True)
    t = torch.tensor(arr, requires_grad=True)
    ys, yt = getattr(sitp, name)(s), getattr(torch, name)(t)
    tol = dict(rtol=2e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
    assert ys.dtype.np == yt.detach().numpy().dtype
    assert_close(ys, yt, **tol)
    ys.sum().backward()
    yt.sum().backward()
    assert_close(s.grad, t.grad, **tol)


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_pointwise_edges_like_torch(name):
    arr = np.array([0.0, -0.0, -1.0, np.inf, -np.inf, np.nan, 1e-300, 1000.0, -1000.0])
    assert_close(
        getattr(sitp, name)(sitp.tensor(arr)),
        getattr(torch, name)(torch.tensor(arr)),
        rtol=1e-12,
        atol=0,
    )


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_pointwise_gradcheck(name):
    lo = 0.5 if FUNCS[name] == "pos" else -1.0
    x = sitp.tensor(
        np.random.default_rng(1).uniform(lo, 2.0, (2, 3)), dtype=sitp.float64, requires_grad=True
    )
    assert gradcheck(lambda t: getattr(sitp, name)(t), (x,))


def test_integer_input_promotes_to_float_like_torch():
    for name in FUNCS:
        ys = getattr(sitp, name)(sitp.tensor([1, 2, 8]))
        yt = getattr(torch, name)(torch.tensor([1, 2, 8]))
        assert ys.dtype == sitp.float32 and yt.dtype == torch.float32
        assert_close(ys, yt)
