"""Draw the figure of chapter 4.2: activation statistics of a deep tanh MLP at three inits.

``primitives-activations.png``: a stack of ``LAYERS`` blocks ``Linear(WIDTH, WIDTH) ->
Tanh`` (makemore part 3's diagnostic) fed a batch of standard normal inputs. Each
Linear's weight is drawn by ``sitp.nn.init.kaiming_normal_``-style scaling,
``std = gain / sqrt(fan_in)``, for three gains: too small (0.5), the tanh gain 5/3 that
PyTorch's ``calculate_gain('tanh')`` recommends, and too large (3). For each gain, the top
panel shows the histogram of every layer's tanh outputs, the bottom one the histogram of
the gradients that reach them from a loss at the top.

Run from the repository root: ``python docs/assets/ch04/primitives_figures.py`` (seconds).
The chapter's fence calls :func:`activation_stats` and :func:`main`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

import sitp
import sitp.nn as nn

HERE = Path(__file__).resolve().parent
LAYERS, WIDTH, BATCH = 6, 100, 500
GAINS = {"gain 0.5 (too small)": 0.5, "gain 5/3 (tanh)": 5 / 3, "gain 3 (too large)": 3.0}


def deep_tanh(
    gain: float, layers: int = LAYERS, width: int = WIDTH, seed: int = 0
) -> nn.Sequential:
    """``layers`` blocks of Linear -> Tanh, weights N(0, gain^2 / fan_in), biases zero."""
    sitp.manual_seed(seed)
    blocks = []
    for _ in range(layers):
        linear = nn.Linear(width, width)
        nn.init.normal_(linear.weight, 0.0, gain / math.sqrt(width))
        nn.init.zeros_(linear.bias)
        blocks += [linear, nn.Tanh()]
    return nn.Sequential(*blocks)


def activation_stats(gain: float, layers: int = LAYERS, width: int = WIDTH, batch: int = BATCH):
    """Per layer: the tanh outputs (batch, width) and their gradients, as numpy arrays.

    The loss is the sum of the last layer's outputs times fixed random weights, so that the
    gradient reaching the top is a standard normal (batch, width) array.
    """
    model = deep_tanh(gain, layers, width)
    g = sitp.Generator().manual_seed(1)
    x = sitp.randn(batch, width, generator=g)
    outs = []
    h = x
    for m in model:
        h = m(h)
        if isinstance(m, nn.Tanh):
            h.retain_grad()
            outs.append(h)
    (h * sitp.randn(batch, width, generator=g)).sum().backward()
    return [o.detach().numpy() for o in outs], [o.grad.numpy() for o in outs]


def main(out_dir=HERE):
    import matplotlib  # late: matplotlib is slow to import; only figures need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # late: matplotlib is slow to import; only figures need it

    out_dir = Path(out_dir)
    fig, axes = plt.subplots(2, len(GAINS), figsize=(11, 5.6), dpi=110)
    colors = plt.cm.viridis(np.linspace(0, 0.9, LAYERS))
    for col, (title, gain) in enumerate(GAINS.items()):
        acts, grads = activation_stats(gain)
        for i, (a, gr) in enumerate(zip(acts, grads)):
            sat = (np.abs(a) > 0.97).mean()
            counts, edges = np.histogram(a, bins=60, range=(-1, 1), density=True)
            axes[0, col].plot(
                (edges[1:] + edges[:-1]) / 2,
                counts,
                color=colors[i],
                label=f"layer {i + 1}: std {a.std():.2f}, sat {sat:.0%}",
            )
            lim = 4 * max(np.abs(grads[-1]).std(), 1e-12)
            counts, edges = np.histogram(gr, bins=60, range=(-lim, lim), density=True)
            axes[1, col].plot(
                (edges[1:] + edges[:-1]) / 2,
                counts,
                color=colors[i],
                label=f"layer {i + 1}: std {gr.std():.2g}",
            )
        axes[0, col].set_title(title)
        axes[0, col].set_xlabel("tanh output")
        axes[1, col].set_xlabel("gradient of the tanh output")
        for r in (0, 1):
            axes[r, col].legend(fontsize=6.5, loc="upper center")
            axes[r, col].set_yticks([])
    fig.suptitle(
        f"{LAYERS} layers of Linear({WIDTH}, {WIDTH}) + Tanh, weights N(0, gain²/fan_in), "
        f"batch {BATCH}"
    )
    fig.tight_layout()
    path = out_dir / "primitives-activations.png"
    fig.savefig(path)
    plt.close(fig)
    return [path]


if __name__ == "__main__":
    print(main())
