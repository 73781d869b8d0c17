"""Tests of the chapter 1 assignment: ``pytest --pyargs sitp.exercises.tests.test_bigram``."""

import numpy as np

WORDS = ["emma", "olivia", "ava", "isabella", "sophia", "mia", "amelia", "ella"]


def vocab(words=WORDS):
    chars = sorted(set("".join(words)))
    return {c: i for i, c in enumerate(["."] + chars)}


def test_count_bigrams(impl):
    stoi = {".": 0, "a": 1, "e": 2, "m": 3}
    N = impl.count_bigrams(["emma", "ama"], stoi)
    assert N.shape == (4, 4)
    assert N[stoi["m"], stoi["m"]] == 1  # the double m of emma
    assert N[stoi["m"], stoi["a"]] == 2  # m -> a in both names
    assert N[0, stoi["e"]] == 1 and N[0, stoi["a"]] == 1
    assert N.sum() == 5 + 4  # len(w) + 1 pairs per name
    assert N[:, 0].sum() == 2  # each name ends once


def test_counts_add_up(impl):
    stoi = vocab()
    N = impl.count_bigrams(WORDS, stoi)
    assert N.sum() == sum(len(w) + 1 for w in WORDS)
    assert N[0].sum() == N[:, 0].sum() == len(WORDS)  # starts and ends
    letters = "".join(WORDS)
    for c, i in stoi.items():  # every letter is followed once per occurrence
        if c != ".":
            assert N[i].sum() == letters.count(c)


def test_probabilities(impl):
    N = np.array([[0, 3, 1], [2, 0, 0], [1, 1, 0]])
    P = impl.probabilities(N, alpha=1.0)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    np.testing.assert_allclose(P[0], [1 / 7, 4 / 7, 2 / 7])
    P0 = impl.probabilities(N, alpha=0.0)
    np.testing.assert_allclose(P0[1], [1.0, 0.0, 0.0])
    big = impl.probabilities(N, alpha=1e9)  # heavy smoothing: uniform rows
    np.testing.assert_allclose(big, 1 / 3, rtol=1e-6)


def test_nll(impl):
    stoi = vocab()
    V = len(stoi)
    uniform = np.full((V, V), 1 / V)
    np.testing.assert_allclose(impl.nll(uniform, WORDS, stoi), np.log(V))
    N = impl.count_bigrams(WORDS, stoi)
    P = impl.probabilities(N, alpha=1e-12)
    # the maximum-likelihood P beats any smoothed one on the data it was counted on
    assert impl.nll(P, WORDS, stoi) < impl.nll(impl.probabilities(N, 1.0), WORDS, stoi)
    xs = [0, stoi["a"], stoi["v"], stoi["a"]]
    ys = [stoi["a"], stoi["v"], stoi["a"], 0]
    P1 = impl.probabilities(N, 1.0)
    expected = -np.mean(np.log(P1[xs, ys]))
    np.testing.assert_allclose(impl.nll(P1, ["ava"], stoi), expected)


def test_softmax_gradient_matches_central_differences(impl):
    rng = np.random.default_rng(0)
    W = rng.normal(size=(5, 5))
    xs = rng.integers(0, 5, size=40)
    ys = rng.integers(0, 5, size=40)
    loss, dW = impl.softmax_regression_loss_and_grad(W, xs, ys)
    assert dW.shape == W.shape
    h = 1e-6
    numeric = np.zeros_like(W)
    for i in range(5):
        for j in range(5):
            E = np.zeros_like(W)
            E[i, j] = h
            up, _ = impl.softmax_regression_loss_and_grad(W + E, xs, ys)
            down, _ = impl.softmax_regression_loss_and_grad(W - E, xs, ys)
            numeric[i, j] = (up - down) / (2 * h)
    np.testing.assert_allclose(dW, numeric, atol=1e-7)
    z = W[xs] - W[xs].max(1, keepdims=True)
    direct = np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(40), ys])
    np.testing.assert_allclose(loss, direct)


def test_log_counts_are_the_best_weights(impl):
    """At W = log P the neural bigram's loss is the counting model's NLL, and its gradient
    is zero: counting is the maximum-likelihood softmax regression."""
    stoi = vocab()
    N = impl.count_bigrams(WORDS, stoi)
    P = impl.probabilities(N, alpha=1e-9)
    xs, ys = [], []
    for w in WORDS:
        chars = [0] + [stoi[c] for c in w] + [0]
        xs += chars[:-1]
        ys += chars[1:]
    loss, dW = impl.softmax_regression_loss_and_grad(np.log(P), np.array(xs), np.array(ys))
    np.testing.assert_allclose(loss, impl.nll(P, WORDS, stoi))
    assert np.abs(dW).max() < 1e-6
