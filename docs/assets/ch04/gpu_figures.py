"""Draw the figures of sections 4.3-4.6 (GPU kernels): a grid of blocks and warps, what
each thread, warp and block of a kernel computes, and which shared-memory bank each
thread of a warp writes.

Run from the repository root: ``python docs/assets/ch04/gpu_figures.py``. The pictures
are computed from the same index arithmetic as the kernels (``sitp.kernels.cuda.layouts``), not
drawn by hand.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from sitp.kernels.cuda import layouts as L  # noqa: E402

OUT = Path(__file__).resolve().parent
plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "font.family": "sans-serif"})
GREY, BLUE, ORANGE, GREEN, RED = "#dddddd", "#4c72b0", "#dd8452", "#55a868", "#c44e52"


def grid(ax, x, y, w, h, n_rows, n_cols, color="white", lw=0.3):
    """A w x h box split into n_rows x n_cols cells; (x, y) is the top-left corner."""
    ax.add_patch(Rectangle((x, y - h), w, h, facecolor=color, edgecolor="black", lw=0.8))
    for r in range(1, n_rows):
        ax.plot([x, x + w], [y - h * r / n_rows] * 2, color="#999999", lw=lw)
    for c in range(1, n_cols):
        ax.plot([x + w * c / n_cols] * 2, [y, y - h], color="#999999", lw=lw)


def cell(ax, x, y, w, h, r, c, n_rows, n_cols, color, alpha=1.0):
    cw, ch = w / n_cols, h / n_rows
    ax.add_patch(
        Rectangle(
            (x + c * cw, y - (r + 1) * ch), cw, ch, facecolor=color, edgecolor="none", alpha=alpha
        )
    )


def setup(ax, title):
    ax.set_title(title, fontsize=10)
    ax.set_aspect("equal")
    ax.axis("off")


def grid_1d():
    """The launch of section 4.3: 8 blocks of 128 threads (4 warps each) over 1000 elements."""
    n, threads, blocks = 1000, 128, 8
    fig, ax = plt.subplots(figsize=(12, 2.3))
    ax.axis("off")
    warp_colors = ["#c6dbef", "#9ecae1", "#6baed6", "#4292c6"]
    for b in range(blocks):
        x0 = b * threads
        for w in range(threads // 32):
            ax.add_patch(
                Rectangle(
                    (x0 + 32 * w, 0), 32, 1, facecolor=warp_colors[w], edgecolor="white", lw=0.5
                )
            )
        ax.add_patch(Rectangle((x0, 0), threads, 1, facecolor="none", edgecolor="black", lw=1.2))
        ax.text(x0 + threads / 2, 1.25, f"blockIdx.x = {b}", ha="center", va="bottom", fontsize=8)
    ax.add_patch(
        Rectangle(
            (n, 0), blocks * threads - n, 1, facecolor="none", hatch="////", edgecolor=RED, lw=0
        )
    )
    ax.annotate(
        "i = 1000 ... 1023: i >= n, the bounds check\nsends these 24 threads home",
        xy=(n + 12, 0.5),
        xytext=(n - 250, -1.2),
        fontsize=8,
        color=RED,
        arrowprops=dict(arrowstyle="->", color=RED),
    )
    ax.text(
        3 * threads + 64,
        -0.25,
        "warps 0-3 of a block: threads 0-31, 32-63, 64-95, 96-127",
        ha="center",
        va="top",
        fontsize=8,
    )
    ax.text(0, -0.25, "i = blockIdx.x * 128 + threadIdx.x", ha="left", va="top", fontsize=8)
    ax.set_xlim(-5, blocks * threads + 5)
    ax.set_ylim(-1.8, 2)
    fig.tight_layout()
    fig.savefig(OUT / "gpu-grid.svg")
    plt.close(fig)


def gemm_ladder():
    """Five panels: which elements of C one warp / one thread / one block computes."""
    fig, axes = plt.subplots(1, 5, figsize=(15, 4.3))
    n = 16  # a 16 x 16 C, drawn cell by cell

    ax = axes[0]
    setup(ax, "1 naive: a warp\ntakes a column of C")
    grid(ax, 0, n, n, n, n, n)
    for lane in range(8):
        cell(ax, 0, n, n, n, lane, 3, n, n, RED)
    ax.text(
        n / 2,
        -1.2,
        "lanes 0, 1, ... -> rows i, i+1, ... (8 shown)\nloads of A: K floats apart",
        ha="center",
        va="top",
        fontsize=8,
    )

    ax = axes[1]
    setup(ax, "2 coalesced: a warp\ntakes a row of C")
    grid(ax, 0, n, n, n, n, n)
    for lane in range(8):
        cell(ax, 0, n, n, n, 3, lane, n, n, GREEN)
    ax.text(
        n / 2,
        -1.2,
        "lanes 0, 1, ... -> columns j, j+1, ... (8 shown)\nloads of B: adjacent floats",
        ha="center",
        va="top",
        fontsize=8,
    )

    ax = axes[2]
    setup(ax, "3 shared: BS x BS tiles\nof A and B per step of k")
    grid(ax, 0, n, n, n, n, n)
    for r in range(4):
        for c in range(4):
            cell(ax, 0, n, n, n, 4 + r, 8 + c, n, n, BLUE, 0.8)
    for r in range(4):
        for c in range(4):
            cell(ax, 0, n, n, n, 4 + r, c + 4, n, n, ORANGE, 0.5)  # A tile (sketch)
            cell(ax, 0, n, n, n, r + 8, 8 + c, n, n, ORANGE, 0.5)  # B tile (sketch)
    ax.text(
        n / 2,
        -1.2,
        "block = one BS x BS tile of C (blue);\norange: the tiles it stages",
        ha="center",
        va="top",
        fontsize=8,
    )

    ax = axes[3]
    setup(ax, "4 1-D blocktiling:\nTM results per thread")
    grid(ax, 0, n, n, n, n, n)
    for r in range(4):
        cell(ax, 0, n, n, n, r, 2, n, n, RED)
        cell(ax, 0, n, n, n, 4 + r, 2, n, n, GREEN)
    ax.text(
        n / 2,
        -1.2,
        "thread t: TM = 4 rows of one column\n(two threads shown)",
        ha="center",
        va="top",
        fontsize=8,
    )

    ax = axes[4]
    setup(ax, "5 2-D blocktiling:\nTM x TN patch per thread")
    grid(ax, 0, n, n, n, n, n)
    lay = L.blocktile2d_layout(n, n, 4, 4)
    colors = [RED, GREEN, BLUE, ORANGE]
    for t, col in zip([0, 1, 4, 5], colors):
        for v in range(16):
            off = lay((t, v))
            cell(ax, 0, n, n, n, off // n, off % n, n, n, col)
    ax.text(
        n / 2,
        -1.2,
        "threads 0, 1, 4, 5 of a 16-thread block\n(from sitp.kernels.cuda.layouts)",
        ha="center",
        va="top",
        fontsize=8,
    )
    for ax in axes:
        ax.set_xlim(-0.5, n + 0.5)
        ax.set_ylim(-4, n + 0.5)
    fig.tight_layout()
    fig.savefig(OUT / "gpu-gemm-ladder.svg")
    plt.close(fig)


def warptile():
    """Block tile -> warp tiles -> a lane's patches in each warp sub-tile."""
    BM = BN = 32
    WM, WN, WNITER, TM, TN = 16, 16, 2, 2, 2
    WMITER = (WM * WN) // (32 * TM * TN * WNITER)
    WSUBM, WSUBN = WM // WMITER, WN // WNITER
    TCOLS = WSUBN // TN
    fig, ax = plt.subplots(figsize=(5.2, 5.2))
    setup(
        ax,
        f"7 warp tiling: block {BM}x{BN}, warp tiles {WM}x{WN},\n"
        f"{WMITER}x{WNITER} sub-tiles of {WSUBM}x{WSUBN}, thread patches {TM}x{TN}",
    )
    grid(ax, 0, BM, BN, BM, BM, BN, lw=0.15)
    warp_colors = ["#c6dbef", "#fdd0a2", "#c7e9c0", "#dadaeb"]
    for w in range(4):
        wr, wc = (w // (BN // WN)) * WM, (w % (BN // WN)) * WN
        ax.add_patch(
            Rectangle(
                (wc, BM - wr - WM),
                WN,
                WM,
                facecolor=warp_colors[w],
                edgecolor="black",
                lw=1.2,
                alpha=0.8,
            )
        )
        ax.text(
            wc + WN / 2,
            BM - wr - WM / 2,
            f"warp {w}",
            ha="center",
            va="center",
            fontsize=9,
            color="#555555",
        )
    for lane, col in [(0, RED), (1, GREEN), (8, BLUE)]:  # lanes of warp 0
        tr, tc = (lane // TCOLS) * TM, (lane % TCOLS) * TN
        for wm in range(WMITER):
            for wn in range(WNITER):
                for r in range(TM):
                    for c in range(TN):
                        i = wm * WSUBM + tr + r
                        j = wn * WSUBN + tc + c
                        ax.add_patch(Rectangle((j, BM - i - 1), 1, 1, facecolor=col))
    ax.text(
        BN / 2,
        -1.5,
        "warp 0's lanes 0 (red), 1 (green) and 8 (blue): one patch in each of\n"
        "the warp's sub-tiles; at every k a warp reads a compact strip of shared memory",
        ha="center",
        va="top",
        fontsize=8,
    )
    ax.set_xlim(-0.5, BN + 0.5)
    ax.set_ylim(-6, BM + 0.5)
    fig.tight_layout()
    fig.savefig(OUT / "gpu-warptile.svg")
    plt.close(fig)


def banks():
    """Which bank each lane of warp 0 writes when rung 6 stores its A tile transposed."""
    BM, BK = 128, 8
    fig, axes = plt.subplots(1, 3, figsize=(13, 2.4))
    cases = [
        ("transposed store", None, 0),
        ("padded row (+1 word)", None, 1),
        ("XOR swizzle (3, 2, 5)", L.swizzle(3, 2, 5), 0),
    ]
    for ax, (title, swz, pad) in zip(axes, cases):
        words = L.transposed_store_words(BM, BK, pad=pad, swz=swz)
        degree = L.conflict_degree(words)
        setup(ax, f"{title}: {degree}-way" + (" (conflict-free)" if degree == 1 else " conflict"))
        grid(ax, 0, 8, 32, 8, 8, 32, lw=0.2)
        counts = {}
        for lane, w in enumerate(words):
            b = L.bank(w)
            row = counts.get(b, 0)
            counts[b] = row + 1
            ax.add_patch(
                Rectangle(
                    (b, 8 - row - 1),
                    1,
                    1,
                    facecolor=plt.cm.viridis(lane / 31),
                    edgecolor="white",
                    lw=0.3,
                )
            )
        ax.text(
            16,
            -0.6,
            "bank 0 ... 31 (stacked: distinct words the same bank must serve in turn)",
            ha="center",
            va="top",
            fontsize=7,
        )
        ax.set_xlim(-0.5, 32.5)
        ax.set_ylim(-2.5, 8.5)
    fig.tight_layout()
    fig.savefig(OUT / "gpu-banks.svg")
    plt.close(fig)


def flash():
    """Flash attention: a block of query rows streams K/V tiles; causal tiles skipped."""
    T, BR, BC = 16, 4, 4
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    for ax, causal in zip(axes, [False, True]):
        setup(
            ax,
            "scores of one head, "
            + ("causal" if causal else "no mask")
            + f": T = {T}, BR = BC = {BR}",
        )
        grid(ax, 0, T, T, T, T, T, lw=0.2)
        qb = 2  # the query block drawn
        for j0 in range(0, T, BC):
            for ii in range(BR):
                for jj in range(BC):
                    i, j = qb * BR + ii, j0 + jj
                    if causal and j0 >= (qb + 1) * BR:
                        continue  # the whole tile is skipped
                    masked = causal and j > i
                    color = GREY if masked else plt.cm.Blues(0.35 + 0.15 * (j0 // BC))
                    ax.add_patch(
                        Rectangle((j, T - i - 1), 1, 1, facecolor=color, edgecolor="white", lw=0.3)
                    )
        for i in range(T):
            for j in range(T):
                if causal and j > i and not (qb * BR <= i < (qb + 1) * BR):
                    ax.add_patch(
                        Rectangle((j, T - i - 1), 1, 1, facecolor="#f4f4f4", edgecolor="none")
                    )
        note = (
            "block of rows 8-11: 4 K/V tiles, left to right,\n"
            "each folded into m, l and acc, then discarded"
        )
        if causal:
            note = (
                "the same block: tiles right of row 11 are never loaded,\n"
                "grey scores inside the diagonal tile are masked"
            )
        ax.text(T / 2, -0.8, note, ha="center", va="top", fontsize=8)
        ax.text(-0.6, T / 2, "query i", rotation=90, ha="right", va="center", fontsize=8)
        ax.text(T / 2, T + 0.3, "key j", ha="center", va="bottom", fontsize=8)
        ax.set_xlim(-2, T + 0.5)
        ax.set_ylim(-3.5, T + 1.5)
    fig.tight_layout()
    fig.savefig(OUT / "gpu-flash.svg")
    plt.close(fig)


if __name__ == "__main__":
    grid_1d()
    gemm_ladder()
    warptile()
    banks()
    flash()
    print("wrote", ", ".join(sorted(p.name for p in OUT.glob("gpu-*.svg"))))
