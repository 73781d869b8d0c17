"""Draw the figures of chapter 3.2 with sitp's optimizers and schedulers.

* ``optimizer-paths.svg``: SGD, SGD with momentum, Adam and AdamW on the ill-conditioned
  quadratic bowl ``f(x, y) = 0.5 (x - 1)^2 + 12.5 (y - 1)^2``: their paths over the
  contours, and the loss at each step.
* ``lr-schedules.svg``: StepLR, CosineAnnealingLR and linear warmup + cosine decay.

Run from the repository root: ``python docs/assets/ch03/optimizers.py``. The chapter's
fences call :func:`main` with a temporary folder, so the figures are rebuilt by the tests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import sitp

HERE = Path(__file__).resolve().parent
H = (1.0, 25.0)  # the curvatures: condition number 25
MINIMUM = (1.0, 1.0)
START = (-2.0, -0.5)

# name -> (optimizer class, keyword arguments); the rates were chosen by eye, each near
# the largest that keeps its path readable.
OPTIMIZERS = {
    "SGD, lr 0.07": (sitp.optim.SGD, dict(lr=0.07)),
    "SGD + momentum 0.6": (sitp.optim.SGD, dict(lr=0.07, momentum=0.6)),
    "Adam, lr 0.2": (sitp.optim.Adam, dict(lr=0.2)),
    "AdamW, weight decay 0.5": (sitp.optim.AdamW, dict(lr=0.2, weight_decay=0.5)),
}


def bowl(p: sitp.Tensor) -> sitp.Tensor:
    """The loss: 0.5 * sum_i h_i (p_i - 1)^2."""
    h = sitp.tensor(H, dtype=p.dtype)
    return 0.5 * (h * (p - sitp.tensor(MINIMUM, dtype=p.dtype)) ** 2).sum()


def path(opt_class, kwargs, steps: int = 100, start=START) -> tuple[np.ndarray, np.ndarray]:
    """The points visited (steps + 1, 2) and the loss at each of them (steps + 1,)."""
    p = sitp.tensor(start, dtype=sitp.float64, requires_grad=True)
    opt = opt_class([p], **kwargs)
    points, losses = [], []
    for _ in range(steps + 1):
        opt.zero_grad()
        loss = bowl(p)
        points.append(p.detach().numpy().copy())
        losses.append(loss.item())
        loss.backward()
        opt.step()
    return np.array(points), np.array(losses)


def schedules(steps: int = 100, base_lr: float = 1.0) -> dict[str, np.ndarray]:
    """The learning rate at each step of three schedules, read from sitp's schedulers."""
    lr_scheduler = sitp.optim.lr_scheduler
    makers = {
        "StepLR(step_size=30, gamma=0.5)": lambda opt: lr_scheduler.StepLR(
            opt, step_size=30, gamma=0.5
        ),
        "CosineAnnealingLR(T_max=100)": lambda opt: lr_scheduler.CosineAnnealingLR(
            opt, T_max=steps
        ),
        "warmup 10 + cosine, min_lr_ratio 0.1": lambda opt: (
            lr_scheduler.get_cosine_schedule_with_warmup(opt, 10, steps, min_lr_ratio=0.1)
        ),
    }
    out = {}
    for name, make in makers.items():
        opt = sitp.optim.SGD([sitp.zeros(1, requires_grad=True)], lr=base_lr)
        sched = make(opt)
        lrs = []
        for _ in range(steps):
            lrs.append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
        out[name] = np.array(lrs)
    return out


def main(out_dir: Path = HERE, ext: str = "svg") -> list[Path]:
    import matplotlib  # late: matplotlib is slow to import; only figures need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # late: matplotlib is slow to import; only figures need it

    plt.rcParams["svg.hashsalt"] = "sitp"  # reproducible ids in the SVG
    out_dir = Path(out_dir)
    written = []

    fig, (ax, ax_loss) = plt.subplots(
        1, 2, figsize=(10, 4.2), gridspec_kw={"width_ratios": [1.25, 1]}
    )
    xs, ys = np.meshgrid(np.linspace(-2.5, 2.0, 200), np.linspace(-1.0, 2.0, 200))
    zs = 0.5 * (H[0] * (xs - 1) ** 2 + H[1] * (ys - 1) ** 2)
    ax.contour(xs, ys, zs, levels=np.geomspace(0.02, 60, 12), colors="0.75", linewidths=0.8)
    for name, (cls, kwargs) in OPTIMIZERS.items():
        points, losses = path(cls, kwargs)
        ax.plot(points[:, 0], points[:, 1], ".-", lw=1.2, ms=3, label=name)
        ax_loss.semilogy(losses, label=name)
    ax.plot(*MINIMUM, "k*", ms=12)
    ax.plot(*START, "ko", ms=5)
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title("paths on f(x, y) = ½(x−1)² + 12.5(y−1)²", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("loss f(x, y)")
    ax_loss.set_ylim(1e-12, 1e2)
    ax_loss.grid(True, alpha=0.3)
    ax_loss.set_title("loss (log scale), 100 steps", fontsize=10)
    fig.tight_layout()
    written.append(out_dir / f"optimizer-paths.{ext}")
    fig.savefig(written[-1], metadata={"Date": None})
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    for name, lrs in schedules().items():
        ax.plot(lrs, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate / base rate")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(out_dir / f"lr-schedules.{ext}")
    fig.savefig(written[-1], metadata={"Date": None})
    plt.close(fig)
    return written


if __name__ == "__main__":
    for p in main():
        print(f"wrote {p}")
