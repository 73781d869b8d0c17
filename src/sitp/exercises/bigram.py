"""Assignment for chapter 1: the bigram model by hand, in numpy.

Fill in the four functions below, then run ``pytest --pyargs sitp.exercises.tests.test_bigram``.
Characters are indexed by ``stoi``, a dict from character to index in which the boundary
token ``'.'`` is index 0 (``sitp.data.Vocab(words).stoi`` is one). A name ``w`` gives
the pairs of ``'.' + w + '.'``: ``emma`` gives (., e), (e, m), (m, m), (m, a), (a, .).
"""

import numpy as np


def count_bigrams(words: list[str], stoi: dict[str, int]) -> np.ndarray:
    """The (V, V) integer array ``N`` with ``N[i, j]`` the number of times ``j`` follows ``i``."""
    raise NotImplementedError("count_bigrams")


def probabilities(N: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """Rows of ``N + alpha`` divided by their sums: ``P[i, j]`` estimates P(next = j | i)."""
    raise NotImplementedError("probabilities")


def nll(P: np.ndarray, words: list[str], stoi: dict[str, int]) -> float:
    """The mean negative log-likelihood of every bigram of ``words`` under ``P``."""
    raise NotImplementedError("nll")


def softmax_regression_loss_and_grad(
    W: np.ndarray, xs: np.ndarray, ys: np.ndarray
) -> tuple[float, np.ndarray]:
    """Cross-entropy of the neural bigram and its gradient, by hand.

    The logits of example ``n`` are row ``W[xs[n]]`` (a one-hot input times ``W``); the
    loss is the mean over examples of ``-log softmax(logits)[ys[n]]``.

    Returns:
        ``(loss, dW)`` with ``dW`` of the shape of ``W``: ``X^T (P - Y) / n``.
    """
    raise NotImplementedError("softmax_regression_loss_and_grad")
