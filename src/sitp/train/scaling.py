"""Scaling laws: ``L(N, D) = E + A / N^alpha + B / D^beta``, fitted to measured runs (chapter 5.5).

The Chinchilla form (Hoffmann et al. 2022, their approach 3): a run's final loss is
an irreducible part ``E``, plus a part that shrinks as a power of the parameter count
``N``, plus one that shrinks as a power of the training tokens ``D``. Five numbers
describe a whole grid of runs, and with compute ``C = 6 N D`` (two FLOPs a parameter
for each token's forward pass, four for its backward) they say which ``N`` and ``D``
make the best model for a budget of ``C``: the compute-optimal frontier.

The fit is least squares on the losses themselves, with numpy alone. For fixed
exponents the law is linear in ``(E, A, B)``, so the code solves that 3 x 3 linear
problem for every pair ``(alpha, beta)`` of a grid at once (variable projection), keeps
the best pair with ``E, A, B >= 0``, and refines the grid around it twice. The
uncertainty is a bootstrap: the runs are drawn again with replacement, the law is
fitted to each draw, and the spread of the fits is the spread of the estimate.

Example:
    >>> import numpy as np
    >>> N, D = np.meshgrid([1e4, 3e4, 1e5, 3e5], [1e5, 3e5, 1e6, 3e6])
    >>> L = 1.5 + 40.0 / N**0.4 + 300.0 / D**0.35
    >>> fit = fit_scaling_law(N.ravel(), D.ravel(), L.ravel())
    >>> round(fit.E, 3), round(fit.alpha, 3), round(fit.beta, 3)
    (1.5, 0.4, 0.35)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class ScalingFit:
    """The five numbers of ``L(N, D) = E + A / N^alpha + B / D^beta`` and the residual."""

    E: float
    A: float
    alpha: float
    B: float
    beta: float
    rms: float  # root mean square of the residuals, in the units of L

    def __call__(self, N, D):
        """The law's loss at ``N`` parameters and ``D`` tokens (arrays broadcast)."""
        N, D = np.asarray(N, dtype=np.float64), np.asarray(D, dtype=np.float64)
        return self.E + self.A * N**-self.alpha + self.B * D**-self.beta

    # --8<-- [start:optimal]
    def optimal(self, C):
        """The best split of compute ``C = 6 N D``: ``(N_opt, D_opt, L_opt)``.

        With ``D = C / (6N)``, the loss ``E + A N^-alpha + B (C / 6)^-beta N^beta`` is
        smallest where its derivative in N is zero:
        ``N_opt = G (C / 6)^(beta / (alpha + beta))``, ``G = (alpha A / (beta B))^(1 / (alpha + beta))``.
        """
        C = np.asarray(C, dtype=np.float64)
        a, b = self.alpha, self.beta
        G = (a * self.A / (b * self.B)) ** (1.0 / (a + b))
        N_opt = G * (C / 6.0) ** (b / (a + b))
        D_opt = C / (6.0 * N_opt)
        return N_opt, D_opt, self(N_opt, D_opt)

    # --8<-- [end:optimal]

    def as_dict(self) -> dict:
        return {k: float(v) for k, v in asdict(self).items()}


# --8<-- [start:fit]
def _best_on_grid(xN_an, xD_bn, L_n, w_n, free_E=True):
    """For every (alpha, beta) of the grid: the weighted least-squares (E, A, B) and its
    sum of squares. The sums of the normal equations are matrix products over the runs.
    With ``free_E=False`` the law has no constant (E is held at 0): (A, B) alone.

    Returns the flat index of the best feasible pair (E, A, B >= 0), its (E, A, B), its SSE.
    """
    wL_n = w_n * L_n
    s1, sL, sLL = w_n.sum(), wL_n.sum(), (wL_n * L_n).sum()
    sN_a, sNN_a, sNL_a = xN_an @ w_n, (xN_an**2) @ w_n, xN_an @ wL_n
    sD_b, sDD_b, sDL_b = xD_bn @ w_n, (xD_bn**2) @ w_n, xD_bn @ wL_n
    sND_ab = (xN_an * w_n) @ xD_bn.T
    a, b = len(sN_a), len(sD_b)
    G_ab33 = np.empty((a, b, 3, 3))  # the normal equations' matrix, one per pair
    G_ab33[..., 0, 0] = s1
    G_ab33[..., 0, 1] = G_ab33[..., 1, 0] = sN_a[:, None]
    G_ab33[..., 0, 2] = G_ab33[..., 2, 0] = sD_b[None, :]
    G_ab33[..., 1, 1] = sNN_a[:, None]
    G_ab33[..., 2, 2] = sDD_b[None, :]
    G_ab33[..., 1, 2] = G_ab33[..., 2, 1] = sND_ab
    r_ab3 = np.empty((a, b, 3))
    r_ab3[..., 0], r_ab3[..., 1], r_ab3[..., 2] = sL, sNL_a[:, None], sDL_b[None, :]
    if not free_E:  # the 2 x 2 block of A and B
        G_ab33, r_ab3 = G_ab33[..., 1:, 1:], r_ab3[..., 1:]
    try:
        theta_ab3 = np.linalg.solve(G_ab33, r_ab3[..., None])[..., 0]
    except np.linalg.LinAlgError:  # a draw that makes some pair's columns dependent
        theta_ab3 = (np.linalg.pinv(G_ab33, hermitian=True) @ r_ab3[..., None])[..., 0]
    sse_ab = sLL - (theta_ab3 * r_ab3).sum(-1)  # at the solution, SSE = sum wL^2 - theta.r
    sse_ab[(theta_ab3 < 0).any(axis=-1)] = np.inf  # a loss has no negative part
    best = int(np.argmin(sse_ab))
    theta = theta_ab3.reshape(-1, theta_ab3.shape[-1])[best]
    return best, (theta if free_E else np.r_[0.0, theta]), float(sse_ab.reshape(-1)[best])


def fit_scaling_law(N, D, L, weights=None, alphas=None, betas=None, refine=2, E=None) -> ScalingFit:
    """Fits ``L = E + A / N^alpha + B / D^beta`` by least squares.

    Args:
        N, D, L: the runs' parameter counts, token counts and final losses (1-D, same length).
        weights: how many times each run counts (the bootstrap's draw); default once each.
        alphas, betas: the grid of exponents searched first (default 0.02 to 2.0, step 0.02);
            the refinements stay inside it, so an exponent found at its edge is a sign
            that the runs do not pin it down.
        refine: how many times the grid is refined around its best pair, ten times finer each.
        E: hold the constant at this value and fit the other four (a hypothesis to test:
            does the law with a known floor fit the runs as well?).

    Returns:
        A :class:`ScalingFit`.
    """
    N, D, L = (np.asarray(v, dtype=np.float64).reshape(-1) for v in (N, D, L))
    if not len(N) == len(D) == len(L):
        raise ValueError(
            f"N, D and L must have one value per run; got {len(N)}, {len(D)}, {len(L)}"
        )
    if len(L) < 5:
        raise ValueError(f"five numbers need at least 5 runs to fit, got {len(L)}")
    if (N <= 0).any() or (D <= 0).any() or not np.isfinite(L).all():
        raise ValueError("N and D must be positive and L finite")
    if len(np.unique(N)) < 2 or len(np.unique(D)) < 2:
        raise ValueError("the runs need at least two values of N and two of D")
    w_n = np.ones_like(L) if weights is None else np.asarray(weights, dtype=np.float64)
    # measured from the geometric means, the columns of the linear problem are of order 1
    N0, D0 = np.exp(np.log(N).mean()), np.exp(np.log(D).mean())
    lN_n, lD_n = np.log(N / N0), np.log(D / D0)
    alphas = np.arange(0.02, 2.0001, 0.02) if alphas is None else np.asarray(alphas, float)
    betas = np.arange(0.02, 2.0001, 0.02) if betas is None else np.asarray(betas, float)
    lo_a, hi_a, lo_b, hi_b = alphas.min(), alphas.max(), betas.min(), betas.max()
    for level in range(refine + 1):
        xN_an = np.exp(-alphas[:, None] * lN_n[None, :])
        xD_bn = np.exp(-betas[:, None] * lD_n[None, :])
        best, (E0, A0, B0), sse = _best_on_grid(xN_an, xD_bn, L - (E or 0.0), w_n, E is None)
        alpha, beta = float(alphas[best // len(betas)]), float(betas[best % len(betas)])
        if level < refine:  # ten times finer, around the best pair
            da, db = np.diff(alphas).min(), np.diff(betas).min()
            alphas = alpha + np.linspace(-da, da, 21)
            betas = beta + np.linspace(-db, db, 21)
            alphas = alphas[(alphas >= lo_a) & (alphas <= hi_a)]
            betas = betas[(betas >= lo_b) & (betas <= hi_b)]
    if not np.isfinite(sse):
        raise ValueError("no exponents on the grid give E, A and B >= 0")
    rms = float(np.sqrt(max(sse, 0.0) / w_n.sum()))
    # back to N and D themselves: A0 (N / N0)^-alpha = (A0 N0^alpha) N^-alpha
    E = E0 if E is None else E
    return ScalingFit(float(E), float(A0 * N0**alpha), alpha, float(B0 * D0**beta), beta, rms)


def bootstrap(N, D, L, rounds=200, seed=0, **fit_options) -> list[ScalingFit]:
    """The law fitted to ``rounds`` draws of the runs with replacement.

    A draw counts each run as often as it was drawn (the fit's ``weights``). A draw
    with fewer than two values of N or of D cannot be fitted and is drawn again.
    """
    N, D, L = (np.asarray(v, dtype=np.float64).reshape(-1) for v in (N, D, L))
    rng = np.random.default_rng(seed)
    fits = []
    while len(fits) < rounds:
        counts_n = np.bincount(rng.integers(0, len(L), len(L)), minlength=len(L))
        drawn = counts_n > 0
        if len(np.unique(N[drawn])) < 2 or len(np.unique(D[drawn])) < 2 or drawn.sum() < 5:
            continue
        fits.append(fit_scaling_law(N, D, L, weights=counts_n, **fit_options))
    return fits


# --8<-- [end:fit]


def interval(values, level=0.9):
    """The central ``level`` interval of ``values`` (percentiles): ``(low, high)``."""
    lo, hi = np.percentile(
        np.asarray(values, dtype=np.float64), [50 * (1 - level), 50 * (1 + level)]
    )
    return float(lo), float(hi)


__all__ = ["ScalingFit", "bootstrap", "fit_scaling_law", "interval"]
