"""sitp.examples.precision and sitp.examples.second_order (sections 3.2 and 3.6) against
references: bfloat16 rounding against PyTorch's, float16 against numpy's, Newton's step
against IRLS and the optimum's zero gradient."""

import numpy as np
import pytest

from sitp.examples import precision as pr
from sitp.examples import second_order as so


def test_bf16_rounding_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    ties = (rng.integers(0, 2**16, 2000).astype(np.uint32) << 16) | np.uint32(0x8000)
    x = np.concatenate([bits, ties]).view(np.float32)
    x = np.concatenate([x, np.float32([0.0, -0.0, np.inf, -np.inf, 3.4e38, 1e-45])])
    ours = pr.to_bf16(x)
    ref = torch.from_numpy(x.copy()).to(torch.bfloat16).to(torch.float32).numpy()
    nan = np.isnan(ref)
    assert (np.isnan(ours) == nan).all()
    np.testing.assert_array_equal(ours[~nan].view(np.uint32), ref[~nan].view(np.uint32))


def test_sums_against_numpy_float16():
    x = np.random.default_rng(1).uniform(0, 0.2, 3000).astype(np.float32)
    s = np.float16(0)
    for v in x.astype(np.float16):
        s = np.float16(s + v)
    assert pr.sequential_sum(x, "float16") == float(s)
    assert pr.sequential_sum(x, "float32") == float(np.cumsum(x, dtype=np.float32)[-1])
    exact = x.astype(np.float64).sum()
    assert abs(pr.pairwise_sum(x, "bfloat16") - exact) < 2.0


def test_mixed_precision_grad_in_float32_is_the_gradient():
    N = pr.bigram_data(batch=5000)
    W = np.random.default_rng(2).normal(size=N.shape).astype(np.float32)
    g = pr.mixed_precision_grad(W, N, "float32", 1.0)
    h = 1e-3
    for i, j in [(0, 1), (5, 5), (26, 0)]:
        E = np.zeros_like(W, dtype=np.float64)
        E[i, j] = h
        W64 = W.astype(np.float64)
        numeric = (pr.bigram_nll(W64 + E, N) - pr.bigram_nll(W64 - E, N)) / (2 * h)
        assert abs(g[i, j] - numeric) < 1e-5


def test_newton_equals_irls_and_reaches_a_zero_gradient():
    X, y = so.two_clouds()
    w = np.array([0.3, -0.2, 0.1])
    np.testing.assert_allclose(so.newton_logistic_step(w, X, y), so.irls_step(w, X, y))
    for _ in range(12):
        w = so.irls_step(w, X, y)
    assert np.abs(X.T @ (so.sigmoid(X @ w) - y)).max() < 1e-10


def test_newton_on_the_bigram_reaches_the_normalised_counts():
    C = so.bigram_counts(alpha=1.0)
    W = np.zeros_like(C)
    for _ in range(20):
        W = so.newton_bigram_step(W, C)
    P = np.exp(W - np.logaddexp.reduce(W, axis=1, keepdims=True))
    np.testing.assert_allclose(P, C / C.sum(1, keepdims=True), rtol=1e-8)
