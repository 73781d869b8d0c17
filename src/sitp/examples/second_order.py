"""Newton's method and IRLS against gradient descent (section 3.2), in float64 numpy.

* logistic regression on section 1.4's two clouds: Newton's step solves the Hessian's
  system; IRLS writes the same step as a weighted least-squares fit;
* the neural bigram of section 1.5 on smoothed counts: the loss separates into one
  softmax per row of ``W``, so Newton solves 27 systems of 27 unknowns per step.

``second-order.png`` plots the distance to the optimum per iteration for both.
Run ``python -m sitp.examples.second_order`` from the repository root to redraw it
(seconds).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sitp.data import Vocab, load_names

ASSETS = Path(__file__).resolve().parents[3] / "docs" / "assets" / "ch03"


def two_clouds(n: int = 200, seed: int = 1):
    """Two clouds drawn as in section 1.4: (n, 3) inputs with a column of ones, and 0/1 labels."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.5).astype(float)
    centres = np.array([[-1.0, -0.5], [1.0, 0.5]])
    X = centres[y.astype(int)] + 0.7 * rng.normal(size=(n, 2))
    return np.hstack([X, np.ones((n, 1))]), y


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def logistic_loss(w, X, y):
    z = X @ w
    return float(np.mean(np.logaddexp(0, z) - y * z))  # BCE, written stably


# --8<-- [start:newton_logistic]
def newton_logistic_step(w, X, y):
    """w - H^{-1} g, with g = X^T (p - y) / n and H = X^T diag(p(1 - p)) X / n."""
    n = len(y)
    p = sigmoid(X @ w)
    g = X.T @ (p - y) / n
    H = (X * (p * (1 - p))[:, None]).T @ X / n
    return w - np.linalg.solve(H, g)


def irls_step(w, X, y):
    """The same step as weighted least squares: fit X w to the working response z."""
    p = sigmoid(X @ w)
    s = p * (1 - p)  # the weights: the sigmoid's slope
    z = X @ w + (y - p) / s  # a linearisation of the logit
    Xs = X * s[:, None]
    return np.linalg.solve(Xs.T @ X, Xs.T @ z)  # argmin sum_t s_t (z_t - x_t w)^2


# --8<-- [end:newton_logistic]


def logistic_runs(steps: int = 30, lr: float = 1.0):
    """Loss per iteration (steps + 1,) of GD and of Newton, and the optimal loss."""
    X, y = two_clouds()
    n = len(y)
    runs = {}
    for name in ("gd", "newton"):
        w = np.zeros(3)
        losses = [logistic_loss(w, X, y)]
        for _ in range(steps):
            if name == "gd":
                w = w - lr * X.T @ (sigmoid(X @ w) - y) / n
            else:
                w = newton_logistic_step(w, X, y)
            losses.append(logistic_loss(w, X, y))
        runs[name] = np.array(losses)
    w = np.zeros(3)
    for _ in range(50):
        w = newton_logistic_step(w, X, y)
    return runs, logistic_loss(w, X, y)


# --8<-- [start:newton_bigram]
def bigram_loss(W_VV, C_VV):
    """-(1/n) sum_ij C_ij log softmax(W_i)_j, for (smoothed) counts C."""
    logp = W_VV - np.logaddexp.reduce(W_VV, axis=1, keepdims=True)
    return float(-(C_VV * logp).sum() / C_VV.sum())


def row_loss(w_V, c_V):
    """Row i's part of the loss, times n: -sum_j c_ij log softmax(w)_j."""
    return float(-(c_V * (w_V - np.logaddexp.reduce(w_V))).sum())


def newton_bigram_step(W_VV, C_VV):
    """One damped Newton step on every row: rows of W do not interact in the loss.

    Row i's gradient is m_i p_i - c_i and its Hessian m_i (diag p_i - p_i p_i^T), with m_i
    the row's count (both times n). The Hessian is singular along the all-ones vector
    (adding a constant to a row of logits changes nothing); the gradient has no component
    there, so adding m_i 1 1^T gives a solvable system with the same step. From W = 0 the
    full step overshoots (a logit of a rare pair goes far negative), so the step is halved
    until the row's loss falls enough (backtracking, Armijo's condition).
    """
    V = C_VV.shape[1]
    W_new = W_VV.copy()
    for i in range(V):
        w, c, m = W_VV[i], C_VV[i], C_VV[i].sum()
        p = np.exp(w - np.logaddexp.reduce(w))
        g = m * p - c
        H = m * (np.diag(p) - np.outer(p, p) + np.ones((V, V)))
        d = -np.linalg.solve(H, g)  # the Newton direction
        t, f0 = 1.0, row_loss(w, c)
        slack = 1e-12 * abs(f0)  # near the optimum, a change this small is round-off
        while row_loss(w + t * d, c) > f0 + 0.25 * t * (g @ d) + slack and t > 1e-8:
            t /= 2
        W_new[i] = w + t * d
    return W_new


# --8<-- [end:newton_bigram]


def bigram_counts(alpha: float = 1.0):
    """Smoothed bigram counts (27, 27) of the census names."""
    words = load_names("offline")
    vocab = Vocab(words)
    C = np.full((len(vocab), len(vocab)), alpha)
    for w in words:
        ix = [0] + vocab.encode(w) + [0]
        np.add.at(C, (ix[:-1], ix[1:]), 1)
    return C


def bigram_runs(steps: int = 30, lr: float = 50.0, alpha: float = 1.0):
    """Loss per iteration of GD (section 1.5's rate of 50) and of Newton, from W = 0, and
    the optimum, reached at log of the normalised counts."""
    C = bigram_counts(alpha)
    n = C.sum()
    P_star = C / C.sum(axis=1, keepdims=True)
    best = bigram_loss(np.log(P_star), C)
    runs = {}
    for name in ("gd", "newton"):
        W = np.zeros_like(C)
        losses = [bigram_loss(W, C)]
        for _ in range(steps):
            if name == "gd":
                E = np.exp(W - W.max(1, keepdims=True))
                P = E / E.sum(1, keepdims=True)
                W = W - lr * (C.sum(1, keepdims=True) * P - C) / n
            else:
                W = newton_bigram_step(W, C)
            losses.append(bigram_loss(W, C))
        runs[name] = np.array(losses)
    return runs, best


def draw(path: Path = ASSETS / "second-order.png", steps: int = 30):
    import matplotlib.pyplot as plt  # late: matplotlib is slow to import

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), constrained_layout=True)
    for ax, (title, (runs, best)) in zip(
        axes,
        [
            ("logistic regression (1.4), GD at rate 1", logistic_runs(steps)),
            ("neural bigram (1.5), GD at rate 50", bigram_runs(steps)),
        ],
    ):
        for name, label in (("gd", "gradient descent"), ("newton", "Newton")):
            gap = np.maximum(runs[name] - best, 1e-16)
            ax.semilogy(gap, marker="o" if name == "newton" else None, ms=3, label=label)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("iteration")
        ax.set_ylabel("loss - optimal loss")
        ax.legend()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


if __name__ == "__main__":
    print(draw())
