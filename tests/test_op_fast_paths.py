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
    one = sitp.arange(4.0)[2]  # a single entry on the left, at an offset of its storage
    fast = ops.binary(op, one, a)
    general = ops.binary(op, one, _strided_copy(a))
    assert fast.dtype is general.dtype and fast.stride() == general.stride()
    np.testing.assert_array_equal(fast.numpy(), general.numpy())


@pytest.mark.parametrize("op", ["tanh", "exp", "neg", "sigmoid"])
def test_one_row_unary_equals_the_general_launch(op):
    x = sitp.randn(3, 5, generator=sitp.Generator().manual_seed(3))
    fast, general = ops.unary(op, x), ops.unary(op, _strided_copy(x))
    assert fast.dtype is general.dtype and fast.stride() == general.stride()
    np.testing.assert_array_equal(fast.numpy(), general.numpy())


# ---------------------------------------------------------------- views and indexing
def _same_view(x, y, base):
    """x (a fast path's view) is what y (the Function's) is: same storage, layout, dtype,
    version counter as the base, and no graph."""
    assert x._storage is y._storage is base._storage and x._vc is base._vc
    assert (x.shape, x.stride(), x.storage_offset(), x.dtype) == (
        y.shape,
        y.stride(),
        y.storage_offset(),
        y.dtype,
    )
    assert x.grad_fn is None and not x.requires_grad


def test_views_without_a_graph_equal_their_functions():
    x = sitp.arange(24.0).reshape(2, 3, 4)
    _same_view(x.view(6, 4), D.View.apply(x, (6, 4), (4, 1), 0), x)
    _same_view(x.reshape(4, -1), D.View.apply(x, (4, 6), (6, 1), 0), x)
    _same_view(x.permute(2, 0, 1), D.Permute.apply(x, (2, 0, 1)), x)
    _same_view(x.transpose(0, 2), D.Permute.apply(x, (2, 1, 0)), x)
    _same_view(x.mT, D.Permute.apply(x, (0, 2, 1)), x)
    row = x[:1]
    _same_view(row.expand(5, 3, 4), D.Expand.apply(row, (5, 3, 4), (0, 4, 1)), x)
    xg = x.clone().requires_grad_()
    with sitp.no_grad():
        _same_view(xg.view(4, 6), D.View.apply(xg, (4, 6), (6, 1), 0), xg)
    y = xg.view(4, 6)  # with a graph: the Function, as before
    assert y.grad_fn is not None and y.grad_fn.fn is D.View


def test_memoised_view_plans_equal_fresh_ones():
    from sitp.methods import views
    from sitp.strides import infer_shape, view_strides

    base = sitp.arange(24.0).reshape(2, 3, 4)
    cases = [(base, (6, -1)), (base, (-1,)), (base.transpose(0, 1), (3, 8)), (base, (2, 12))]
    cases += [(base.transpose(0, 1), (-1,)), (base[:, 1:], (4, -1)), (base[:, 1:], (2, 8))]
    for x, asked in cases:
        for _ in range(2):  # the second is a memo hit
            shape, strides = views._view_plan(x, asked)
            assert shape == infer_shape(asked, x.numel())
            assert strides == view_strides(x.shape, x.stride(), shape)
    for _ in range(2):  # an invalid shape raises every time
        with pytest.raises(RuntimeError, match="invalid for input of size"):
            base.view(5, 5)


def test_memoised_transposes_equal_torch():
    x = sitp.arange(24.0).reshape(2, 3, 4)
    t = torch.from_numpy(x.numpy().copy())
    for _ in range(2):  # the second is a memo hit
        for d0, d1 in ((0, 1), (-1, -2), (2, 0), (1, 1), (-3, 2)):
            y, ty = x.transpose(d0, d1), t.transpose(d0, d1)
            assert y.shape == ty.shape and y.stride() == ty.stride()
            np.testing.assert_array_equal(y.numpy(), ty.numpy())
        with pytest.raises(IndexError):  # out of range: raises every time
            x.transpose(0, 3)


_KEYS = [
    0,
    -1,
    slice(None),
    slice(1, None),
    slice(None, None, 2),
    slice(5, 1),
    (slice(None), 1),
    (1, slice(1, 3)),
    (slice(None), slice(None), -2),
    (0, 2, 3),
    (slice(-2, None, 3), 0),
    (),
    (Ellipsis, 1),  # one ... becomes the full slices of the dims the rest leave
    Ellipsis,
    (Ellipsis, slice(None, 2)),
    (1, Ellipsis, slice(3, None)),
    (0, 1, 2, Ellipsis),
]


@pytest.mark.parametrize("key", _KEYS, ids=[repr(k) for k in _KEYS])
def test_basic_keys_equal_the_general_decomposition(key):
    from sitp.methods import indexing

    x = sitp.arange(60.0).reshape(3, 4, 5)[:, 1:]  # a view with an offset
    fast = indexing._basic(x, key)
    shape, strides, offset, basic_key, adv = indexing._decompose(x, key)
    assert not adv and fast == (shape, strides, offset, basic_key)
    got = x[key]
    want = torch.from_numpy(x.numpy().copy())[key]
    np.testing.assert_array_equal(got.numpy(), want.numpy())


_RAISE = [5, (0, 9), slice(None, None, -1), (0, 0, 0, 0), (Ellipsis, 0, Ellipsis)]  # torch raises
_OTHER = [np.int64(1), (None, 0), (None, Ellipsis), ([0, 2], slice(1, 3))]


@pytest.mark.parametrize("key", _RAISE + _OTHER, ids=[repr(k) for k in _RAISE + _OTHER])
def test_other_keys_take_the_general_path(key):
    from sitp.methods import indexing

    x = sitp.arange(60.0).reshape(3, 4, 5)
    assert indexing._basic(x, key) is None
    if any(key is k for k in _RAISE):
        with pytest.raises((IndexError, ValueError)):
            x[key]
        return
    want = torch.from_numpy(x.numpy().copy())[key]
    np.testing.assert_array_equal(x[key].numpy(), want.numpy())


def test_sliced_rows_with_a_graph_match_torch():
    g = sitp.Generator().manual_seed(4)
    a = sitp.randn(3, 5, 4, generator=g)
    sa = a.clone().requires_grad_()
    ta = torch.from_numpy(a.numpy().copy()).requires_grad_()
    ys = sum(((sa[:, i, :] * (i + 1)).tanh() for i in range(5)), sitp.zeros(3, 4)).sum()
    yt = sum(((ta[:, i, :] * (i + 1)).tanh() for i in range(5)), torch.zeros(3, 4)).sum()
    ys.backward()
    yt.backward()
    np.testing.assert_allclose(sa.grad.numpy(), ta.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_masked_fill_without_a_graph_equals_where():
    x = sitp.randn(4, 6, generator=sitp.Generator().manual_seed(5))
    mask = sitp.ones(6, 6).tril()[:4] == 0
    v = sitp.tensor(float("-inf"))
    _same(x.masked_fill(mask, float("-inf")), D.Where.apply(mask, v, x))


# ---------------------------------------------------------------- autograd records
def test_inputs_are_recorded_as_edges_that_keep_their_place():
    """A non-leaf input is recorded as (grad_fn, output number) when used: an in-place
    op on it afterwards does not change what the earlier op's backward reaches."""
    from sitp.autograd.function import _Edge

    w = sitp.randn(3, generator=sitp.Generator().manual_seed(6)).requires_grad_()
    tw = torch.from_numpy(w.detach().numpy().copy()).requires_grad_()
    outs = []
    for lib, x in ((sitp, w), (torch, tw)):
        h = x * 2.0
        y = h * 3.0  # records h as an edge to MulBackward
        h.add_(1.0)  # h now has a new grad_fn
        (y.sum() + (h * h).sum()).backward()
        outs.append(x.grad.numpy())
        if lib is sitp:
            e = y.grad_fn.inputs[0]
            assert isinstance(e, _Edge) and e.grad_fn is not h.grad_fn and e._output_nr == 0
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6)


VIEWS = ("view", "view_nonleaf", "permute")  # the view shortcuts' cases below


def _record_of(y):
    """What an op recorded: the Node's function, its inputs (a leaf itself, else the edge's
    node and output number), what its Context holds, and the output's own fields."""
    node, ctx = y.grad_fn, y.grad_fn.ctx

    def ref(t):
        return None if t is None else (t if t.grad_fn is None else (t.grad_fn, t._output_nr))

    fields = {k: getattr(ctx, k) for k in ("op", "p0", "p1", "shape", "dims") if hasattr(ctx, k)}
    return (
        node.fn,
        node.n_outputs,
        [ref(t) for t in node.inputs if t is not None],
        ctx.needs_input_grad[: 2 if node.fn is D.Binary else 1],
        ctx._versions,
        {k: str(v) for k, v in fields.items()},
        (y.requires_grad, y._output_nr, node.name()),
    )


@pytest.mark.parametrize(
    "case", ["a", "b", "both", "nonleaf", "unary", "view", "view_nonleaf", "permute"]
)
def test_recorded_shortcut_makes_what_apply_makes(case):
    """Binary.recorded, Unary.recorded and View.recorded (the methods' shortcut when they
    record) make the Node, Context and output that Function.apply makes: the same
    inputs, saved tensors, version checks (None where the gradient does not read a
    saved tensor), the same values and the same gradients."""
    import math

    g = sitp.Generator().manual_seed(8)
    a = sitp.randn(3, 4, generator=g).requires_grad_(
        case in ("a", "both", "unary", "view", "permute")
    )
    b = sitp.randn(4, generator=g).requires_grad_(case in ("b", "both"))
    if case in ("nonleaf", "view_nonleaf"):
        a = sitp.randn(3, 4, generator=g).requires_grad_() * 2.0
    made = {}
    for how in ("apply", "recorded"):
        if case == "unary":
            y = getattr(D.Unary, how)(a, "tanh", math.nan, math.nan)
        elif case.startswith("view"):
            y = getattr(D.View, how)(a, (4, 3), (3, 1), 0)
        elif case == "permute":
            y = getattr(D.Permute, how)(a, (1, 0))
        else:
            y = getattr(D.Binary, how)(a, b, "mul")
        made[how] = y
    rec = {how: _record_of(y) for how, y in made.items()}
    fn, n_out, inputs, needs, versions, fields, out = rec["apply"]
    fn2, n_out2, inputs2, needs2, versions2, fields2, out2 = rec["recorded"]
    assert (fn, n_out, needs, versions, fields, out) == (
        fn2,
        n_out2,
        needs2,
        versions2,
        fields2,
        out2,
    )
    assert len(inputs) == len(inputs2) and all(
        x is y or (isinstance(x, tuple) and x[0] is y[0] and x[1] == y[1])
        for x, y in zip(inputs, inputs2)
    )
    for how in ("apply", "recorded"):  # the saved inputs are the operands themselves
        saved = made[how].grad_fn.ctx.saved_tensors
        assert saved == () if case in VIEWS else saved[0] is a
        assert case in ("unary", *VIEWS) or saved[1] is b
    np.testing.assert_array_equal(made["apply"].detach().numpy(), made["recorded"].detach().numpy())
    grads = []
    for y in made.values():
        leaves = [t for t in (a, b) if t.requires_grad and t.grad_fn is None]
        leaves = leaves or [a]  # the non-leaf case: through a's own graph
        grads.append([x.numpy() for x in sitp.autograd.grad(y.sum(), leaves, retain_graph=True)])
    for x, y in zip(*grads):
        np.testing.assert_array_equal(x, y)


def test_recorded_shortcut_refuses_a_saved_tensor_written_since():
    """The version check works through the shortcut: writing to an operand whose value
    the gradient reads raises as torch does; writing to one it does not read does not."""
    x = sitp.randn(3).requires_grad_()
    h = x * 1.0
    y = h * h  # reads both operands
    h.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    x2 = sitp.randn(3).requires_grad_()
    h2 = x2 * 1.0
    z = h2 + 2.0  # add reads neither operand
    h2.add_(1.0)
    z.sum().backward()
    np.testing.assert_array_equal(x2.grad.numpy(), np.ones(3, np.float32))


def test_needs_input_grad_of_plain_arguments():
    seen = {}

    class Probe(sitp.autograd.Function):
        @staticmethod
        def forward(ctx, x, k, name, dims, flag):
            seen["needs"] = ctx.needs_input_grad
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g, None, None, None, None

    x = sitp.ones(2, requires_grad=True)
    Probe.apply(x, 2.0, "scale", (0,), True).sum().backward()
    assert seen["needs"] == (True, False, False, False, False)
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0])  # what backward returned


# ---------------------------------------------------------------- data, clipping
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_default_collate_equals_stack(dtype):
    from sitp.utils.data import default_collate

    g = sitp.Generator().manual_seed(7)
    rows = [(sitp.randn(2, 3, generator=g) * 3).to(getattr(sitp, dtype)) for _ in range(5)]
    fast = default_collate(rows)
    want = sitp.stack(rows, 0)
    assert fast.dtype is want.dtype and fast.shape == want.shape and fast.stride() == want.stride()
    np.testing.assert_array_equal(fast.numpy(), want.numpy())
    rows[0].view(-1)[0] = 7  # the batch is a copy
    np.testing.assert_array_equal(fast.numpy(), want.numpy())
    # samples that are views with offsets, and torch's collation of the same samples
    base = sitp.arange(40).reshape(8, 5)
    views = [base[i] for i in range(8)]
    from torch.utils.data import default_collate as torch_collate

    want = torch_collate([torch.from_numpy(v.numpy().copy()) for v in views])
    np.testing.assert_array_equal(default_collate(views).numpy(), want.numpy())


def test_default_collate_keeps_stack_for_other_batches():
    from sitp.utils.data.dataloader import _stack_rows

    a = sitp.arange(12.0).reshape(3, 4)
    assert _stack_rows([a.t(), a.t()]) is None  # not contiguous
    assert _stack_rows([a, a[:, :2]]) is None  # shapes differ (stack raises)
    assert _stack_rows([a, a.long()]) is None  # dtypes differ
    w = a.clone().requires_grad_()
    assert _stack_rows([w, a]) is None  # a graph to record
    out = sitp.utils.data.default_collate([w, a])
    assert out.grad_fn is not None
    with sitp.no_grad():
        assert _stack_rows([w, a]) is not None


def test_clip_grad_norm_scales_as_mul_does():
    g = sitp.Generator().manual_seed(8)
    ps = [sitp.randn(*s, generator=g).requires_grad_() for s in ((4, 3), (3,), (2, 2, 2))]
    for p in ps:
        p.grad = sitp.randn(*p.shape, generator=g) * 10
    before = [p.grad.numpy().copy() for p in ps]
    total = sitp.nn.utils.clip_grad_norm_(ps, 1.0)
    coef = 1.0 / (total.item() + 1e-6)
    assert coef < 1
    for p, b in zip(ps, before):  # bit for bit what mul_ gives
        np.testing.assert_array_equal(p.grad.numpy(), sitp.tensor(b).mul_(coef).numpy())
    # against torch: the same norm, the same clipped gradients
    tps = [torch.zeros(b.shape, requires_grad=True) for b in before]
    for t, b in zip(tps, before):
        t.grad = torch.from_numpy(b.copy())
    ttotal = torch.nn.utils.clip_grad_norm_(tps, 1.0)
    np.testing.assert_allclose(total.item(), ttotal.item(), rtol=1e-5)
    for p, t in zip(ps, tps):
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_whole_powers_are_products():
    """x**2, x**3 and x**1 are computed as products (the general path is libm's pow):
    x**2 is what pow gives (a float32 square is exact in float64, rounded once), x**3 what
    torch gives (two float32 products), x**1 is x; edge values included."""
    g = sitp.Generator().manual_seed(10)
    x = sitp.cat([sitp.randn(200, generator=g) * 10, sitp.tensor([0.0, -0.0, 1e-20, -3e38])])
    x = sitp.cat([x, sitp.tensor([float("inf"), float("-inf"), float("nan")])])
    xs = x.numpy()
    with np.errstate(over="ignore", invalid="ignore"):
        want2 = (xs.astype(np.float64) ** 2.0).astype(np.float32)
    np.testing.assert_array_equal(x.pow(2).numpy().view(np.int32), want2.view(np.int32))
    want3 = torch.from_numpy(xs.copy()).pow(3.0).numpy()
    np.testing.assert_array_equal(x.pow(3).numpy().view(np.int32), want3.view(np.int32))
    np.testing.assert_array_equal(x.pow(1.0).numpy().view(np.int32), xs.view(np.int32))
    want = torch.from_numpy(xs.copy()).pow(2.5).numpy()  # other powers: libm's pow, as before
    np.testing.assert_allclose(x.pow(2.5).numpy(), want, rtol=1e-6)


def _inplace_cases():
    """(name, make self, make other) for x.op_(other): each layout the in-place fast path
    (ops.binary_into) takes, and each it leaves to the general path."""
    rng = np.random.default_rng(7)
    base = rng.standard_normal((5, 13)).astype(np.float32)
    other = rng.standard_normal((5, 13)).astype(np.float32) + 3  # no zero to divide by
    yield "contiguous", lambda L: L.tensor(base), lambda L, x: L.tensor(other)
    yield "0-d other", lambda L: L.tensor(base), lambda L, x: L.tensor(np.float32(1.7))
    yield "float number", lambda L: L.tensor(base), lambda L, x: 0.3
    yield "int number", lambda L: L.tensor(base), lambda L, x: 3
    yield "itself", lambda L: L.tensor(base), lambda L, x: x
    yield "offset view", lambda L: L.tensor(base)[1:4], lambda L, x: L.tensor(other[:3])
    yield "row of a view", lambda L: L.tensor(base)[2], lambda L, x: L.tensor(other[0])
    yield "strided (general)", lambda L: L.tensor(base)[:, ::2], lambda L, x: L.tensor(other[:, :7])
    yield (
        "transposed (general)",
        lambda L: L.tensor(base).t(),
        lambda L, x: L.tensor(other.T.copy()),
    )
    yield "broadcast row (general)", lambda L: L.tensor(base), lambda L, x: L.tensor(other[0])
    yield (
        "float64",
        lambda L: L.tensor(base.astype(np.float64)),
        lambda L, x: L.tensor(other.astype(np.float64)),
    )
    yield (
        "large (general)",
        lambda L: L.tensor(np.tile(base, (1100, 1))),
        lambda L, x: L.tensor(np.tile(other, (1100, 1))),
    )


@pytest.mark.parametrize("op", ["add_", "sub_", "mul_", "div_"])
@pytest.mark.parametrize(
    "name,make,make_other", list(_inplace_cases()), ids=[n for n, *_ in _inplace_cases()]
)
def test_inplace_arithmetic_matches_torch(op, name, make, make_other):
    """x.add_(y) and friends give torch's bits on the fast path and on the general one,
    views with an offset and strided views included, and bump the version counter."""
    sx, tx = make(sitp), make(torch)
    so, to = make_other(sitp, sx), make_other(torch, tx)
    version = sx._version
    assert getattr(sx, op)(so) is sx and sx._version == version + 1
    getattr(tx, op)(to)
    np.testing.assert_array_equal(sx.numpy(), tx.numpy())


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_inplace_arithmetic_over_an_overlapping_view(op):
    """x[1:] op= x[:-1] of one storage (torch refuses such a partial overlap): every
    entry is computed from the values before the write, as from a copy."""
    flat = np.arange(1.0, 21.0, dtype=np.float32)
    x = sitp.tensor(flat)
    getattr(x[1:], op + "_")(x[:-1])
    expected = flat.copy()
    expected[1:] = getattr(flat[1:], f"__{'truediv' if op == 'div' else op}__")(flat[:-1])
    np.testing.assert_array_equal(x.numpy(), expected)


def test_inplace_arithmetic_keeps_the_general_checks():
    """What the fast path does not take still promotes, broadcasts and refuses as torch."""
    i = sitp.arange(6).reshape(2, 3)
    with pytest.raises(RuntimeError, match="can't be cast"):
        i.div_(sitp.ones(2, 3, dtype=sitp.int64))
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        sitp.ones(3).add_(sitp.ones(2, 3))
    x = sitp.ones(2, 3)
    x.add_(sitp.ones(2, 3, dtype=sitp.float64))  # float64 into float32: computed, then cast
    assert x.dtype is sitp.float32 and x.numpy().tolist() == [[2.0] * 3] * 2


@pytest.mark.parametrize("op", ["tanh", "exp", "relu", "neg", "sigmoid", "sqrt"])
def test_unary_contiguous_lane_reads_the_right_entries(op):
    """ops.unary's lane for a contiguous operand (one row, no row starts) reads the
    operand's own entries: a tensor that fills its storage, a contiguous view at an
    offset, one that ends before its storage does, and an empty one give the same bytes
    as the strided path on a copy laid out otherwise (its transpose's transpose)."""
    base = sitp.randn(5, 6, generator=sitp.Generator().manual_seed(3)).abs()
    for x in (base, base[1:], base[:3], base[2:4], base[5:]):
        assert x.is_contiguous()
        y = getattr(x, op)()
        strided = x.t().contiguous().t()  # the same values, not contiguous
        assert not strided.is_contiguous() or x.numel() <= 6
        ref = ops.unary(op, strided)
        assert y.shape == x.shape and y.stride() == ref.stride() and y.dtype is x.dtype
        assert y.numpy().tobytes() == ref.numpy().tobytes(), op
