"""Every op, forward and backward, against PyTorch (CPU), with hypothesis over
shapes, broadcasting, non-contiguous views and dtypes."""

import math
import types
from typing import NamedTuple

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import sitp
from helpers import assert_close, non_contiguous
from sitp._tensor import dispatch
from sitp.kernels import scalar

SETTINGS = settings(max_examples=25, deadline=None)


class Op(NamedTuple):
    """A row of the op tables: one op, called the same way in sitp and in torch."""

    op: str  # the scalar op it runs (sitp/kernels/scalar.py)
    fn: str  # its name in both: lib.fn(x, ...), x.fn(...), x.fn_(...), where torch has each
    args: tuple = ()  # after the tensor operands
    kwargs: dict = {}
    domain: str | None = None  # "pos", "nonzero" (unary), "a_pos", "b_pos" (binary)


# test id: Op. Inputs are uniform(-2, 2), moved into the row's domain. A new elementwise op
# gets a row here; the tests below then run it in every form torch has, in float32 and
# float64, on integer and bool tensors, on edge values, in the CUDA simulator
# (test_cuda_backend.py) and with in-place writes (test_inplace_autograd.py).
UNARY = {
    "neg": Op("neg", "neg"),
    "exp": Op("exp", "exp"),
    "log": Op("log", "log", domain="pos"),
    "sqrt": Op("sqrt", "sqrt", domain="pos"),
    "rsqrt": Op("rsqrt", "rsqrt", domain="pos"),
    "tanh": Op("tanh", "tanh"),
    "sigmoid": Op("sigmoid", "sigmoid"),
    "relu": Op("relu", "relu", domain="nonzero"),
    "abs": Op("abs", "abs", domain="nonzero"),
    "sin": Op("sin", "sin"),
    "cos": Op("cos", "cos"),
    "square": Op("square", "square"),
    "log1p": Op("log1p", "log1p", domain="pos"),
    "expm1": Op("expm1", "expm1"),
    "log10": Op("log10", "log10", domain="pos"),
    "log2": Op("log2", "log2", domain="pos"),
    "exp2": Op("exp2", "exp2"),
    "reciprocal": Op("reciprocal", "reciprocal", domain="pos"),
    "erf": Op("erf", "erf"),
    "pow2.5": Op("pow", "pow", (2.5,), domain="pos"),
    "pow3": Op("pow", "pow", (3,)),
    "pow-1": Op("pow", "pow", (-1,), domain="pos"),
    "clamp": Op("clamp", "clamp", (-0.5, 0.7), domain="nonzero"),
    "clamp_min": Op("clamp", "clamp_min", (0.1,), domain="nonzero"),
    "gelu": Op("gelu", "nn.functional.gelu"),
    "gelu_tanh": Op("gelu_tanh", "nn.functional.gelu", kwargs={"approximate": "tanh"}),
    "silu": Op("silu", "nn.functional.silu"),
    "sign": Op("sign", "sign"),
    "floor": Op("floor", "floor"),
    "ceil": Op("ceil", "ceil"),
    "round": Op("round", "round"),
}
BINARY = {
    "add": Op("add", "add"),
    "sub": Op("sub", "sub"),
    "mul": Op("mul", "mul"),
    "div": Op("div", "div", domain="b_pos"),
    "pow": Op("pow", "pow", domain="a_pos"),
    "maximum": Op("maximum", "maximum"),
    "minimum": Op("minimum", "minimum"),
    "atan2": Op("atan2", "atan2", domain="b_pos"),
    "hypot": Op("hypot", "hypot"),
    "logaddexp": Op("logaddexp", "logaddexp"),
}
# The scalar ops without a row above, and where each is checked against torch.
ELSEWHERE = {
    "gelu_grad": "the backward of UNARY's gelu",
    "gelu_tanh_grad": "the backward of UNARY's gelu_tanh",
    "tanh_backward": "the backward of UNARY's tanh",
    "sigmoid_backward": "the backward of UNARY's sigmoid",
    "logical_not": "test_compare_ops_like_torch",
    "floordiv": "test_binary_edges_like_torch",
    "remainder": "test_binary_edges_like_torch",
}


def _resolve(lib, path):
    """``lib.a.b`` for the path "a.b", or None."""
    for part in path.split("."):
        lib = getattr(lib, part, None)
    return lib


def forms(row):
    """The forms torch has for a row: "function" (torch.fn), "method", "inplace"."""
    out = ["function"] if _resolve(torch, row.fn) is not None else []
    if "." not in row.fn and hasattr(torch.Tensor, row.fn):
        out.append("method")
    if "." not in row.fn and hasattr(torch.Tensor, row.fn + "_"):
        out.append("inplace")
    return out


def main_form(row):
    """The method where torch has one, else the function."""
    return "method" if "method" in forms(row) else "function"


def call(lib, row, form, *operands):
    """Run a row in ``lib`` (sitp or torch) in one of its forms."""
    if form == "function":
        return _resolve(lib, row.fn)(*operands, *row.args, **row.kwargs)
    name = row.fn + ("_" if form == "inplace" else "")
    return getattr(operands[0], name)(*operands[1:], *row.args, **row.kwargs)


def _domain(arr, kind):
    if kind == "pos":
        return np.abs(arr) + arr.dtype.type(0.1)
    if kind == "nonzero":  # keep away from kinks where gradients are conventions
        return np.where(np.abs(arr) < 0.05, arr.dtype.type(0.3), arr)
    return arr


def _binary_inputs(shapes, seed, kind, dtype=np.float64):
    a = _domain(_rand(shapes[0], seed, dtype), "pos" if kind == "a_pos" else None)
    b = _domain(_rand(shapes[1], seed + 7, dtype), "pos" if kind == "b_pos" else None)
    return a, b


shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=5)
TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-10, atol=1e-12)}


def _rand(shape, seed, dtype=np.float64):
    return np.random.default_rng(seed).uniform(-2, 2, size=shape).astype(dtype)


@pytest.mark.parametrize("name", sorted(UNARY))
@SETTINGS
@given(
    shape=shapes,
    seed=st.integers(0, 2**16),
    kind=st.integers(0, 2),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_unary_forward_backward(name, shape, seed, kind, dtype):
    row = UNARY[name]
    arr = _domain(_rand(shape, seed, dtype), row.domain)
    s = non_contiguous(arr, kind).requires_grad_(True)
    t = torch.tensor(arr, requires_grad=True)
    ys, yt = call(sitp, row, main_form(row), s), call(torch, row, main_form(row), t)
    assert ys.dtype.np == yt.detach().numpy().dtype
    assert_close(ys, yt, **TOL[dtype])
    g = _rand(shape, seed + 1, dtype)
    ys.backward(sitp.tensor(g))
    yt.backward(torch.tensor(g))
    assert_close(s.grad, t.grad, **TOL[dtype])


@st.composite
def broadcastable(draw):
    """Two shapes that broadcast together."""
    out = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4))

    def sub(shape):
        k = draw(st.integers(0, len(shape)))
        return tuple(n if draw(st.booleans()) else 1 for n in shape[len(shape) - k :])

    return sub(out), sub(out)


@pytest.mark.parametrize("name", sorted(BINARY))
@SETTINGS
@given(
    shapes=broadcastable(),
    seed=st.integers(0, 2**16),
    kind=st.integers(0, 2),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_binary_forward_backward_broadcasting(name, shapes, seed, kind, dtype):
    row = BINARY[name]
    a, b = _binary_inputs(shapes, seed, row.domain, dtype)
    sa = non_contiguous(a, kind).requires_grad_(True)
    sb = sitp.tensor(b, requires_grad=True)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ys, yt = call(sitp, row, main_form(row), sa, sb), call(torch, row, main_form(row), ta, tb)
    assert ys.dtype.np == yt.detach().numpy().dtype
    assert_close(ys, yt, **TOL[dtype])
    g = _rand(tuple(yt.shape), seed + 3, dtype)
    ys.backward(sitp.tensor(g))
    yt.backward(torch.tensor(g))
    assert_close(sa.grad, ta.grad, **TOL[dtype])
    assert_close(sb.grad, tb.grad, **TOL[dtype])


def _run_form(lib, row, form, arrays, g):
    """A row in one form on leaves holding ``arrays``, then backward with ``g``: the output
    and the leaves' gradients. In place, the op writes a tensor computed from the first
    leaf (torch refuses to write a leaf that requires grad)."""
    leaves = [lib.tensor(a, requires_grad=True) for a in arrays]
    operands = [leaves[0] * 1, *leaves[1:]] if form == "inplace" else leaves
    y = call(lib, row, form, *operands)
    assert y is operands[0] or form != "inplace"
    y.backward(lib.tensor(g))
    return y, [x.grad for x in leaves]


def _check_forms(row, form, shapes):
    for dtype in (np.float32, np.float64):
        if len(shapes) == 1:
            arrays = [_domain(_rand(shapes[0], 11, dtype), row.domain)]
        else:
            arrays = list(_binary_inputs(shapes, 11, row.domain, dtype))
        g = _rand(shapes[0], 12, dtype)
        ys, gs = _run_form(sitp, row, form, arrays, g)
        yt, gt = _run_form(torch, row, form, arrays, g)
        assert ys.dtype.np == yt.detach().numpy().dtype
        assert_close(ys, yt, **TOL[dtype])
        for s_grad, t_grad in zip(gs, gt):
            assert_close(s_grad, t_grad, **TOL[dtype])


@pytest.mark.parametrize("name, form", [(n, f) for n in sorted(UNARY) for f in forms(UNARY[n])])
def test_unary_forms_like_torch(name, form):
    """Every form torch has (torch.fn(x), x.fn(), x.fn_()) is in sitp, with torch's values
    and gradients, in float32 and float64, on an odd size."""
    _check_forms(UNARY[name], form, [(3, 5)])


@pytest.mark.parametrize("name, form", [(n, f) for n in sorted(BINARY) for f in forms(BINARY[n])])
def test_binary_forms_like_torch(name, form):
    _check_forms(BINARY[name], form, [(3, 5), (5,)])


INTS = {
    "int64": (np.array([-3, -2, -1, 0, 1, 2, 5]), np.array([1, 2, 3, 1, 2, 3, 1])),
    "bool": (
        np.array([True, False, True, False, True]),
        np.array([True, True, False, False, True]),
    ),
}


def _like_torch_or_refused(run):
    """run(torch) and run(sitp) agree in dtype and values, unless torch refuses the input."""
    try:
        want = run(torch)
    except (RuntimeError, NotImplementedError):
        return  # torch refuses this dtype (abs of bool, hypot of int64, ...)
    got = run(sitp)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert_close(got, want, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", sorted(INTS))
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_on_integers_like_torch(name, dtype):
    """int64 and bool inputs: torch's result dtype (float32 for exp, sin, sigmoid, ...)."""
    row, arr = UNARY[name], INTS[dtype][0]
    _like_torch_or_refused(lambda L: call(L, row, main_form(row), L.tensor(arr)))


@pytest.mark.parametrize("dtype", sorted(INTS))
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_on_integers_like_torch(name, dtype):
    row, (a, b) = BINARY[name], INTS[dtype]
    _like_torch_or_refused(lambda L: call(L, row, main_form(row), L.tensor(a), L.tensor(b)))


def test_float_only_binary_ops_refuse_integers_as_torch():
    x = sitp.tensor([1, 2])
    for name in ("hypot", "logaddexp"):
        with pytest.raises(NotImplementedError, match=f"{name}.*int64"):
            getattr(sitp, name)(x, x)
        with pytest.raises(NotImplementedError):
            getattr(torch, name)(torch.tensor([1, 2]), torch.tensor([1, 2]))
        assert getattr(x, name)(0.5).dtype is sitp.float32  # a float operand promotes


EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1e-30, 1e30, -1e30, math.inf, -math.inf]
EDGES += [math.nan]
EDGE_TOL = {np.float32: dict(rtol=3e-6, atol=0), np.float64: dict(rtol=1e-13, atol=0)}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_edges_like_torch(name):
    """Zeros of both signs, halves (round), infinities, NaN, huge and tiny values."""
    row = UNARY[name]
    for dtype in (np.float32, np.float64):
        arr = np.array(EDGES, dtype)
        if name == "gelu" and dtype == np.float32:  # torch's float32 GELU of inf is NaN
            arr = arr[arr != math.inf]
        got = call(sitp, row, main_form(row), sitp.tensor(arr))
        assert_close(got, call(torch, row, main_form(row), torch.tensor(arr)), **EDGE_TOL[dtype])


# floordiv and remainder have no gradient (so no row in BINARY): their operators here.
OPERATORS = {"floordiv": Op("floordiv", "__floordiv__"), "remainder": Op("remainder", "__mod__")}


@pytest.mark.parametrize("name", sorted(BINARY) + sorted(OPERATORS))
def test_binary_edges_like_torch(name):
    row = BINARY.get(name) or OPERATORS[name]
    specials = [0.0, -0.0, 1.0, -1.0, 2.5, -3.0, math.inf, -math.inf, math.nan]
    pairs = np.array([(x, y) for x in specials for y in specials])
    for dtype in (np.float32, np.float64):
        a, b = pairs[:, 0].astype(dtype), pairs[:, 1].astype(dtype)
        got = call(sitp, row, "method", sitp.tensor(a), sitp.tensor(b))
        want = call(torch, row, "method", torch.tensor(a), torch.tensor(b))
        assert_close(got, want, **EDGE_TOL[dtype])


def test_compare_ops_like_torch():
    """Every comparison code of sitp/kernels/scalar.py, through the backend, against
    torch's function of the same name; and logical_not."""
    a = np.array([0.0, 1.0, -1.0, 2.0, math.nan, math.inf, 0.0])
    b = np.array([0.0, 2.0, -1.0, 1.0, 1.0, math.inf, math.nan])
    sa, sb = sitp.tensor(a), sitp.tensor(b)
    for name in scalar.COMPARE:
        got = dispatch.of(sa, sb).compare(name, sa, sb)
        assert_close(got, getattr(torch, name)(torch.tensor(a), torch.tensor(b)))
    assert_close(sitp.logical_not(sa), torch.logical_not(torch.tensor(a)))


def test_reduce_ops_like_torch():
    """Every reduction code, through the backend, along an odd dimension."""
    arr = _rand((3, 5), 4)
    arr[1, 2] = 0.0
    refs = {"sum": torch.sum, "prod": torch.prod, "max": torch.amax, "min": torch.amin}
    refs.update({"any": torch.any, "all": torch.all})
    assert set(refs) == set(scalar.REDUCE)
    for name, ref in refs.items():
        for values in (arr, arr > 0):
            x = sitp.tensor(values)
            got = dispatch.of(x).reduce(name, x, (1,))
            assert_close(got, ref(torch.tensor(values), 1), rtol=1e-12)


def test_every_scalar_op_is_tested():
    """Each op of the scalar functions runs in some row of the tables above, or in a test
    that ELSEWHERE names: a new op without its row fails here."""
    assert set(scalar.UNARY) <= {r.op for r in UNARY.values()} | set(ELSEWHERE)
    assert set(scalar.BINARY) <= {r.op for r in BINARY.values()} | set(ELSEWHERE)
    assert set(ELSEWHERE) <= set(scalar.UNARY) | set(scalar.BINARY)


@pytest.mark.parametrize(
    "fn, table, args",
    [
        (scalar.unary, scalar.UNARY, (0.5, 2.0, 3.0)),
        (scalar.binary, scalar.BINARY, (0.5, 0.25)),
        (scalar.compare, scalar.COMPARE, (0.5, 0.25)),
    ],
    ids=["unary", "binary", "compare"],
)
def test_every_op_code_has_its_branch(fn, table, args):
    """A code without its branch falls through to the end of the chain, whose value is
    NO_BRANCH: the plain Python function, run with that value replaced by a marker, must
    return the marker for no code of the table (and for the first code past it)."""
    marker = object()
    probe = types.FunctionType(
        fn.__code__, {**fn.__globals__, "NO_BRANCH": marker, "NO_BRANCH_BOOL": marker}
    )
    missing = [name for name, code in table.items() if probe(code, *args) is marker]
    assert not missing, f"scalar.{fn.__name__} has no branch for {missing}"
    assert probe(len(table), *args) is marker
    assert sorted(table.values()) == list(range(len(table)))


def test_maximum_ties_split_gradient_like_torch():
    a = sitp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = sitp.tensor([1.0, 5.0, 3.0], requires_grad=True)
    a.maximum(b).sum().backward()
    ta = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    tb = torch.tensor([1.0, 5.0, 3.0], requires_grad=True)
    ta.maximum(tb).sum().backward()
    assert_close(a.grad, ta.grad)
    assert_close(b.grad, tb.grad)


def test_scalar_operands_and_promotion():
    x = sitp.tensor([1, 2, 3])
    assert (x * 2).dtype is sitp.int64
    assert (x * 2.5).dtype is sitp.float32
    assert (x / 2).dtype is sitp.float32 and (x / 2).tolist() == [0.5, 1.0, 1.5]
    f = sitp.tensor([1.0, 2.0])
    assert (f * 2.5).dtype is sitp.float32
    assert (f + sitp.tensor([1.0], dtype=sitp.float64)).dtype is sitp.float64
    assert (f + sitp.tensor(1.0, dtype=sitp.float64)).dtype is sitp.float32
    assert (2 - f).tolist() == [1.0, 0.0]
    assert (1 / f).tolist() == [1.0, 0.5]
    assert (2**f).tolist() == [2.0, 4.0]
    assert (sitp.tensor([True, False]) + 1).tolist() == [2, 1]
    assert (x // 2).tolist() == [0, 1, 1] and (x % 2).tolist() == [1, 0, 1]
    with pytest.raises(RuntimeError, match=r"\(2, 3\) and \(4,\)"):
        sitp.zeros(2, 3) + sitp.zeros(4)
    with pytest.raises(TypeError):
        sitp.zeros(2) + "a"


def test_comparisons_and_logic_match_torch():
    a = np.array([[1.0, 2, 3], [3, 2, 1]])
    b = np.array([2.0, 2, 2])
    for op in ["__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"]:
        assert_close(
            getattr(sitp.tensor(a), op)(sitp.tensor(b)),
            getattr(torch.tensor(a), op)(torch.tensor(b)),
        )
    m = sitp.tensor(a) > 1.5
    tm = torch.tensor(a) > 1.5
    assert_close(m & ~m, tm & ~tm)
    assert_close(m | (sitp.tensor(a) < 1.5), tm | (torch.tensor(a) < 1.5))
    assert_close(m.any(1), tm.any(1))
    assert_close(m.all(0), tm.all(0))


REDUCTIONS = {
    "sum": (lambda x, d, k: x.sum(d, keepdim=k), lambda x, d, k: x.sum(d, keepdim=k)),
    "mean": (lambda x, d, k: x.mean(d, keepdim=k), lambda x, d, k: x.mean(d, keepdim=k)),
    "var": (lambda x, d, k: x.var(d, keepdim=k), lambda x, d, k: x.var(d, keepdim=k)),
    "var0": (
        lambda x, d, k: x.var(d, keepdim=k, correction=0),
        lambda x, d, k: x.var(d, keepdim=k, correction=0),
    ),
    "std": (lambda x, d, k: x.std(d, keepdim=k), lambda x, d, k: x.std(d, keepdim=k)),
    "amax": (lambda x, d, k: x.amax(d, keepdim=k), lambda x, d, k: x.amax(d, keepdim=k)),
    "amin": (lambda x, d, k: x.amin(d, keepdim=k), lambda x, d, k: x.amin(d, keepdim=k)),
    "logsumexp": (
        lambda x, d, k: x.logsumexp(d, keepdim=k),
        lambda x, d, k: x.logsumexp(d, keepdim=k),
    ),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@SETTINGS
@given(
    shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=2, max_side=5),
    data=st.data(),
    seed=st.integers(0, 2**16),
    kind=st.integers(0, 2),
)
def test_reductions_forward_backward(name, shape, data, seed, kind):
    fs, ft = REDUCTIONS[name]
    dims = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    keep = data.draw(st.booleans())
    arr = _rand(shape, seed)
    s = non_contiguous(arr, kind).requires_grad_(True)
    t = torch.tensor(arr, requires_grad=True)
    ys, yt = fs(s, dims, keep), ft(t, dims, keep)
    assert_close(ys, yt, rtol=1e-10, atol=1e-12)
    g = _rand(tuple(yt.shape), seed + 1)
    ys.backward(sitp.tensor(g))
    yt.backward(torch.tensor(g))
    assert_close(s.grad, t.grad, rtol=1e-9, atol=1e-12)


def test_full_reductions_and_float32_accuracy():
    arr = np.random.default_rng(0).standard_normal((257, 33)).astype(np.float32)
    s, t = sitp.tensor(arr), torch.tensor(arr)
    assert_close(s.sum(), t.sum(), rtol=1e-5)
    assert_close(s.mean(), t.mean(), rtol=1e-4, atol=1e-6)
    assert_close(s.max(), t.max())
    assert_close(s.min(), t.min())
    assert_close(s.argmax(), t.argmax())
    assert_close(s.T.sum(0), t.T.sum(0), rtol=1e-5)
    big = sitp.full((10**6,), 0.1)
    assert abs(big.sum().item() - 1e5) < 1e-1  # float64 accumulation
    assert sitp.tensor([1, 2, 3]).sum().dtype is sitp.int64
    assert sitp.tensor([True, True, False]).sum().item() == 2
    with pytest.raises(RuntimeError, match="floating point"):
        sitp.tensor([1, 2]).mean()


@pytest.mark.parametrize("is_max", [True, False])
def test_max_min_dim_values_indices_and_grad(is_max):
    arr = np.array([[1.0, 5.0, 5.0, 2.0], [7.0, 0.0, 7.0, 7.0], [3.0, 3.0, 1.0, 4.0]])
    s = sitp.tensor(arr, requires_grad=True)
    t = torch.tensor(arr, requires_grad=True)
    rs = s.max(1) if is_max else s.min(1)
    rt = t.max(1) if is_max else t.min(1)
    assert_close(rs.values, rt.values)
    assert_close(rs.indices, rt.indices)
    (rs.values * sitp.tensor([1.0, 2.0, 3.0])).sum().backward()
    (rt.values * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert_close(s.grad, t.grad)
    # full max/min: ties share the gradient evenly
    s.grad = None
    t.grad = None
    (s.max() if is_max else s.min()).backward()
    (t.max() if is_max else t.min()).backward()
    assert_close(s.grad, t.grad)
    v, i = s.max(0, keepdim=True)
    assert v.shape == (1, 4) and i.shape == (1, 4)


def test_max_propagates_nan_and_empty_errors():
    x = sitp.tensor([1.0, math.nan, 3.0])
    assert math.isnan(x.max().item())
    assert math.isnan(x.max(0).values.item())
    with pytest.raises(RuntimeError, match="numel"):
        sitp.zeros(0).max()
    with pytest.raises(IndexError, match="size 0"):
        sitp.zeros(2, 0).max(1)


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
@SETTINGS
@given(
    shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6),
    data=st.data(),
    seed=st.integers(0, 2**16),
    kind=st.integers(0, 2),
)
def test_softmax_forward_backward(fn, shape, data, seed, kind):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    arr = _rand(shape, seed) * 10
    s = non_contiguous(arr, kind).requires_grad_(True)
    t = torch.tensor(arr, requires_grad=True)
    ys, yt = getattr(s, fn)(dim), getattr(t, fn)(dim)
    assert_close(ys, yt, rtol=1e-10, atol=1e-12)
    g = _rand(shape, seed + 1)
    ys.backward(sitp.tensor(g))
    yt.backward(torch.tensor(g))
    assert_close(s.grad, t.grad, rtol=1e-9, atol=1e-12)


def test_softmax_is_stable_and_masked_rows():
    x = sitp.tensor([[1000.0, 1000.0], [-math.inf, 0.0]])
    assert x.softmax(-1).tolist() == [[0.5, 0.5], [0.0, 1.0]]
    ls = x.log_softmax(-1)
    assert abs(ls[0, 0].item() - math.log(0.5)) < 1e-6


@SETTINGS
@given(
    b=st.integers(0, 2),
    m=st.integers(1, 9),
    k=st.integers(1, 9),
    n=st.integers(1, 9),
    seed=st.integers(0, 2**16),
    ta=st.booleans(),
    tb=st.booleans(),
)
def test_matmul_forward_backward(b, m, k, n, seed, ta, tb):
    batch = (2, 3)[:b]
    A = _rand(batch + (m, k), seed)
    B = _rand((k, n) if b == 1 else batch + (k, n), seed + 1)
    sa = sitp.tensor(np.ascontiguousarray(np.swapaxes(A, -1, -2))).mT if ta else sitp.tensor(A)
    sb = sitp.tensor(np.ascontiguousarray(np.swapaxes(B, -1, -2))).mT if tb else sitp.tensor(B)
    sa.requires_grad_(False)
    sa = sa.detach().requires_grad_(True) if not ta else sa
    sa_leaf = sa if not ta else None
    A_t, B_t = torch.tensor(A, requires_grad=True), torch.tensor(B, requires_grad=True)
    leaf_a = sitp.tensor(A, requires_grad=True)
    leaf_b = sitp.tensor(B, requires_grad=True)
    # non-contiguous operands through a differentiable transpose
    xa = leaf_a.mT.contiguous().mT if ta else leaf_a
    xb = leaf_b.mT.contiguous().mT if tb else leaf_b
    ys, yt = xa @ xb, A_t @ B_t
    assert_close(ys, yt, rtol=1e-10, atol=1e-12)
    g = _rand(tuple(yt.shape), seed + 2)
    ys.backward(sitp.tensor(g))
    yt.backward(torch.tensor(g))
    assert_close(leaf_a.grad, A_t.grad, rtol=1e-10, atol=1e-12)
    assert_close(leaf_b.grad, B_t.grad, rtol=1e-10, atol=1e-12)
    del sa_leaf, sb


@pytest.mark.parametrize(
    "sa, sb",
    [
        ((4,), (4,)),
        ((3, 4), (4,)),
        ((4,), (4, 5)),
        ((2, 3, 4), (4,)),
        ((4,), (2, 4, 3)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((33, 17), (17, 29)),
    ],
)
def test_matmul_shapes_like_torch(sa, sb):
    a, b = _rand(sa, 1).astype(np.float32), _rand(sb, 2).astype(np.float32)
    s_a, s_b = sitp.tensor(a, requires_grad=True), sitp.tensor(b, requires_grad=True)
    t_a, t_b = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ys, yt = s_a @ s_b, t_a @ t_b
    assert_close(ys, yt, rtol=1e-5, atol=1e-5)
    ys.sum().backward()
    yt.sum().backward()
    assert_close(s_a.grad, t_a.grad, rtol=1e-5, atol=1e-5)
    assert_close(s_b.grad, t_b.grad, rtol=1e-5, atol=1e-5)


def test_matmul_errors_name_shapes():
    with pytest.raises(RuntimeError, match=r"\(2, 3\) @ \(4, 5\)"):
        sitp.zeros(2, 3) @ sitp.zeros(4, 5)
    with pytest.raises(RuntimeError, match="at least 1D"):
        sitp.zeros(()) @ sitp.zeros(3)
    with pytest.raises(RuntimeError, match="broadcast"):
        sitp.zeros(2, 3, 4) @ sitp.zeros(3, 4, 5)
    assert (sitp.tensor([[1, 2]]) @ sitp.tensor([[3], [4]])).tolist() == [[11]]


def test_indexing_gradients_accumulate_repeats():
    arr = _rand((5, 3), 0)
    s = sitp.tensor(arr, requires_grad=True)
    t = torch.tensor(arr, requires_grad=True)
    idx = [0, 2, 2, 4, 0, 0]
    ys = s[sitp.tensor(idx)] * sitp.arange(18).view(6, 3).double()
    yt = t[torch.tensor(idx)] * torch.arange(18).view(6, 3).double()
    ys.sum().backward()
    yt.sum().backward()
    assert_close(s.grad, t.grad)
    s.grad, t.grad = None, None
    (s[1:4:2, :: -1 + 2] ** 2).sum().backward()
    (t[1:4:2, ::1] ** 2).sum().backward()
    assert_close(s.grad, t.grad)
    s.grad, t.grad = None, None
    m = arr > 0
    (s[sitp.tensor(m)] * 3).sum().backward()
    (t[torch.tensor(m)] * 3).sum().backward()
    assert_close(s.grad, t.grad)


@SETTINGS
@given(
    shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5),
    data=st.data(),
    seed=st.integers(0, 2**16),
)
def test_gather_forward_backward(shape, data, seed):
    dim = data.draw(st.integers(0, len(shape) - 1))
    ishape = tuple(
        data.draw(st.integers(1, n)) if d != dim else data.draw(st.integers(1, 6))
        for d, n in enumerate(shape)
    )
    rng = np.random.default_rng(seed)
    index = rng.integers(0, shape[dim], size=ishape)
    arr = _rand(shape, seed)
    s = sitp.tensor(arr, requires_grad=True)
    t = torch.tensor(arr, requires_grad=True)
    ys, yt = s.gather(dim, sitp.tensor(index)), t.gather(dim, torch.tensor(index))
    assert_close(ys, yt)
    g = _rand(ishape, seed + 1)
    ys.backward(sitp.tensor(g))
    yt.backward(torch.tensor(g))
    assert_close(s.grad, t.grad, rtol=1e-12, atol=1e-12)


def test_gather_and_index_select_errors():
    x = sitp.zeros(3, 4)
    with pytest.raises(RuntimeError, match="out of bounds"):  # torch's type for gather
        x.gather(1, sitp.tensor([[0, 4]]))
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        x.gather(1, sitp.tensor([0]))
    assert_close(
        sitp.arange(12).view(3, 4).index_select(1, sitp.tensor([3, 0])),
        torch.arange(12).view(3, 4).index_select(1, torch.tensor([3, 0])),
    )


def test_cat_stack_split_where_masked_fill_grads():
    a0, b0 = _rand((2, 3), 0), _rand((4, 3), 1)
    sa, sb = sitp.tensor(a0, requires_grad=True), sitp.tensor(b0, requires_grad=True)
    ta, tb = torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    w = np.arange(18.0).reshape(6, 3)
    ys = sitp.cat([sa, sb], 0) * sitp.tensor(w)
    yt = torch.cat([ta, tb], 0) * torch.tensor(w)
    p1s, p2s = ys.split([1, 5])
    p1t, p2t = yt.split([1, 5])
    (p1s.sum() * 2 + sitp.stack([p2s, p2s]).pow(2).sum()).backward()
    (p1t.sum() * 2 + torch.stack([p2t, p2t]).pow(2).sum()).backward()
    assert_close(sa.grad, ta.grad)
    assert_close(sb.grad, tb.grad)
    sa.grad, ta.grad = None, None
    cond = a0 > 0
    ys = sitp.where(sitp.tensor(cond), sa * 2, 0.5) + sa.masked_fill(sitp.tensor(cond[0]), -1.0)
    yt = torch.where(torch.tensor(cond), ta * 2, 0.5) + ta.masked_fill(torch.tensor(cond[0]), -1.0)
    assert_close(ys, yt)
    (ys * ys).sum().backward()
    (yt * yt).sum().backward()
    assert_close(sa.grad, ta.grad)


def test_tril_triu_cumsum_one_hot_topk_flip():
    arr = _rand((2, 4, 5), 3)
    s = sitp.tensor(arr, requires_grad=True)
    t = torch.tensor(arr, requires_grad=True)
    for d in (-1, 0, 2):
        assert_close(s.tril(d), t.tril(d))
        assert_close(s.triu(d), t.triu(d))
    (s.tril() * 3).sum().backward()
    (t.tril() * 3).sum().backward()
    assert_close(s.grad, t.grad)
    assert_close(s.detach().cumsum(1), t.detach().cumsum(1))
    assert_close(
        sitp.one_hot(sitp.tensor([2, 0, 1])), torch.nn.functional.one_hot(torch.tensor([2, 0, 1]))
    )
    v, i = s.detach().topk(3, dim=-1)
    tv, ti = t.detach().topk(3, dim=-1)
    assert_close(v, tv)
    assert_close(i, ti)
    assert_close(s.detach().flip(1), t.detach().flip(1))
    assert_close(s.detach().repeat(2, 1, 3), t.detach().repeat(2, 1, 3))


def test_casts_are_differentiable():
    s = sitp.tensor([1.5, -2.0], requires_grad=True)
    y = (s.double() * 3).float().sum()
    y.backward()
    assert s.grad.tolist() == [3.0, 3.0] and s.grad.dtype is sitp.float32


def test_permute_expand_view_grads():
    arr = _rand((2, 3, 1), 5)
    s = sitp.tensor(arr, requires_grad=True)
    t = torch.tensor(arr, requires_grad=True)
    w = _rand((3, 4, 2), 6)
    ys = (s.permute(1, 2, 0).expand(3, 4, 2) * sitp.tensor(w)).reshape(12, 2).T.sum(0)
    yt = (t.permute(1, 2, 0).expand(3, 4, 2) * torch.tensor(w)).reshape(12, 2).T.sum(0)
    g = _rand((12,), 7)
    ys.backward(sitp.tensor(g))
    yt.backward(torch.tensor(g))
    assert_close(s.grad, t.grad)


def test_integer_ops_stay_integer():
    x = sitp.tensor([[3, -1], [2, 5]])
    assert_close(x * x + 1, torch.tensor([[3, -1], [2, 5]]) ** 2 + 1)
    assert (x.abs()).tolist() == [[3, 1], [2, 5]]
    assert x.max().item() == 5 and x.argmin().item() == 1
    assert x.sum(0).tolist() == [5, 4]
    assert (x.exp()).dtype is sitp.float32


@pytest.mark.parametrize(
    "p, dim, keepdim",
    [(2, None, False), (1, 1, True), (3, 0, False), (math.inf, 1, False), ("fro", None, False)],
)
def test_norm_forward_backward(p, dim, keepdim):
    arr = _rand((4, 5), 11)
    s = sitp.tensor(arr, requires_grad=True)
    t = torch.tensor(arr, requires_grad=True)
    ys, yt = s.norm(p, dim, keepdim), t.norm(p, dim, keepdim)
    assert_close(ys, yt, rtol=1e-10)
    ys.sum().backward()
    yt.sum().backward()
    assert_close(s.grad, t.grad, rtol=1e-9)


@pytest.mark.parametrize(
    "name, kw",
    [
        ("add", {}),
        ("add", {"alpha": 2.5}),
        ("sub", {"alpha": -3}),
        ("mul", {}),
        ("div", {}),
        ("div", {"rounding_mode": "floor"}),
        ("div", {"rounding_mode": "trunc"}),
        ("eq", {}),
        ("ne", {}),
        ("lt", {}),
        ("gt", {}),
        ("le", {}),
        ("ge", {}),
    ],
)
@pytest.mark.parametrize("other", ["tensor", "broadcast", "number"])
def test_top_level_arithmetic_and_comparisons_as_torch(name, kw, other):
    """torch.add(x, y, alpha=...), torch.div(x, y, rounding_mode=...), torch.lt(x, y)...:
    the functional spellings torch scripts use, against torch's values and dtypes."""
    r = np.random.default_rng(len(name) + len(kw))
    x = np.round(r.standard_normal((3, 4)) * 4, 1)
    y = {
        "tensor": np.round(r.standard_normal((3, 4)) * 4, 1) + 0.5,
        "broadcast": np.round(r.standard_normal(4) * 4, 1) + 0.5,
        "number": 1.5,
    }[other]
    wrap = (lambda lib, v: v) if other == "number" else (lambda lib, v: lib.tensor(v))
    got = getattr(sitp, name)(sitp.tensor(x), wrap(sitp, y), **kw)
    want = getattr(torch, name)(torch.tensor(x), wrap(torch, y), **kw)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
