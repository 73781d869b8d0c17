"""A solution of :mod:`sitp.exercises.bigram`."""

import numpy as np


def pairs(words: list[str], stoi: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """(previous, next) indices of every bigram of ``words``, boundaries included."""
    xs, ys = [], []
    for w in words:
        chars = [0] + [stoi[c] for c in w] + [0]
        xs += chars[:-1]
        ys += chars[1:]
    return np.array(xs, dtype=np.int64), np.array(ys, dtype=np.int64)


# --8<-- [start:solution]
def count_bigrams(words, stoi):
    xs, ys = pairs(words, stoi)
    N = np.zeros((len(stoi), len(stoi)), dtype=np.int64)
    np.add.at(N, (xs, ys), 1)  # a repeated (i, j) adds up, unlike N[xs, ys] += 1
    return N


def probabilities(N, alpha=1.0):
    counts = N + alpha
    return counts / counts.sum(axis=1, keepdims=True)


def nll(P, words, stoi):
    xs, ys = pairs(words, stoi)
    return float(-np.log(P[xs, ys]).mean())


def softmax_regression_loss_and_grad(W, xs, ys):
    logits_NV = W[xs]  # one-hot X times W picks rows
    logits_NV = logits_NV - logits_NV.max(axis=1, keepdims=True)
    P_NV = np.exp(logits_NV)
    P_NV /= P_NV.sum(axis=1, keepdims=True)
    n = len(ys)
    loss = float(-np.log(P_NV[np.arange(n), ys]).mean())
    G_NV = P_NV.copy()
    G_NV[np.arange(n), ys] -= 1  # P - Y
    dW = np.zeros_like(W)
    np.add.at(dW, xs, G_NV / n)  # X^T (P - Y) / n adds rows
    return loss, dW


# --8<-- [end:solution]
