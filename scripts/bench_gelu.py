"""Time GELU on 262,144 float32 values, one thread: sitp's fused kernels, the old
generic op, and PyTorch, side by side (medians of --reps runs, in ms).

Usage::

    python scripts/bench_gelu.py [--n 262144] [--reps 50]

262,144 = batch 32 x block 32 x MLP width 256: one GELU of the chapter's GPT.
"""

from __future__ import annotations

import argparse
import os
import time

import numba
import numpy as np
import torch
import torch.nn.functional as TF

import sitp
import sitp.nn.functional as F
from sitp.kernels.cpu.fused.gelu import gelu_backward_kernel


def median_ms(fn, reps):
    fn()
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=262_144)
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    numba.set_num_threads(1)
    torch.set_num_threads(1)

    rng = np.random.default_rng(0)
    x_np = rng.standard_normal(args.n).astype(np.float32)
    g_np = rng.standard_normal(args.n).astype(np.float32)
    xs, gs = sitp.tensor(x_np), sitp.tensor(g_np)
    xt, gt = torch.tensor(x_np), torch.tensor(g_np)
    dx = np.empty_like(x_np)

    rows = []
    for approx in ("none", "tanh"):
        tanh = approx == "tanh"
        old = "gelu_tanh" if tanh else "gelu"
        with sitp.no_grad():
            fwd = median_ms(lambda: F.gelu(xs, approximate=approx), args.reps)
            fwd_old = median_ms(lambda: xs._unary(old), args.reps)
            bwd_old = median_ms(lambda: gs * xs._unary(old + "_grad"), args.reps)
        bwd = median_ms(lambda: gelu_backward_kernel(x_np, g_np, dx, tanh), args.reps)
        with torch.no_grad():
            fwd_t = median_ms(lambda: TF.gelu(xt, approximate=approx), args.reps)
            bwd_t = median_ms(
                lambda: torch.ops.aten.gelu_backward(gt, xt, approximate=approx), args.reps
            )
        rows.append((f"gelu ({approx}) forward", fwd, fwd_old, fwd_t))
        rows.append((f"gelu ({approx}) backward", bwd, bwd_old, bwd_t))

    print(
        f"GELU on {args.n:,} float32 values, 1 thread, median of {args.reps} runs "
        f"(load average {os.getloadavg()[0]:.2f}); torch {torch.__version__}, numba {numba.__version__}\n"
    )
    print(
        "| op | sitp fused (ms) | sitp old map_kernel (ms) | torch (ms) | fused / torch | old / fused |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, new, old, ref in rows:
        print(f"| {name} | {new:.3f} | {old:.3f} | {ref:.3f} | {new / ref:.2f} | {old / new:.1f} |")
    print(
        "\nsitp fused forward: F.gelu (Function overhead included); backward: gelu_backward_kernel."
        "\nold backward: g * x._unary('gelu_grad') (two ops, as ops.py's table). torch backward:"
        " aten.gelu_backward."
    )


if __name__ == "__main__":
    main()
