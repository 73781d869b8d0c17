"""The figures of section 5.5: the scaling sweep, its fitted law and the compute-optimal frontier.

* ``scaling-laws.png``: left, each size's final validation loss against its training
  tokens D, with the fitted L(N, D) through them, the language's exact floor, and the
  best losses of a predictor that sees one or two letters of context;
  middle, the same runs against compute C = 6ND, with the frontier (the least loss the
  law allows at each C) and its bootstrap band; right, the compute-optimal parameter
  count N_opt(C), with its band, and the span of compute the sweep covers.

Everything is read from ``scaling-sweep.json``, which ``scripts/scaling_sweep.py``
writes. Redraw from the repository root::

    python -m sitp.examples.scaling_figures
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sitp.examples._plot import pyplot, save
from sitp.train.scaling import bootstrap, fit_scaling_law

HERE = Path(__file__).resolve().parent
ASSETS = HERE.parents[2] / "docs" / "assets" / "part3"
RUN_JSON = HERE / "scaling-sweep.json"


def grid_cells(record: dict):
    """One row per (size, tokens) of the sweep: N, D, the mean loss over its seeds, and
    the losses of every seed. Returns ``(names, N, D, L, losses)`` (sorted by N, then D)."""
    cells: dict = {}
    for r in record["points"]:
        cells.setdefault((r["N"], r["D"], r["size"]), []).append(r["val_loss"])
    keys = sorted(cells)
    names = [k[2] for k in keys]
    N = np.array([k[0] for k in keys], dtype=np.float64)
    D = np.array([k[1] for k in keys], dtype=np.float64)
    L = np.array([np.mean(cells[k]) for k in keys])
    return names, N, D, L, [cells[k] for k in keys]


def draw(record: dict, path: Path, rounds: int = 200) -> Path:
    names, N, D, L, losses = grid_cells(record)
    fit = fit_scaling_law(N, D, L)
    fits = bootstrap(N, D, L, rounds=rounds, seed=0)
    floor = record["source"]["window_floor"]
    plt = pyplot()
    fig, (left, mid, right) = plt.subplots(1, 3, figsize=(13, 4))
    sizes = list(dict.fromkeys(names))
    colors = plt.cm.viridis(np.linspace(0.05, 0.85, len(sizes)))
    D_line = np.logspace(np.log10(D.min() / 1.5), np.log10(D.max() * 1.5), 100)
    for size, color in zip(sizes, colors):
        mine = [i for i, n in enumerate(names) if n == size]
        n = N[mine[0]]
        for i in mine:
            left.plot([D[i]] * len(losses[i]), losses[i], "o", color=color, ms=4, alpha=0.7)
            mid.plot([6 * N[i] * D[i]] * len(losses[i]), losses[i], "o", color=color, ms=4)
        left.plot(D_line, fit(n, D_line), "-", color=color, lw=1, label=f"{size}: N = {n:,.0f}")
        mid.plot(6 * n * D_line, fit(n, D_line), "-", color=color, lw=1)
    for ax in (left, mid):
        ax.axhline(floor, color="black", ls=":", lw=1)
        ax.set_xscale("log")
    left.text(D_line[0], floor, " the language's floor", va="bottom", fontsize=8)
    H = record["source"]["block_entropies"]
    for context, loss in ((1, H[1] - H[0]), (2, H[2] - H[1])):  # the best with 1 or 2 letters
        left.axhline(loss, color="grey", ls=":", lw=0.8)
        left.text(D_line[0], loss, f" best seeing {context} letter{'s' * (context > 1)}",
                  ha="left", va="bottom", fontsize=8, color="grey")  # fmt: skip
    left.set(xlabel="training tokens D", ylabel="validation loss (nats per letter)",
             title="loss against data, one curve per size")  # fmt: skip
    left.legend(frameon=False, fontsize=8)

    C_seen = 6 * N * D
    C_line = np.logspace(np.log10(C_seen.min()) - 1, np.log10(C_seen.max()) + 1, 120)
    frontier = np.array([f.optimal(C_line) for f in fits])  # (rounds, 3, C)
    lo, hi = np.percentile(frontier, [5, 95], axis=0)
    N_opt, _, L_opt = fit.optimal(C_line)
    mid.plot(C_line, L_opt, "k-", lw=1.5, label="frontier of the fit")
    mid.fill_between(C_line, lo[2], hi[2], color="black", alpha=0.15, lw=0, label="90% bootstrap")
    mid.set(xlabel="compute C = 6ND (FLOPs)", ylabel="validation loss (nats per letter)",
            title="loss against compute", ylim=(floor - 0.05, L.max() + 0.05))  # fmt: skip
    mid.legend(frameon=False, fontsize=8)

    right.plot(C_line, N_opt, "k-", lw=1.5, label="N_opt(C) of the fit")
    right.fill_between(C_line, lo[0], hi[0], color="black", alpha=0.15, lw=0, label="90% bootstrap")
    right.axvspan(
        C_seen.min(), C_seen.max(), color="#3f51b5", alpha=0.08, label="compute of the runs"
    )
    for size, color in zip(sizes, colors):
        right.axhline(N[names.index(size)], color=color, lw=0.8, ls="--")
    right.set(xscale="log", yscale="log", xlabel="compute C = 6ND (FLOPs)",
              ylabel="parameters N (non-embedding)", title="compute-optimal size",
              ylim=(N.min() / 30, N.max() * 30))  # fmt: skip
    right.legend(frameon=False, fontsize=8, loc="upper left")
    for ax in (left, mid, right):
        ax.spines[["top", "right"]].set_visible(False)
    return save(fig, path)


def main() -> None:
    record = json.loads(RUN_JSON.read_text())
    print("wrote", draw(record, ASSETS / "scaling-laws.png"))


if __name__ == "__main__":
    main()
