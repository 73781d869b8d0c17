"""The figure of Part III's anchor: nanoGPT's CPU recipe trained by sitp and by PyTorch.

* ``shakespeare-anchor.png``: on the left, the validation loss of both libraries every
  250 steps (the mean over the whole validation split of tinyshakespeare); on the
  right, their milliseconds per training step (the median over the rounds, with a bar
  from the fastest round to the slowest). Both are read from
  ``shakespeare-anchor.json``, which ``scripts/compare_shakespeare.py --json`` writes.

Redraw from the repository root::

    python -m sitp.examples.shakespeare_figures
"""

from __future__ import annotations

import json
from pathlib import Path

from sitp.examples.gpt_figures import _matplotlib

HERE = Path(__file__).resolve().parent
ASSETS = HERE.parents[2] / "docs" / "assets" / "part3"
RUN_JSON = HERE / "shakespeare-anchor.json"
COLORS = {"sitp": "#3f51b5", "torch": "#ee6c4d"}


def draw(run: dict, path: Path) -> Path:
    """The two validation curves and the two step times of ``run`` (the script's JSON)."""
    plt = _matplotlib()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), width_ratios=(2.2, 1))
    for name, style in (("torch", "-"), ("sitp", "--")):
        steps, losses = zip(*run["results"][name]["curve"])
        left.plot(steps, losses, style, color=COLORS[name], label=name, marker=".")
    left.set(
        xlabel="step",
        ylabel="validation loss (nats per character)",
        title="the same weights, the same batches",
    )
    left.legend(frameon=False)
    names = ["sitp", "torch"]
    ms = [run["results"][n]["ms_per_step"] for n in names]
    lo, hi = zip(*(run["results"][n]["ms_per_step_range"] for n in names))
    right.bar(names, ms, color=[COLORS[n] for n in names])
    err = [[m - a for m, a in zip(ms, lo)], [b - m for m, b in zip(ms, hi)]]
    right.errorbar(names, ms, yerr=err, fmt="none", ecolor="black", elinewidth=0.8, capsize=3)
    for i, v in enumerate(ms):
        right.text(i + 0.1, v, f"{v:.1f}", ha="left", va="bottom")
    right.set(ylabel="ms per training step", title=f"{run['rounds']} rounds: median, range")
    for ax in (left, right):
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> None:
    run = json.loads(RUN_JSON.read_text())
    print("wrote", draw(run, ASSETS / "shakespeare-anchor.png"))


if __name__ == "__main__":
    main()
