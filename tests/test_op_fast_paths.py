"""The per-op fast paths (issue 34) give exactly what the general paths give.

* the CPU launcher's one-row shortcut (``ops._launch_args``) visits the same storage
  positions as the collapse() path it skips;
* memoised row starts, broadcast shapes and broadcast strides equal a fresh computation;
* a Tensor method with nothing to record (no input requires grad, or grad mode off)
  calls the backend directly: the same values, dtype, shape, strides and no grad_fn as
  the Function it skips; with grad, values and gradients match torch.
"""

import numpy as np
import pytest
import torch

import sitp
from sitp.autograd import derivatives as D
from sitp.kernels.cpu import kernels as K
from sitp.kernels.cpu import ops
from sitp.kernels.layout import collapse
from sitp.strides import (
    _broadcast_shapes,
    _broadcast_strides,
    broadcast_shapes,
    broadcast_strides,
)


def _visited(args, n):
    """The storage positions each operand's rows visit, in order."""
    return [[int(s) + i * step for s in starts for i in range(n)] for _, starts, step in args]


def _reference(shape, pairs):
    """The collapse() path of _launch_args, written out."""
    cshape, cstrides = collapse(shape, *[s for _, s in pairs])
    lead = np.asarray(cshape[:-1] or [1], np.int64)
    out = []
    for (t, _), st in zip(pairs, cstrides):
        starts = K.positions(lead, np.asarray(st[:-1] or [0], np.int64), t._offset)
        out.append((t._storage, starts, st[-1]))
    return out, cshape[-1]


def _layouts():
    base = sitp.arange(48.0).reshape(4, 12)
    yield "contiguous", base[:, :8].contiguous(), sitp.ones(4, 8)
    yield "0-d right", base[:, :8].contiguous(), sitp.tensor(2.0)
    yield "0-d left", sitp.tensor(2.0), base[:, :8].contiguous()
    yield "offset", base.reshape(-1)[8:40].reshape(4, 8), sitp.ones(4, 8)
    yield "strided", base[:, 1:9], sitp.ones(4, 8)
    yield "transposed", base[:, :4].t(), sitp.ones(4, 4)
    yield "row broadcast", base[:, :8].contiguous(), sitp.arange(8.0)
    yield "size-1 dim", base[:, :1], sitp.ones(4, 1)


@pytest.mark.parametrize("name,a,b", list(_layouts()), ids=[n for n, *_ in _layouts()])
def test_launch_args_visits_what_collapse_visits(name, a, b):
    shape = broadcast_shapes(a.shape, b.shape)
    pairs = [(a, ops._bstrides(a, shape)), (b, ops._bstrides(b, shape))]
    fast, n = ops._launch_args(shape, *pairs)
    ref, n_ref = _reference(shape, pairs)
    assert n * len(fast[0][1]) == n_ref * len(ref[0][1])
    assert _visited(fast, n) == _visited(ref, n_ref)
    got = (a + b).numpy()
    want = (torch.from_numpy(a.numpy().copy()) + torch.from_numpy(b.numpy().copy())).numpy()
    np.testing.assert_array_equal(got, want)


def test_memoised_positions_equal_fresh_ones():
    for shape, strides, off in [((3, 2), (8, 1), 5), ((2,), (3,), 0), ((), (), 7)]:
        fresh = K.positions(np.asarray(shape, np.int64), np.asarray(strides, np.int64), off)
        np.testing.assert_array_equal(ops._positions(shape, strides, off), fresh)
        np.testing.assert_array_equal(ops._positions(shape, strides, off), fresh)  # memo hit
    big = ops._positions((ops._MEMO_MAX_ROWS + 1,), (1,), 0)
    assert big.size == ops._MEMO_MAX_ROWS + 1
    assert ((ops._MEMO_MAX_ROWS + 1,), (1,), 0) not in ops._STARTS  # large: not kept


def test_memoised_broadcasts_equal_fresh_ones():
    cases = [((3, 1), (4,)), ((2, 1, 5), (3, 1)), ((), (4, 2)), ((4, 2), (4, 2))]
    for s1, s2 in cases:
        assert broadcast_shapes(s1, s2) == _broadcast_shapes(s1, s2)
        assert broadcast_shapes(list(s1), list(s2)) == _broadcast_shapes(s1, s2)
        target = _broadcast_shapes(s1, s2)
        strides = sitp.zeros(s1).stride()
        assert broadcast_strides(s1, strides, target) == _broadcast_strides(s1, strides, target)
    for _ in range(2):  # a refused broadcast raises every time (errors are not memoised)
        with pytest.raises(RuntimeError, match="cannot be broadcast"):
            broadcast_shapes((2, 3), (3, 2))


def _same(x, y):
    assert x.dtype is y.dtype and x.shape == y.shape and x.stride() == y.stride()
    assert x.grad_fn is None and not x.requires_grad
    np.testing.assert_array_equal(x.numpy(), y.numpy())


def test_methods_without_a_graph_equal_their_functions():
    g = sitp.Generator().manual_seed(0)
    a, b, w = sitp.randn(4, 8, generator=g), sitp.randn(4, 8, generator=g), sitp.randn(8, 3)
    _same(a + b, D.Binary.apply(a, b, "add"))
    _same(a * 2.0, D.Binary.apply(a, sitp.tensor(2.0), "mul"))
    _same(a.tanh(), D.Unary.apply(a, "tanh"))
    _same(a.pow(2), D.Unary.apply(a, "pow", 2.0))
    _same(-a, D.Unary.apply(a, "neg"))
    _same(a.sum(-1), D.Sum.apply(a, (1,), False))
    _same(a.softmax(-1), D.Softmax.apply(a, 1, False))
    _same(a @ w, D.MatMul.apply(a, w))
    ag = a.clone().requires_grad_()
    with sitp.no_grad():  # grad mode off: no graph even for an input that requires grad
        _same(ag + b, D.Binary.apply(a, b, "add"))
        _same(ag.tanh(), D.Unary.apply(a, "tanh"))


def test_recorded_chain_matches_torch():
    g = sitp.Generator().manual_seed(1)
    a, b, w = sitp.randn(4, 8, generator=g), sitp.randn(4, 8, generator=g), sitp.randn(8, 8)
    sa, sb, sw = (x.clone().requires_grad_() for x in (a, b, w))
    ta, tb, tw = (torch.from_numpy(x.numpy().copy()).requires_grad_() for x in (a, b, w))
    ys = sitp.nn.functional.softmax((sa @ sw + sb).tanh() * 2.0, -1).pow(2).sum()
    yt = torch.softmax((ta @ tw + tb).tanh() * 2.0, -1).pow(2).sum()
    ys.backward()
    yt.backward()
    assert ys.grad_fn is not None and ys.requires_grad
    np.testing.assert_allclose(ys.item(), yt.item(), rtol=1e-5)
    for s, t in ((sa, ta), (sb, tb), (sw, tw)):
        np.testing.assert_allclose(s.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-6)


def _strided_copy(x):
    """The same values as ``x`` in a non-contiguous view (every other column of a wider
    buffer): the launchers take their general path for it."""
    wide = sitp.zeros(*x.shape[:-1], 2 * x.shape[-1], dtype=x.dtype)
    v = wide[..., ::2]
    v.copy_(x)
    assert not v.is_contiguous()
    return v


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow", "maximum", "atan2"])
def test_one_row_binary_equals_the_general_launch(op):
    g = sitp.Generator().manual_seed(2)
    a, b = sitp.rand(3, 5, generator=g) + 0.5, sitp.randn(3, 5, generator=g)
    for right in (b, sitp.tensor(1.5)):
        fast = ops.binary(op, a, right)
        general = ops.binary(op, _strided_copy(a), right)
        assert fast.dtype is general.dtype and fast.stride() == general.stride()
        np.testing.assert_array_equal(fast.numpy(), general.numpy())


@pytest.mark.parametrize("op", ["tanh", "exp", "neg", "sigmoid"])
def test_one_row_unary_equals_the_general_launch(op):
    x = sitp.randn(3, 5, generator=sitp.Generator().manual_seed(3))
    fast, general = ops.unary(op, x), ops.unary(op, _strided_copy(x))
    assert fast.dtype is general.dtype and fast.stride() == general.stride()
    np.testing.assert_array_equal(fast.numpy(), general.numpy())
