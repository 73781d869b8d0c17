"""Draw the layers of the package, bottom to top: docs/assets/layout.svg.

Run from the repository root: ``python scripts/layout_diagram.py``. The figure is the
picture of the `layers` contract of import-linter in pyproject.toml (docs/layout.md says
what each layer holds); when a layer gains or loses a module, change LAYERS here and
rerun.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "docs" / "assets" / "layout.svg"
plt.rcParams.update(
    {
        "svg.fonttype": "none",
        "svg.hashsalt": "sitp-layout",
        "font.size": 9,
        "font.family": "sans-serif",
    }
)

# Bottom to top: (name, its boxes, the chapters it serves, fill colour). Each box is
# (title, modules, relative width); the two backends, marked apart by a red cross, do not
# import each other.
LAYERS = [
    ("0  foundation", [("", "_env  _target  dtypes  strides", 1)], "2.1", "#eeeeee"),
    (
        "1  kernels",
        [
            ("kernels/cpu", "ops kernels blas/ vecmath fused/ memory", 1),
            ("kernels/cuda", "ops gemm attention fused layouts launch", 1),
            ("kernels/", "interface scalar layout", 0.62),
            ("cuda.py", "the device API", 0.42),
        ],
        "2.2, 2.3, 4.2–4.6",
        "#c6dbef",
    ),
    (
        "2  the tensor",
        [("", "_tensor/{tensor, dispatch, creation, printing}   random", 1)],
        "2.1",
        "#c7e9c0",
    ),
    (
        "3  autograd",
        [("", "autograd/{grad_mode, function, derivatives, engine, forward_ad, gradcheck}", 1)],
        "4.1",
        "#fdd0a2",
    ),
    (
        "4  methods",
        [("", "methods/{views, indexing, math, inplace, convert}   functional", 1)],
        "2.1, 2.2, 4.1",
        "#fee6ce",
    ),
    ("5  distributed", [("", "distributed/{_c10d, run, ring, optim}", 1)], "7", "#e5f5e0"),
    (
        "6  PyTorch mirror",
        [("", "nn (nn.parallel)  optim  utils.data  linalg  serialization", 1)],
        "3, 4.2, 7",
        "#dadaeb",
    ),
    ("7  compile", [("", "compile/{capture, graph, passes, codegen, runtime}", 1)], "6", "#fde0dd"),
    (
        "8  applications",
        [("", "models  data  train  tokenizers  posttrain  bench  examples  exercises", 1)],
        "1, 3, 5, 8",
        "#f2f2f2",
    ),
]


def main() -> None:
    n = len(LAYERS)
    row, gap, x0, width = 1.0, 0.28, 2.3, 9.2
    fig, ax = plt.subplots(figsize=(11.5, 0.62 * n * (row + gap) + 0.4))
    ax.set_xlim(0, 13.2)
    ax.set_ylim(-0.25, n * (row + gap) + 0.1)
    ax.axis("off")
    for i, (name, boxes, chapters, color) in enumerate(LAYERS):
        y = i * (row + gap)
        ax.text(
            x0 - 0.15, y + row / 2, name, ha="right", va="center", fontsize=10, fontweight="bold"
        )
        ax.text(x0 + width + 0.15, y + row / 2, chapters, ha="left", va="center", color="#555555")
        unit = (width - 0.3 * (len(boxes) - 1)) / sum(b[2] for b in boxes)
        bx = x0
        for k, (title, modules, weight) in enumerate(boxes):
            w = unit * weight
            ax.add_patch(
                FancyBboxPatch(
                    (bx, y),
                    w,
                    row,
                    boxstyle="round,pad=0,rounding_size=0.12",
                    facecolor=color,
                    edgecolor="#555555",
                    lw=0.8,
                )
            )
            if title:
                ax.text(
                    bx + w / 2, y + 0.68 * row, title, ha="center", va="center", fontweight="bold"
                )
                ax.text(
                    bx + w / 2,
                    y + 0.3 * row,
                    modules,
                    ha="center",
                    va="center",
                    family="sans-serif" if title == "cuda.py" else "monospace",
                    fontsize=7,
                )
            else:
                ax.text(
                    bx + w / 2,
                    y + row / 2,
                    modules,
                    ha="center",
                    va="center",
                    family="monospace",
                    fontsize=8.5,
                )
            if title == "kernels/cuda":  # the two backends do not import each other
                ax.text(
                    bx - 0.15,
                    y + row / 2,
                    "✕",
                    ha="center",
                    va="center",
                    color="#c44e52",
                    fontsize=11,
                    fontweight="bold",
                )
            bx += w + 0.3
    top = n * (row + gap) - gap
    ax.add_patch(
        FancyArrowPatch(
            (0.35, top - 0.1),
            (0.35, 0.1),
            arrowstyle="-|>",
            mutation_scale=14,
            color="#444444",
            lw=1.2,
        )
    )
    ax.text(
        0.5, top / 2, "imports point down", rotation=90, ha="left", va="center", color="#444444"
    )
    ax.text(
        x0 + width + 0.15,
        top + 0.02,
        "chapters",
        ha="left",
        va="bottom",
        color="#555555",
        fontstyle="italic",
    )
    fig.tight_layout(pad=0.2)
    fig.savefig(OUT, metadata={"Date": None}, facecolor="white")
    print("wrote", OUT.relative_to(Path.cwd()) if OUT.is_relative_to(Path.cwd()) else OUT)


if __name__ == "__main__":
    main()
