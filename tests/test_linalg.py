"""sitp.linalg against torch.linalg: values, gradients, and gradients against central
differences (sitp.autograd.gradcheck, float64); numpy is only an oracle for the LU kernels."""

import math

import numpy as np
import pytest
import torch
from tests.helpers import assert_close, pair

import sitp
from sitp.autograd import gradcheck

INF = math.inf


def _both(arr, requires_grad=True):
    return pair(arr, requires_grad)


def _compare(fs, ft, arrays, rtol=1e-5, atol=1e-6, seed=0):
    """fs(*sitp tensors) against ft(*torch tensors): the value, and the gradients of
    (out * w).sum() for one random w."""
    pairs = [_both(a) for a in arrays]
    ss, ts = [p[0] for p in pairs], [p[1] for p in pairs]
    so, to = fs(*ss), ft(*ts)
    assert_close(so, to, rtol=rtol, atol=atol)
    w = np.random.default_rng(seed).standard_normal(tuple(to.shape)).astype(arrays[0].dtype)
    (so * sitp.tensor(w)).sum().backward()
    (to * torch.tensor(w)).sum().backward()
    for s, t in zip(ss, ts):
        assert (s.grad is None) == (t.grad is None)
        if t.grad is not None:
            assert_close(s.grad, t.grad, rtol=rtol, atol=atol)


def _well_conditioned(rng, shape, dtype=np.float64):
    n = shape[-1]
    return (rng.standard_normal(shape) + 2 * n**0.5 * np.eye(n)).astype(dtype)


# ------------------------------------------------------------------- vector_norm
@pytest.mark.parametrize("ord", [2, 1, 3, 0.5, INF, -INF, 0, -1])
@pytest.mark.parametrize("dim,keepdim", [(None, False), (1, False), ((0, 2), True), (-1, True)])
def test_vector_norm_like_torch(ord, dim, keepdim):
    x = np.random.default_rng(1).standard_normal((3, 4, 5)).astype(np.float32)
    _compare(
        lambda a: sitp.linalg.vector_norm(a, ord, dim, keepdim),
        lambda a: torch.linalg.vector_norm(a, ord, dim, keepdim),
        [x],
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize("ord", [2, 1, 3, INF])
def test_vector_norm_gradient_at_zero_is_torchs(ord):
    """sqrt(sum x^2) differentiated naively is NaN at 0; torch's (and sitp's) gradient is 0."""
    x = np.zeros((2, 3), np.float32)
    x[1] = [1.0, -2.0, 2.0]
    _compare(
        lambda a: sitp.linalg.vector_norm(a, ord, dim=1),
        lambda a: torch.linalg.vector_norm(a, ord, dim=1),
        [x],
    )


@pytest.mark.parametrize("ord", [2, 1, 3, INF])
def test_vector_norm_gradcheck(ord):
    x = sitp.tensor(np.random.default_rng(2).standard_normal((3, 4)), requires_grad=True)
    assert gradcheck(lambda a: sitp.linalg.vector_norm(a, ord, dim=0), (x,))


def test_vector_norm_dtype_and_scalar_like_torch():
    v = np.array([3.0, 4.0], np.float32)
    s = sitp.linalg.vector_norm(sitp.tensor(v), dtype=sitp.float64)
    t = torch.linalg.vector_norm(torch.tensor(v), dtype=torch.float64)
    assert s.dtype is sitp.float64 and t.dtype is torch.float64
    assert_close(s, t)
    assert_close(
        sitp.linalg.vector_norm(sitp.tensor(-2.5)), torch.linalg.vector_norm(torch.tensor(-2.5))
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda L: L.linalg.vector_norm(L.tensor([1, 2])),  # integer input
        lambda L: L.linalg.vector_norm(L.zeros(0), INF),  # no identity
        lambda L: L.linalg.norm(L.zeros(2, 2, 2), ord=1),  # ord without dim, 3-D
        lambda L: L.linalg.inv(L.zeros(2, 3)),  # not square
    ],
    ids=["int", "empty_inf", "norm_3d", "inv_rect"],
)
def test_errors_like_torch(call):
    with pytest.raises(RuntimeError) as t:
        call(torch)
    with pytest.raises(RuntimeError) as s:
        call(sitp)
    assert isinstance(s.value, RuntimeError) and isinstance(t.value, RuntimeError)


# ------------------------------------------------------------------- matrix_norm, norm
@pytest.mark.parametrize("ord", ["fro", 1, -1, INF, -INF])
@pytest.mark.parametrize("dim,keepdim", [((-2, -1), False), ((0, 2), True), ((2, 1), False)])
def test_matrix_norm_like_torch(ord, dim, keepdim):
    x = np.random.default_rng(3).standard_normal((3, 4, 5)).astype(np.float32)
    _compare(
        lambda a: sitp.linalg.matrix_norm(a, ord, dim, keepdim),
        lambda a: torch.linalg.matrix_norm(a, ord, dim, keepdim),
        [x],
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize("ord", ["nuc", 2, -2])
def test_matrix_norm_of_singular_values_is_refused_clearly(ord):
    torch.linalg.matrix_norm(torch.eye(3), ord)  # torch has it
    with pytest.raises(NotImplementedError, match="singular values"):
        sitp.linalg.matrix_norm(sitp.eye(3), ord)


@pytest.mark.parametrize(
    "ord,dim",
    [
        (None, None),
        (None, 1),
        (None, (0, 1)),
        (3, 0),
        (INF, None),
        ("fro", None),
        (1, (1, 0)),
        (-INF, (0, 1)),
    ],
)
def test_norm_like_torch(ord, dim):
    x = np.random.default_rng(4).standard_normal((4, 3)).astype(np.float32)
    _compare(
        lambda a: sitp.linalg.norm(a, ord, dim),
        lambda a: torch.linalg.norm(a, ord, dim),
        [x],
        rtol=1e-4,
        atol=1e-5,
    )


def test_norm_of_a_vector_with_ord_like_torch():
    x = np.random.default_rng(5).standard_normal(6).astype(np.float32)
    for ord in (1, 2, INF, 0.5):
        _compare(
            lambda a: sitp.linalg.norm(a, ord),
            lambda a: torch.linalg.norm(a, ord),
            [x],
            rtol=1e-4,
            atol=1e-5,
        )


def test_norm_gradcheck():
    x = sitp.tensor(np.random.default_rng(6).standard_normal((3, 4)), requires_grad=True)
    for ord in ("fro", 1, INF):
        assert gradcheck(lambda a: sitp.linalg.matrix_norm(a, ord), (x,))


# ------------------------------------------------------------------- inv, det, solve
@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (2, 3, 3), (2, 1, 5, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_inv_like_torch(shape, dtype):
    A = _well_conditioned(np.random.default_rng(7), shape, dtype)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    _compare(sitp.linalg.inv, torch.linalg.inv, [A], **tol)


def test_lu_kernel_pivots_against_numpy():
    """A matrix whose (0, 0) entry is 0 needs a row swap; numpy.linalg is the oracle."""
    A = np.array([[0.0, 2.0, 1.0], [1.0, 1.0, 0.0], [3.0, 0.0, 1.0]])
    np.testing.assert_allclose(
        sitp.linalg.inv(sitp.tensor(A)).numpy(), np.linalg.inv(A), rtol=1e-12
    )
    np.testing.assert_allclose(sitp.linalg.det(sitp.tensor(A)).item(), np.linalg.det(A), rtol=1e-12)


def test_inv_of_a_singular_matrix_raises_like_torch():
    A = [[1.0, 2.0], [2.0, 4.0]]
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        torch.linalg.inv(torch.tensor(A))
    with pytest.raises(sitp.linalg.LinAlgError, match="singular"):
        sitp.linalg.inv(sitp.tensor(A))
    assert issubclass(sitp.linalg.LinAlgError, RuntimeError)


@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (2, 4, 4), (2, 2, 3, 3)])
def test_det_like_torch(shape):
    A = np.random.default_rng(8).standard_normal(shape)  # any sign, some near-singular
    _compare(sitp.linalg.det, torch.linalg.det, [A], rtol=1e-9, atol=1e-11)


def test_det_of_singular_matrices_like_torch():
    A = np.array([[[1.0, 2.0], [2.0, 4.0]], [[0.0, 0.0], [0.0, 0.0]]])
    assert_close(sitp.linalg.det(sitp.tensor(A)), torch.linalg.det(torch.tensor(A)))
    s = sitp.tensor(A, requires_grad=True)
    with pytest.raises(NotImplementedError, match="singular"):
        sitp.linalg.det(s).sum().backward()


@pytest.mark.parametrize(
    "a_shape,b_shape",
    [
        ((3, 3), (3, 2)),
        ((3, 3), (3,)),
        ((2, 4, 4), (2, 4)),
        ((2, 4, 4), (2, 4, 1)),
        ((2, 3, 3), (3, 5)),
        ((3, 3), (2, 3, 2)),
        ((2, 1, 3, 3), (4, 3, 1)),
    ],
)
def test_solve_like_torch(a_shape, b_shape):
    rng = np.random.default_rng(9)
    A, B = _well_conditioned(rng, a_shape), rng.standard_normal(b_shape)
    _compare(sitp.linalg.solve, torch.linalg.solve, [A, B], rtol=1e-9, atol=1e-11)


def test_solve_right_like_torch():
    rng = np.random.default_rng(10)
    A, B = _well_conditioned(rng, (2, 3, 3)), rng.standard_normal((2, 4, 3))
    _compare(
        lambda a, b: sitp.linalg.solve(a, b, left=False),
        lambda a, b: torch.linalg.solve(a, b, left=False),
        [A, B],
        rtol=1e-9,
        atol=1e-11,
    )


@pytest.mark.parametrize("name", ["inv", "det", "solve"])
def test_lu_ops_gradcheck(name):
    rng = np.random.default_rng(11)
    A = sitp.tensor(_well_conditioned(rng, (2, 3, 3)), requires_grad=True)
    if name == "solve":
        B = sitp.tensor(rng.standard_normal((2, 3, 2)), requires_grad=True)
        assert gradcheck(sitp.linalg.solve, (A, B))
    else:
        assert gradcheck(getattr(sitp.linalg, name), (A,))


def test_vecdot_and_matmul_like_torch():
    rng = np.random.default_rng(12)
    x, y = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    _compare(sitp.linalg.vecdot, torch.linalg.vecdot, [x, y])
    _compare(sitp.linalg.matmul, torch.linalg.matmul, [x, y])


@pytest.mark.parametrize("name", ["vector_norm", "matrix_norm", "inv", "det", "solve"])
def test_on_the_cuda_device_like_the_cpu(name):
    """A CUDA tensor (numba's simulator without a GPU): the result and the gradient stay
    there and equal the CPU's."""
    rng = np.random.default_rng(13)
    A = _well_conditioned(rng, (2, 3, 3))
    B = rng.standard_normal((2, 3, 2))
    res = []
    for dev in ("cpu", "cuda"):
        a = sitp.tensor(A, device=dev, requires_grad=True)
        args = (a, sitp.tensor(B, device=dev)) if name == "solve" else (a,)
        out = getattr(sitp.linalg, name)(*args)
        assert out.device.type == dev
        out.sum().backward()
        assert a.grad.device.type == dev
        res.append((out.detach().cpu().numpy(), a.grad.cpu().numpy()))
    for c, g in zip(*res):
        np.testing.assert_allclose(g, c, rtol=1e-9, atol=1e-12)
