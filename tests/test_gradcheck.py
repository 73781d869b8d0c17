"""sitp.autograd.gradcheck: every op's backward against central differences.

The first half checks the checker (it passes on correct backward passes, it
raises on a wrong one and says where); the second half runs it over the table
of local derivatives, with hypothesis drawing shapes where that is cheap.
All inputs are float64: central differences in float32 are too inexact.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, mutually_broadcastable_shapes

import sitp
from sitp.autograd import Function
from sitp.autograd.gradcheck import GradcheckError, gradcheck, numerical_grad

F64 = sitp.float64
FEW = settings(max_examples=8, deadline=None)


def leaf(shape, seed=0, low=-1.0, high=1.0):
    """A float64 leaf with requires_grad, values drawn uniformly from [low, high)."""
    rng = np.random.default_rng(seed)
    return sitp.tensor(rng.uniform(low, high, size=shape), dtype=F64, requires_grad=True)


small_shapes = array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3)


# ------------------------------------------------------------------ the checker itself
class Square(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * g * x


class WrongSquare(Square):
    """d(x²)/dx with the 2 forgotten: the kind of slip gradcheck exists for."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x


class WrongMul(Function):
    """a * b whose backward gives b's gradient as g * b: it should be g * a."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g * b, g * b


def test_gradcheck_passes_on_a_correct_custom_function():
    assert gradcheck(Square.apply, (leaf((2, 3)),))


def test_gradcheck_raises_on_a_wrong_backward():
    with pytest.raises(GradcheckError) as info:
        gradcheck(WrongSquare.apply, (leaf((2, 3), low=0.5, high=1.0),))
    msg = str(info.value)
    assert "input 0" in msg and "numerical" in msg and "analytical" in msg
    assert isinstance(info.value, RuntimeError)


def test_gradcheck_names_the_wrong_input_and_its_entry():
    a, b = leaf((3,), seed=1, low=1.0, high=2.0), leaf((3,), seed=2, low=3.0, high=4.0)
    with pytest.raises(GradcheckError, match=r"with respect to input 1"):
        gradcheck(WrongMul.apply, (a, b))
    # the worst entry is reported with its numerical and analytical values:
    # d(a*b)_k / d b_k is a_k (numerical) but the backward says b_k.
    try:
        gradcheck(WrongMul.apply, (a, b))
    except GradcheckError as e:
        k = int(np.argmax(np.abs(b.detach().numpy() - a.detach().numpy())))
        assert f"d output[{k}] / d input[{k}]" in str(e)
        assert f"numerical {a.detach().numpy()[k]:.8g}" in str(e)
        assert f"analytical {b.detach().numpy()[k]:.8g}" in str(e)


def test_gradcheck_can_return_false_instead():
    assert (
        gradcheck(WrongSquare.apply, (leaf((4,), low=1, high=2),), raise_exception=False) is False
    )


def test_gradcheck_is_exported_from_sitp_autograd():
    x = leaf((3,))
    assert sitp.autograd.gradcheck(lambda t: t.exp(), (x,))
    with pytest.raises(GradcheckError):
        sitp.autograd.gradcheck(WrongSquare.apply, leaf((3,), low=1, high=2))


def test_gradcheck_skips_inputs_without_requires_grad_and_leaves_grad_alone():
    x, c = leaf((3,)), sitp.tensor([1.0, 2.0, 3.0], dtype=F64)
    x.grad = sitp.ones(3, dtype=F64)
    assert gradcheck(lambda a, b, k: (a * b * k).sin(), (x, c, 2.5))
    assert x.grad.tolist() == [1.0, 1.0, 1.0] and c.grad is None


def test_gradcheck_needs_an_input_that_requires_grad():
    with pytest.raises(ValueError, match="requires_grad"):
        gradcheck(lambda t: t.exp(), (sitp.zeros(2, dtype=F64),))


def test_gradcheck_warns_on_float32():
    x = sitp.tensor([0.1, 0.2], requires_grad=True)
    with pytest.warns(UserWarning, match="float64"):
        gradcheck(lambda t: t * 2, (x,), eps=1e-3, atol=1e-2)


def test_gradcheck_an_output_that_does_not_depend_on_the_input():
    x = leaf((2,))
    assert gradcheck(lambda t: (sitp.ones(2, dtype=F64), t * 3), (x,))
    # detach() hides a dependence from the engine; the numbers still see it
    with pytest.raises(GradcheckError, match="analytical 0"):
        gradcheck(lambda t: t.detach() * 2, (x,))


def test_numerical_grad_of_a_float_function():
    assert numerical_grad(math.exp, 1.0) == pytest.approx(math.e, rel=1e-8)


def test_numerical_grad_of_a_tensor_function_matches_backward():
    x = leaf((2, 3), seed=3)
    f = lambda t: (t.exp() * t.sin() ** 2).sum()  # noqa: E731
    f(x).backward()
    np.testing.assert_allclose(numerical_grad(f, x).numpy(), x.grad.numpy(), rtol=1e-6)


# ------------------------------------------------------------------ elementwise
UNARY = {
    "exp": (lambda t: t.exp(), -1, 1),
    "log": (lambda t: t.log(), 0.5, 2),
    "tanh": (lambda t: t.tanh(), -2, 2),
    "sigmoid": (lambda t: t.sigmoid(), -3, 3),
    "sin": (lambda t: t.sin(), -3, 3),
    "cos": (lambda t: t.cos(), -3, 3),
    "sqrt": (lambda t: t.sqrt(), 0.5, 2),
    "rsqrt": (lambda t: t.rsqrt(), 0.5, 2),
    "pow_2.5": (lambda t: t**2.5, 0.5, 2),
    "reciprocal": (lambda t: 1 / t, 0.5, 2),
    "relu": (lambda t: t.relu(), 0.1, 1),  # away from the kink
    "abs": (lambda t: t.abs(), 0.1, 1),
    "square": (lambda t: t.square(), -1, 1),
    "log1p": (lambda t: t.log1p(), -0.5, 1),
    "expm1": (lambda t: t.expm1(), -1, 1),
    "log10": (lambda t: t.log10(), 0.5, 2),
    "log2": (lambda t: t.log2(), 0.5, 2),
    "exp2": (lambda t: t.exp2(), -1, 1),
    "erf": (lambda t: t.erf(), -1, 1),
    "neg": (lambda t: -t, -1, 1),
    "clamp": (lambda t: t.clamp(-0.5, 0.5), -0.4, 0.4),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@FEW
@given(shape=small_shapes)
def test_unary(name, shape):
    fn, low, high = UNARY[name]
    assert gradcheck(fn, (leaf(shape, low=low, high=high),))


BINARY = {
    "add": (lambda a, b: a + b, -1, 1),
    "sub": (lambda a, b: a - b, -1, 1),
    "mul": (lambda a, b: a * b, -1, 1),
    "div": (lambda a, b: a / b, 0.5, 2),
    "pow": (lambda a, b: a**b, 0.5, 2),
    "maximum": (lambda a, b: sitp.maximum(a, b), -1, 1),
    "atan2": (lambda a, b: a.atan2(b), 0.5, 2),
    "hypot": (lambda a, b: a.hypot(b), 0.5, 2),
    "logaddexp": (lambda a, b: a.logaddexp(b), -2, 2),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@FEW
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3))
def test_broadcasting_binary(name, shapes):
    fn, low, high = BINARY[name]
    a, b = shapes.input_shapes
    assert gradcheck(fn, (leaf(a, 1, low, high), leaf(b, 2, low, high)))


def test_binary_with_a_python_scalar_and_a_0d_tensor():
    x, s = leaf((2, 3)), leaf((), seed=5, low=1, high=2)
    assert gradcheck(lambda a, b: (3 - a) / b + 2 * a, (x, s))


def test_a_value_used_twice_accumulates():
    x = leaf((3,))
    assert gradcheck(lambda t: t * t.exp() + t, (x,))


# ------------------------------------------------------------------ matmul, softmax
@pytest.mark.parametrize(
    "sa,sb",
    [
        ((2, 3), (3, 4)),
        ((3,), (3, 2)),
        ((2, 3), (3,)),
        ((3,), (3,)),
        ((2, 2, 3), (3, 2)),
        ((2, 1, 2, 3), (3, 3, 2)),
    ],
)
def test_matmul(sa, sb):
    assert gradcheck(lambda a, b: a @ b, (leaf(sa, 1), leaf(sb, 2)))


@pytest.mark.parametrize("log", [False, True])
@FEW
@given(shape=small_shapes, data=st.data())
def test_softmax(log, shape, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    fn = (lambda t: t.log_softmax(dim)) if log else (lambda t: t.softmax(dim))
    assert gradcheck(fn, (leaf(shape, low=-3, high=3),))


def test_logsumexp():
    assert gradcheck(lambda t: t.logsumexp(1), (leaf((2, 4)),))


# ------------------------------------------------------------------ reductions
@pytest.mark.parametrize("op", ["sum", "mean"])
@FEW
@given(shape=small_shapes, keepdim=st.booleans(), data=st.data())
def test_sum_mean(op, shape, keepdim, data):
    dims = data.draw(
        st.none()
        | st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True)
    )
    fn = lambda t: getattr(t, op)(None if dims is None else tuple(dims), keepdim)  # noqa: E731
    if dims is None:
        fn = lambda t: getattr(t, op)()  # noqa: E731
    assert gradcheck(fn, (leaf(shape),))


@pytest.mark.parametrize("op", ["var", "std"])
@pytest.mark.parametrize(
    "dim,keepdim,correction", [(None, False, 1), (0, False, 1), (1, True, 0), ((0, 1), False, 1)]
)
def test_var_std(op, dim, keepdim, correction):
    fn = lambda t: getattr(t, op)(dim, keepdim, correction=correction)  # noqa: E731
    assert gradcheck(fn, (leaf((3, 4), seed=7),))


def test_max_with_a_tie_shares_the_gradient():
    # Two entries tie for the maximum. Central differences see half a slope on each
    # (moving one up raises the max, moving it down does not), and max() splits the
    # gradient evenly between ties: the two agree.
    x = sitp.tensor([[0.5, 2.0, -1.0], [2.0, 0.0, 1.0]], dtype=F64, requires_grad=True)
    assert gradcheck(lambda t: t.max(), (x,))
    assert gradcheck(lambda t: t.amax(dim=0), (x,))
    y = sitp.tensor([[0.5, 2.0, 2.0], [1.0, 0.0, 3.0]], dtype=F64, requires_grad=True)
    assert gradcheck(lambda t: t.amax(dim=1), (y,))
    assert gradcheck(lambda t: t.amin(dim=0, keepdim=True), (y,))


def test_max_along_a_dim_without_ties():
    x = leaf((3, 4), seed=11)
    assert gradcheck(lambda t: t.max(dim=1).values, (x,))
    assert gradcheck(lambda t: t.min(dim=0, keepdim=True).values, (x,))


def test_max_along_a_dim_with_ties_sends_the_gradient_to_one_index():
    # max(dim) returns an index, and the gradient goes there alone (as in PyTorch),
    # so at a tie the one-sided slopes disagree with it: gradcheck says so.
    x = sitp.tensor([[1.0, 1.0, 0.0]], dtype=F64, requires_grad=True)
    with pytest.raises(GradcheckError):
        gradcheck(lambda t: t.max(dim=1).values, (x,))


# ------------------------------------------------------------------ views
def test_transpose_permute_expand_views():
    x = leaf((2, 3, 4))
    assert gradcheck(lambda t: t.transpose(0, 2).exp(), (x,))
    assert gradcheck(
        lambda t: t.permute(2, 0, 1) * sitp.arange(2, dtype=F64).reshape(1, 2, 1), (x,)
    )
    assert gradcheck(lambda t: t.mT @ t, (leaf((3, 2)),))
    y = leaf((3, 1))
    assert gradcheck(lambda t: t.expand(2, 3, 4) * leaf((2, 3, 4), 9).detach(), (y,))
    assert gradcheck(lambda t: t.reshape(4, 6).sum(0), (x,))
    assert gradcheck(lambda t: t.unsqueeze(1).squeeze(1).flatten(), (x,))


def test_basic_indexing():
    x = leaf((3, 4))
    assert gradcheck(lambda t: t[1:, ::2] * 2, (x,))
    assert gradcheck(lambda t: t[-1], (x,))
    assert gradcheck(lambda t: t[None, :, 1].exp(), (x,))
    # of a view at an offset (the window kept from forward), and of a transposed one
    # (no such window: the key is applied again)
    assert gradcheck(lambda t: t[1:][:, 1:3][0] * 2, (x,))
    assert gradcheck(lambda t: t.t()[1:, ::2] * 2, (x,))


def test_indexing_with_repeated_integer_indices():
    # an index that appears twice receives both gradients
    x = leaf((4, 3))
    idx = sitp.tensor([0, 2, 0, 0])
    assert gradcheck(lambda t: t[idx] * leaf((4, 3), 3).detach(), (x,))
    assert gradcheck(lambda t: t[:, sitp.tensor([1, 1, 2])], (x,))
    assert gradcheck(lambda t: t[sitp.tensor([0, 3, 0]), sitp.tensor([2, 1, 2])], (x,))
    assert gradcheck(lambda t: t.index_select(0, sitp.tensor([1, 1])), (x,))


def test_embedding_lookup_repeats():
    # The lookup of chapter 3: a table indexed by a (B, T) batch of token ids.
    C = leaf((5, 2))
    X = sitp.tensor([[0, 1, 0], [4, 4, 0]])
    assert gradcheck(lambda c: c[X].tanh(), (C,))


@pytest.mark.parametrize("dim", [0, 1])
def test_gather(dim):
    x = leaf((3, 4))
    index = (
        sitp.tensor([[0, 1, 0, 2], [2, 2, 1, 0]])
        if dim == 0
        else sitp.tensor([[0, 0, 3], [1, 2, 1], [3, 3, 3]])
    )
    assert gradcheck(lambda t: t.gather(dim, index), (x,))


def test_cross_entropy_by_gather():
    logits, y = leaf((4, 5), low=-2, high=2), sitp.tensor([[1], [0], [4], [1]])
    assert gradcheck(lambda t: -t.log_softmax(1).gather(1, y).mean(), (logits,))


def test_cat_stack_split():
    a, b = leaf((2, 3), 1), leaf((1, 3), 2)
    assert gradcheck(lambda u, v: sitp.cat([u, v, u], dim=0), (a, b))
    assert gradcheck(lambda u, v: sitp.cat([u.T, v.T], dim=1), (a, b))
    assert gradcheck(lambda u: sitp.stack([u, 2 * u], dim=1), (a,))
    assert gradcheck(lambda u: u.split([1, 2], dim=1), (a,))  # a tuple of outputs
    assert gradcheck(lambda u: u.chunk(3, dim=1)[2].exp(), (a,))
    assert gradcheck(lambda u: u.unbind(0)[1] * 3, (a,))


def test_where_and_masked_fill():
    a, b = leaf((2, 3), 1), leaf((3,), 2)
    cond = sitp.tensor([[True, False, True], [False, False, True]])
    assert gradcheck(lambda u, v: sitp.where(cond, u, v), (a, b))
    assert gradcheck(lambda u: u.masked_fill(cond, -1e9).softmax(-1), (a,))
    assert gradcheck(lambda u: u.masked_fill(cond[0], 0.0), (a,))


def test_tril_and_causal_mask():
    x = leaf((3, 3))
    assert gradcheck(lambda t: t.tril(), (x,))
    mask = sitp.ones(3, 3).tril() == 0
    assert gradcheck(lambda t: t.masked_fill(mask, float("-inf")).softmax(-1), (x,))


def test_cast_and_clone():
    x = leaf((3,))
    assert gradcheck(lambda t: t.clone() * 2, (x,))
    assert gradcheck(lambda t: t.to(sitp.float64).contiguous(), (x,))


def test_a_small_mlp():
    X, W1, b1, W2 = leaf((4, 3), 1), leaf((3, 5), 2), leaf((5,), 3), leaf((5, 2), 4)
    fn = lambda x, w1, c1, w2: ((x @ w1 + c1).tanh() @ w2).log_softmax(-1)  # noqa: E731
    assert gradcheck(fn, (X, W1, b1, W2))
