"""The linear layer's own node and split's multi-output node, against PyTorch.

``F.linear`` on CPU floats is one autograd node (``sitp.nn._functions.linear.Linear``):
one GEMM starting from the bias forward, two GEMMs and a column sum backward,
reading transposed operands in place. ``Tensor.split`` is one node with several
outputs, whose backward receives a gradient per piece. Both must give PyTorch's
numbers; the engine must route each piece's gradient to its own slot.
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import sitp
import sitp.nn.functional as F
from helpers import assert_close, np_of, pair
from sitp.kernels.cpu.fused.linear import column_sum
from sitp.nn._functions import linear as _linear

TOL = {sitp.float32: dict(rtol=2e-5, atol=2e-5), sitp.float64: dict(rtol=1e-11, atol=1e-11)}


def _linear_case(lead, K, N, bias, dtype, seed, tol=None):
    rng = np.random.default_rng(seed)
    npd = np.float32 if dtype is sitp.float32 else np.float64
    x, tx = pair(rng.standard_normal(lead + (K,)).astype(npd), requires_grad=True)
    w, tw = pair(rng.standard_normal((N, K)).astype(npd), requires_grad=True)
    b, tb = pair(rng.standard_normal(N).astype(npd), requires_grad=True) if bias else (None, None)
    up = rng.standard_normal(lead + (N,)).astype(npd)
    y, ty = F.linear(x, w, b), torch.nn.functional.linear(tx, tw, tb)
    (y * sitp.tensor(up)).sum().backward()
    (ty * torch.tensor(up)).sum().backward()
    tol = tol or TOL[dtype]
    assert y.grad_fn.name() == "LinearBackward"
    assert_close(y, ty, **tol)
    assert_close(x.grad, tx.grad, **tol)
    assert_close(w.grad, tw.grad, **tol)
    if bias:
        assert_close(b.grad, tb.grad, **tol)


@settings(max_examples=25, deadline=None)
@given(
    lead=st.sampled_from([(), (1,), (7,), (2, 5), (3, 1, 4)]),
    K=st.integers(1, 40),
    N=st.integers(1, 40),
    bias=st.booleans(),
    dtype=st.sampled_from([sitp.float32, sitp.float64]),
    seed=st.integers(0, 1000),
)
def test_linear_node_matches_torch(lead, K, N, bias, dtype, seed):
    _linear_case(lead, K, N, bias, dtype, seed)


@pytest.mark.parametrize("shape", [(1024, 64, 192), (300, 257, 65)])
def test_linear_node_at_gpt_sizes(shape):
    """Big enough for the packed, transposed-operand GEMM path forward and backward.

    dW sums M products: its entries are about sqrt(M) = 32 in size, and float32
    sums in a different order differ by a few 1e-5 absolute."""
    M, K, N = shape
    _linear_case((M,), K, N, True, sitp.float32, 0, tol=dict(rtol=1e-4, atol=3e-4))


def test_linear_node_gradcheck():
    rng = np.random.default_rng(1)
    x = sitp.tensor(rng.standard_normal((3, 4, 5)), requires_grad=True)
    w = sitp.tensor(rng.standard_normal((6, 5)), requires_grad=True)
    b = sitp.tensor(rng.standard_normal(6), requires_grad=True)
    assert sitp.autograd.gradcheck(F.linear, (x, w, b))
    assert sitp.autograd.gradcheck(lambda x, w: F.linear(x, w), (x, w))


def test_linear_node_on_views_and_tied_weights():
    """A transposed input and a weight used twice: gradients accumulate as in torch."""
    rng = np.random.default_rng(2)
    data, w0 = rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal((8, 8))
    x, tx = pair(data, requires_grad=True)
    w, tw = pair(w0.astype(np.float32), requires_grad=True)
    y = F.linear(F.linear(x.t(), w), w)
    ty = torch.nn.functional.linear(torch.nn.functional.linear(tx.t(), tw), tw)
    y.square().sum().backward()
    ty.square().sum().backward()
    assert_close(y, ty, rtol=1e-5, atol=1e-5)
    assert_close(x.grad, tx.grad, rtol=1e-5, atol=1e-5)
    assert_close(w.grad, tw.grad, rtol=1e-5, atol=1e-4)


def test_linear_falls_back_for_what_the_node_does_not_take():
    x, w = sitp.ones(2, 3, dtype=sitp.float64), sitp.ones(4, 3)
    assert not _linear.fits(x, w, None)  # mixed dtypes: the general path
    assert not _linear.fits(sitp.ones(2, 0), sitp.ones(4, 0), None)
    assert np_of(F.linear(sitp.ones(2, 0), sitp.ones(4, 0), sitp.ones(4))).tolist() == [[1] * 4] * 2
    with pytest.raises(RuntimeError, match=r"input of shape \(2, 3\) and weight of shape \(4, 5\)"):
        F.linear(sitp.ones(2, 3), sitp.ones(4, 5))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "M, N, K", [(32, 32, 48), (7, 5, 3), (64, 65, 17), (1, 3, 2), (45, 130, 70)]
)
@pytest.mark.parametrize("x_transposed", [False, True])
def test_small_layer_backward_in_one_call_gives_the_separate_kernels_bits(
    M, N, K, dtype, x_transposed
):
    """``linear_backward_small`` runs the kernels that the separate products and column
    sum would run, in one call: equal bits, and each gradient only when asked for."""
    from sitp.kernels.cpu import ops as cpu

    rng = np.random.default_rng(M * N + K)
    g = sitp.tensor(rng.standard_normal((M, N)).astype(dtype))
    w = sitp.tensor(rng.standard_normal((N, K)).astype(dtype))
    x_np = rng.standard_normal((K, M) if x_transposed else (M, K)).astype(dtype)
    x = sitp.tensor(x_np).mT if x_transposed else sitp.tensor(x_np)
    dx, dw, db = cpu.linear_backward_small(g, x, w, True, True, True)
    assert np.array_equal(dx.numpy(), cpu.matmul(g, w).numpy())
    assert np.array_equal(dw.numpy(), cpu.matmul(g.mT, x).numpy())
    want_db = np.empty(N, dtype)
    column_sum(g.numpy(), want_db)
    assert np.array_equal(db.numpy(), want_db)
    assert cpu.linear_backward_small(g, x, w, False, True, False)[::2] == (None, None)


def test_small_layer_backward_leaves_what_it_does_not_take_to_the_products():
    from sitp.kernels.cpu import ops as cpu

    big = sitp.ones(256, 256), sitp.ones(256, 256), sitp.ones(256, 256)
    assert cpu.linear_backward_small(*big, True, True, True) is None  # over one thread's size
    g, x = sitp.ones(4, 3), sitp.ones(4, 5)
    strided_w = sitp.ones(3, 10)[:, ::2]
    assert cpu.linear_backward_small(g, x, strided_w, True, True, True) is None
    ints = sitp.ones(4, 3, dtype=sitp.int64), sitp.ones(4, 5, dtype=sitp.int64)
    assert cpu.linear_backward_small(*ints, sitp.ones(3, 5, dtype=sitp.int64), 1, 1, 1) is None


def test_column_sum_matches_numpy_on_odd_sizes():
    rng = np.random.default_rng(3)
    for M, N in [(1, 1), (33, 17), (1025, 7)]:
        g = rng.standard_normal((M, N)).astype(np.float32)
        out = np.empty(N, np.float32)
        column_sum(g, out)
        np.testing.assert_allclose(out, g.astype(np.float64).sum(0), rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ split: one node, n outputs
@pytest.mark.parametrize("sizes", [3, [2, 5, 2], [9], [0, 4, 5]])
def test_split_gradients_go_to_their_pieces(sizes):
    rng = np.random.default_rng(4)
    x, tx = pair(rng.standard_normal((4, 9)), requires_grad=True)
    pieces, tpieces = x.split(sizes, dim=1), tx.split(sizes, dim=1)
    assert len(pieces) == len(tpieces)
    weights = [rng.standard_normal(tuple(p.shape)) for p in tpieces]
    # every other piece takes part: the others send no gradient at all
    sum(
        ((p * sitp.tensor(wt)).sum() for p, wt in zip(pieces[::2], weights[::2])), sitp.tensor(0.0)
    ).backward()
    sum(
        ((p * torch.tensor(wt)).sum() for p, wt in zip(tpieces[::2], weights[::2])),
        torch.tensor(0.0),
    ).backward()
    assert_close(x.grad, tx.grad, rtol=1e-12, atol=1e-12)


def test_split_piece_used_twice_and_retain_grad():
    x, tx = pair(np.arange(12.0).reshape(3, 4), requires_grad=True)
    a, b = x.split(2, dim=1)
    ta, tb = tx.split(2, dim=1)
    b.retain_grad()
    tb.retain_grad()
    (a * b + b * 3).sum().backward()
    (ta * tb + tb * 3).sum().backward()
    assert_close(x.grad, tx.grad)
    assert_close(b.grad, tb.grad)
    assert a.grad is None


def test_autograd_grad_of_two_pieces_of_one_split():
    x, tx = pair(np.linspace(-1, 1, 10).reshape(2, 5), requires_grad=True)
    a, b = x.split([2, 3], dim=1)
    ta, tb = tx.split([2, 3], dim=1)
    ga, gb = sitp.autograd.grad((a.sum(1) * b.sum(1)).sum(), [a, b])
    tga, tgb = torch.autograd.grad((ta.sum(1) * tb.sum(1)).sum(), [ta, tb])
    assert_close(ga, tga)
    assert_close(gb, tgb)
    assert x.grad is None


def test_chunk_and_split_of_a_transposed_view():
    x, tx = pair(np.random.default_rng(5).standard_normal((6, 5)), requires_grad=True)
    (x.t().chunk(3, dim=1)[1] ** 2).sum().backward()
    (tx.t().chunk(3, dim=1)[1] ** 2).sum().backward()
    assert_close(x.grad, tx.grad, rtol=1e-12)


def test_split_rejects_negative_sizes():
    with pytest.raises(RuntimeError, match="non-negative"):
        sitp.ones(2, 3).split([4, -1], dim=1)


# ------------------------------------------------------------------ the GRU's gates: one node
@pytest.mark.parametrize("dtype", [sitp.float32, sitp.float64])
@pytest.mark.parametrize("batch", [(), (1,), (6,)])
def test_gru_cell_node_matches_torch(dtype, batch):
    tdt = torch.float32 if dtype is sitp.float32 else torch.float64
    sitp.manual_seed(1)
    cell, tcell = sitp.nn.GRUCell(5, 7, dtype=dtype), torch.nn.GRUCell(5, 7, dtype=tdt)
    tcell.load_state_dict(
        {k: torch.tensor(v.detach().numpy()) for k, v in cell.state_dict().items()}
    )
    rng = np.random.default_rng(2)
    npd = np.float32 if dtype is sitp.float32 else np.float64
    x, tx = pair(rng.standard_normal(batch + (5,)).astype(npd), requires_grad=True)
    h, th = pair((3 * rng.standard_normal(batch + (7,))).astype(npd), requires_grad=True)
    up = rng.standard_normal(batch + (7,))
    y, ty = cell(x, h), tcell(tx, th)
    assert y.grad_fn.name() == "GRUGatesBackward"
    (y * sitp.tensor(up, dtype=dtype)).sum().backward()
    (ty * torch.tensor(up, dtype=tdt)).sum().backward()
    tol = TOL[dtype]
    assert_close(y, ty, **tol)
    assert_close(x.grad, tx.grad, **tol)
    assert_close(h.grad, th.grad, **tol)
    for p, tp in zip(cell.parameters(), tcell.parameters()):
        assert_close(p.grad, tp.grad, **tol)


def test_gru_gates_gradcheck_and_no_hidden_state():
    from sitp.nn._functions import gru

    rng = np.random.default_rng(3)
    gi = sitp.tensor(rng.standard_normal((2, 9)), requires_grad=True)
    gh = sitp.tensor(rng.standard_normal((2, 9)), requires_grad=True)
    h = sitp.tensor(rng.standard_normal((2, 3)), requires_grad=True)
    assert sitp.autograd.gradcheck(gru.GRUGates.apply, (gi, gh, h))
    sitp.manual_seed(0)
    cell = sitp.nn.GRUCell(4, 3)
    tcell = torch.nn.GRUCell(4, 3)
    tcell.load_state_dict(
        {k: torch.tensor(v.detach().numpy()) for k, v in cell.state_dict().items()}
    )
    x = np.ones((2, 4), np.float32)
    assert_close(cell(sitp.tensor(x)), tcell(torch.tensor(x)))  # h = None: zeros


def test_unbind_is_one_split_node():
    x, tx = pair(np.random.default_rng(4).standard_normal((3, 4, 2)), requires_grad=True)
    pieces, tpieces = x.unbind(1), tx.unbind(1)
    assert len(pieces) == 4 and tuple(pieces[0].shape) == (3, 2)
    (pieces[0] * pieces[3] + pieces[1]).sum().backward()
    (tpieces[0] * tpieces[3] + tpieces[1]).sum().backward()
    assert_close(x.grad, tx.grad, rtol=1e-12)
    assert sitp.ones(2, 0).unbind(1) == ()
