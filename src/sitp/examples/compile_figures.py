"""The figures of chapter 6 (compiling tensor programs).

* ``compile-graph.png``: the layer norm of a residual sum (6.1) as captured, twelve
  backend calls, beside the three kernels that fusion makes of it (6.2), with a line from
  each call to each kernel that computes it (an op recomputed by two kernels has two).
  Traced afresh by sitp when drawn.
* ``compile-bytes.png``: the bytes each benchmark block moves, eager and compiled, and
  the latest run's medians over its rounds with their range, read from
  ``compile-bench.json``, which ``scripts/bench_compile.py --json`` writes.

Redraw from the repository root::

    python -m sitp.examples.compile_figures
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import sitp
from sitp.compile import CompiledFunction
from sitp.examples._plot import pyplot, save

HERE = Path(__file__).resolve().parent
ASSETS = HERE.parents[2] / "docs" / "assets" / "part3"
BENCH_JSON = HERE / "compile-bench.json"
KERNEL_COLORS = ("#3f51b5", "#ee6c4d", "#2a9d8f", "#8e6c8a", "#e9c46a", "#6d597a")


def ln_residual(x, r, g, b):
    """Layer norm of ``x + r`` written with ops, as in 6.1."""
    y = x + r
    m = y.mean(-1, keepdim=True)
    d = y - m
    v = (d * d).mean(-1, keepdim=True)
    return d * (v + 1e-5).rsqrt() * g + b


def fusion_groups(fn=ln_residual, rows=512, width=128):
    """The captured ops of ``fn`` and, for each generated kernel, its name and the ids of
    the captured ops it computes: ``([(id, label)], [(name, [ids])])``."""
    rng = np.random.default_rng(0)
    x, r = (sitp.tensor(rng.standard_normal((rows, width)).astype(np.float32)) for _ in "xr")
    g, b = (sitp.tensor(rng.standard_normal(width).astype(np.float32)) for _ in "gb")
    raw = CompiledFunction(fn, passes_on=())
    cf = sitp.compile(fn)
    with sitp.no_grad():
        raw(x, r, g, b)
        cf(x, r, g, b)
    ops = [(n.id, n.op) for n in raw.graph.nodes]
    kernels = [
        (n.kernel.name, [m.id for m in n.kernel.nodes])
        for n in cf.graph.nodes
        if n.kernel is not None
    ]
    return ops, kernels


def draw_graph(ops, kernels, path: Path) -> Path:
    """Captured ops on the left, kernels on the right, a line from op to kernel."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.2))
    n = len(ops)
    y_op = {oid: n - 1 - i for i, (oid, _) in enumerate(ops)}
    for oid, label in ops:
        ax.text(
            0,
            y_op[oid],
            label,
            ha="center",
            va="center",
            fontsize=10,
            bbox={"boxstyle": "round", "fc": "white", "ec": "#555555"},
        )
    ys = np.linspace(n - 1.5, 0.5, len(kernels)) if len(kernels) > 1 else [n / 2]
    for k, ((name, members), yk) in enumerate(zip(kernels, ys)):
        color = KERNEL_COLORS[k % len(KERNEL_COLORS)]
        chain = " → ".join(label for oid, label in ops if oid in members)
        ax.text(
            1.0,
            yk,
            f"{name}: {chain}",
            ha="left",
            va="center",
            fontsize=9,
            color="white",
            bbox={"boxstyle": "round", "fc": color, "ec": color},
        )
        for oid in members:
            if oid in y_op:
                ax.plot([0.12, 0.97], [y_op[oid], yk], color=color, lw=1.2, alpha=0.8)
    ax.text(0, n, f"captured: {n} calls", ha="center", fontsize=11, weight="bold")
    ax.text(1.0, n, f"fused: {len(kernels)} kernels", ha="left", fontsize=11, weight="bold")
    ax.set_xlim(-0.3, 2.6)
    ax.set_ylim(-0.8, n + 0.6)
    ax.axis("off")
    return save(fig, path)


def draw_bytes(bench: dict, path: Path) -> Path:
    """MB moved eager and compiled (left); the latest run's median ms over its rounds, with
    a bar from the fastest round to the slowest (right)."""
    plt = pyplot()
    run = bench["runs"][-1]
    blocks = [b for b in run["rows"] if b != "GPT train step"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    at = np.arange(len(blocks))
    for off, key, label, color in (
        (-0.2, "bytes_eager", "eager sitp", "#9e9e9e"),
        (0.2, "bytes_compiled", "compiled sitp", "#3f51b5"),
    ):
        mb = [run["rows"][b][key] / 1e6 for b in blocks]
        left.bar(at + off, mb, 0.4, label=label, color=color)
    left.set(xticks=at, xticklabels=blocks, ylabel="MB read and written", title="bytes moved")
    left.legend(frameon=False)
    cols = (
        ("eager", "eager sitp", "#9e9e9e"),
        ("compiled", "compiled sitp", "#3f51b5"),
        ("torch", "torch eager", "#ee6c4d"),
        ("inductor", "torch.compile", "#2a9d8f"),
    )
    w = 0.8 / len(cols)
    for j, (key, label, color) in enumerate(cols):
        ms = np.array([run["rows"][b][key] for b in blocks])
        lo, hi = np.array([run["rows"][b]["range_ms"][key] for b in blocks]).T
        right.bar(at + (j - 1.5) * w, ms, w, label=label, color=color)
        right.errorbar(at + (j - 1.5) * w, ms, yerr=[ms - lo, hi - ms], fmt="none",
                       ecolor="black", elinewidth=0.8, capsize=2)  # fmt: skip
    right.set(
        xticks=at,
        xticklabels=blocks,
        ylabel="ms per call (log scale)",
        yscale="log",
        title=f"median over {run['rounds']} rounds (bars: their range)",
    )
    right.legend(frameon=False, fontsize=8)
    for ax in (left, right):
        ax.spines[["top", "right"]].set_visible(False)
        ax.tick_params(axis="x", labelsize=8)
    m = run["harness"]["machine"]
    fig.suptitle(f"{m['cpu']} ({m['isa']}), one thread, float32", fontsize=9)
    return save(fig, path)


def main() -> None:
    ops, kernels = fusion_groups()
    print("wrote", draw_graph(ops, kernels, ASSETS / "compile-graph.png"))
    bench = json.loads(BENCH_JSON.read_text())
    print("wrote", draw_bytes(bench, ASSETS / "compile-bytes.png"))


if __name__ == "__main__":
    main()
