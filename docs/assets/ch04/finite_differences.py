"""Draw finite_differences.svg for chapter 4.1: the error of finite differences
of f(x1, x2) = exp(x1) sin(x2)^2 in x2, at (0.5, 1.0), as the step shrinks.

Run from the repository root: ``python docs/assets/ch04/finite_differences.py``.
Float64 arithmetic in Python's ``math``: the numbers are the same on any machine
with IEEE 754 doubles and a correctly rounded libm (any recent glibc).
"""

from __future__ import annotations

import math
from pathlib import Path


def f(x1: float, x2: float) -> float:
    return math.exp(x1) * math.sin(x2) ** 2


def errors(x1=0.5, x2=1.0, exponents=range(1, 15)):
    """(h, forward-difference error, central-difference error) for h = 10^-k."""
    exact = 2 * math.exp(x1) * math.sin(x2) * math.cos(x2)
    rows = []
    for k in exponents:
        h = 10.0 ** -k
        forward = (f(x1, x2 + h) - f(x1, x2)) / h
        central = (f(x1, x2 + h) - f(x1, x2 - h)) / (2 * h)
        rows.append((h, abs(forward - exact), abs(central - exact)))
    return rows


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "sitp"  # reproducible ids in the SVG
    rows = errors()
    h = [r[0] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.loglog(h, [max(r[1], 1e-17) for r in rows], "o-", label="forward  (f(x+h) - f(x)) / h")
    ax.loglog(h, [max(r[2], 1e-17) for r in rows], "s-", label="central  (f(x+h) - f(x-h)) / 2h")
    ax.loglog(h, h, ":", color="gray", label="slope 1: truncation ~ h")
    ax.loglog(h, [v * v for v in h], "--", color="gray", label="slope 2: truncation ~ h²")
    ax.loglog(h, [2.2e-16 / v for v in h], "-.", color="gray", label="round-off ~ ε/h")
    ax.set_ylim(1e-13, 1)
    ax.invert_xaxis()
    ax.set_xlabel("step h (smaller to the right)")
    ax.set_ylabel("|error| of ∂f/∂x₂ at (0.5, 1.0)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", framealpha=0.9)
    fig.tight_layout()
    out = Path(__file__).with_suffix(".svg")
    fig.savefig(out, metadata={"Date": None})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
