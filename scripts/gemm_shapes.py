"""The matrix products of one layer of the anchor GPT, sitp's ``matmul`` against ``torch.mm``.

The anchor (nanoGPT's CPU recipe: width 128, batch 12 x block 64, so 768 rows) runs
13 products per layer and direction: the forward's x @ W.T of its four linear layers
and the LM head, the input gradients dY @ W and the weight gradients dY.T @ X, each with
the operand layouts a training step gives them (W.T and dY.T are transposed views,
read in place). Both libraries run in this process on one thread (numba's and torch's);
each round times every product with each library, the order of the two alternating
from round to round, each call after warm-up calls of both. Printed per product: the
median GFLOP/s of each over the rounds and torch's time over sitp's with its range; and
the total of all products.

Usage::

    python scripts/gemm_shapes.py               # 7 rounds of 20 calls
    python scripts/gemm_shapes.py --smoke       # tiny rounds, for the tests
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

M, C = 768, 128  # the anchor's rows (12 x 64) and width


def shapes():
    """(name, A's shape, B's shape, layout): "bt" is A @ W.T for W of B's shape, "nn" is
    A @ B, "tn" is A.T @ B (a weight gradient, dY of A's shape)."""
    out = []
    for n, k in ((3 * C, C), (C, C), (4 * C, C), (C, 4 * C), (65, C)):
        out.append(("x @ W.T", (M, k), (n, k), "bt"))
    for n, k in ((3 * C, C), (C, C), (4 * C, C), (C, 4 * C)):
        out.append(("dY @ W", (M, n), (n, k), "nn"))
    for n, k in ((3 * C, C), (C, C), (4 * C, C), (C, 4 * C)):
        out.append(("dY.T @ X", (M, n), (M, k), "tn"))
    return out


def operands(sa, sb, layout, rng):
    a = rng.standard_normal(sa, dtype=np.float32)
    b = rng.standard_normal(sb, dtype=np.float32)
    return (a, b.T) if layout == "bt" else (a.T, b) if layout == "tn" else (a, b)


def seconds(f, calls):
    """Median seconds of ``calls`` calls of ``f`` (CPU time of this process: one thread)."""
    ts = []
    for _ in range(calls):
        t = time.process_time()
        f()
        ts.append(time.process_time() - t)
    return statistics.median(ts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--smoke", action="store_true", help="2 rounds of 2 calls")
    args = ap.parse_args(argv)
    if args.smoke:
        args.rounds, args.calls = 2, 2

    import torch  # late: a test-only dependency

    from sitp.bench import cpu_model, simd_flags, threads
    from sitp.kernels.cpu import blas

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    rows = []
    with threads(1):
        for name, sa, sb, layout in shapes():
            a, b = operands(sa, sb, layout, rng)
            ta, tb = torch.from_numpy(np.ascontiguousarray(a)), torch.from_numpy(b.copy())
            if layout == "bt":  # W.T, a view of W, as nn.Linear reads it
                tb = torch.from_numpy(np.ascontiguousarray(b.T)).T
            if layout == "tn":  # dY.T, a view of dY
                ta = torch.from_numpy(np.ascontiguousarray(a.T)).T
            np.testing.assert_allclose(blas.matmul(a, b), (ta @ tb).numpy(), rtol=1e-3, atol=1e-3)
            arms = {"sitp": lambda a=a, b=b: blas.matmul(a, b), "torch": lambda: torch.mm(ta, tb)}
            for f in arms.values():  # warm both
                f(), f()
            got = {k: [] for k in arms}
            for r in range(args.rounds):
                for k in list(arms)[:: 1 if r % 2 == 0 else -1]:
                    got[k].append(seconds(arms[k], args.calls))
            (m, k_), n = a.shape, b.shape[1]
            rows.append((name, (m, k_, n), got))
    print(f"{cpu_model()} ({simd_flags()}), one thread, {args.rounds} alternating rounds of "
          f"{args.calls} calls, process CPU time; torch {torch.__version__}")  # fmt: skip
    print(f"{'product':10s} {'M x K x N':>15s} {'sitp GF/s':>10s} {'torch GF/s':>11s}"
          f" {'torch/sitp time (rounds)':>25s}")  # fmt: skip
    total = {"sitp": 0.0, "torch": 0.0}
    for name, (m, k_, n), got in rows:
        flop = 2.0 * m * k_ * n
        med = {k: statistics.median(v) for k, v in got.items()}
        ratios = [t / s for s, t in zip(got["sitp"], got["torch"], strict=True)]
        for k in total:
            total[k] += med[k]
        print(f"{name:10s} {f'{m}x{k_}x{n}':>15s} {flop / med['sitp'] / 1e9:10.1f}"
              f" {flop / med['torch'] / 1e9:11.1f} {statistics.median(ratios):12.2f}"
              f" ({min(ratios):.2f}-{max(ratios):.2f})")  # fmt: skip
    print(f"all {len(rows)}: sitp {1e3 * total['sitp']:.2f} ms, torch {1e3 * total['torch']:.2f} ms,"
          f" torch/sitp time {total['torch'] / total['sitp']:.2f}")  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
