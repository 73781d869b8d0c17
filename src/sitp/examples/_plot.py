"""What the figure modules share: matplotlib without a display, and saving a figure."""

from __future__ import annotations

from pathlib import Path


def pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no window)."""
    import matplotlib  # late: matplotlib is slow to import

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # late: matplotlib is slow to import

    return plt


def save(fig, path: Path, dpi: int = 120) -> Path:
    """Lay ``fig`` out, write it to ``path`` (making its folder) and close it."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path
