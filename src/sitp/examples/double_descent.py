"""Double descent in least squares on random features (chapter 3's introduction), in numpy.

The data: n examples of D = 400 random Gaussian features, with targets linear in all of
them plus noise; the true coefficients decay as 1/sqrt(j), so early features matter
most. A model sees the first p features and is fitted by least squares; for p > n there
are many exact fits and ``np.linalg.lstsq`` returns the one of minimum norm. The test
error falls, rises to a peak at p = n (the interpolation threshold), and falls again.

``double-descent.png`` is drawn by ``python -m sitp.examples.double_descent`` (seconds).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ASSETS = Path(__file__).resolve().parents[3] / "docs" / "assets" / "ch03"


# --8<-- [start:heldout_error]
def heldout_error(
    p: int, n: int = 40, D: int = 400, noise: float = 0.3, seed: int = 0, n_test: int = 500
) -> float:
    """Test mean squared error of least squares on the first ``p`` of ``D`` features."""
    rng = np.random.default_rng(seed)
    beta_D = np.arange(1, D + 1) ** -0.5
    beta_D /= np.linalg.norm(beta_D)  # the signal has variance 1
    X_ND, X_test = rng.normal(size=(n, D)), rng.normal(size=(n_test, D))
    y_N = X_ND @ beta_D + noise * rng.normal(size=n)
    coef, *_ = np.linalg.lstsq(X_ND[:, :p], y_N, rcond=None)  # minimum norm if p > n
    return float(np.mean((X_test[:, :p] @ coef - X_test @ beta_D) ** 2))


# --8<-- [end:heldout_error]


def sweep(ps=None, n: int = 40, seeds: int = 20):
    """Feature counts and the median test error over ``seeds`` draws at each."""
    ps = np.unique(np.round(np.geomspace(1, 400, 30)).astype(int)) if ps is None else ps
    errors = np.array([[heldout_error(int(p), n, seed=s) for s in range(seeds)] for p in ps])
    return np.asarray(ps), np.median(errors, axis=1)


def draw(path: Path = ASSETS / "double-descent.png", n: int = 40):
    import matplotlib.pyplot as plt  # late: matplotlib is slow to import

    ps, err = sweep(n=n)
    fig, ax = plt.subplots(figsize=(6.4, 3.4), constrained_layout=True)
    ax.loglog(ps, err, marker="o", ms=3)
    ax.axvline(n, color="grey", ls="--", lw=1)
    ax.text(n * 1.08, err.max() / 2, f"p = n = {n}", color="grey")
    ax.set_xlabel("features p the model sees (of 400)")
    ax.set_ylabel("test MSE (median of 20 draws)")
    ax.set_title(f"least squares, minimum norm past p = n; n = {n} examples", fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


if __name__ == "__main__":
    print(draw())
