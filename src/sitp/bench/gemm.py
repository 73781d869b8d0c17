"""``python -m sitp.bench gemm``: the GEMM ladder, saxpy and sgemv against numpy.

Prints Markdown tables (the ones in section 2.3 are pasted from this output):
GFLOP/s of every ladder kernel for square N x N float32 matrices, with the ratio
to numpy/OpenBLAS at the same thread count, and GB/s of saxpy and sgemv.
"""

import json
import statistics

import numpy as np

from sitp import bench
from sitp.bench import machine_info, median_time, pause, threads, wait_for_idle
from sitp.kernels.cpu import blas

# name, kernel, uses threads, largest N to time (the naive loop takes seconds beyond)
LADDER = [
    ("naive (ijk)", blas.gemm_naive, False, 512),
    ("loop order (ikj)", blas.gemm_ikj, False, None),
    ("cache blocking", blas.gemm_blocked, False, None),
    ("packed + micro-kernel", blas.gemm_packed, False, None),
    ("packed, parallel", blas.gemm_parallel, True, None),
    ("small, unpacked", blas.gemm_small, False, None),  # not a rung: matmul's kernel below ~200^3
]


def add_arguments(p):
    p.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024], help="matrix sizes N")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per measurement")
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="repeat every measurement this many rounds; report the median",
    )
    p.add_argument(
        "--dtype", choices=["float32", "float64"], default="float32", help="element type"
    )
    p.add_argument("--skip-level12", action="store_true", help="skip saxpy/sgemv")
    p.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall: elapsed time (default); cpu: CPU time / threads, for a machine "
        "that other jobs keep busy (see sitp.bench.median_time)",
    )
    p.add_argument(
        "--max-wait",
        type=float,
        default=30.0,
        help="before each measurement, wait up to this many seconds for the CPUs to be idle",
    )
    p.add_argument("--json", help="also write the results to this JSON file")


def gemm_gflops(sizes, thread_counts, repeats=5, rounds=3, dtype=np.float32, seed=0, max_wait=30.0):
    """Measure the ladder and numpy. Returns {(kernel, threads, N): GFLOP/s}.

    Serial kernels are timed once (with 1 thread) and reported for every thread
    count. numpy and sitp are timed in separate phases (see ``sitp.bench``), each
    after waiting up to ``max_wait`` seconds for other programs to leave the CPUs idle.
    """
    rng = np.random.default_rng(seed)
    samples = {}
    for _ in range(rounds):
        for t in thread_counts:
            with threads(t):
                for n in sizes:
                    A = rng.random((n, n), dtype=dtype)
                    B = rng.random((n, n), dtype=dtype)
                    C = np.zeros((n, n), dtype)
                    flop = 2.0 * n**3
                    pause()
                    wait_for_idle(max_wait)
                    sec = median_time(lambda: A @ B, repeats, n_threads=t)
                    samples.setdefault(("numpy", t, n), []).append(flop / sec / 1e9)
                    pause()
                    for name, kernel, parallel, max_n in LADDER:
                        if (max_n is not None and n > max_n) or (
                            not parallel and t != thread_counts[0]
                        ):
                            continue
                        wait_for_idle(max_wait)
                        # cap the slow kernels at ~2 s of timing per measurement
                        sec = median_time(
                            lambda: kernel(A, B, C),
                            repeats,
                            max_s=2.0,
                            n_threads=t if parallel else 1,
                        )
                        samples.setdefault((name, t, n), []).append(flop / sec / 1e9)
    result = {key: statistics.median(v) for key, v in samples.items()}
    for (name, t, n), v in list(result.items()):  # serial kernels: same number at every t
        for t2 in thread_counts:
            result.setdefault((name, t2, n), v)
    gemm_gflops.samples = samples  # per-round values, for ratio_spread
    return result


def ratio_spread(samples, name, t, n):
    """(median, min, max) over rounds of kernel / numpy, each round's pair timed minutes apart at most."""
    ours, ref = samples.get((name, t, n)), samples.get(("numpy", t, n))
    if not ours or not ref:
        return None
    r = [a / b for a, b in zip(ours, ref)]
    return statistics.median(r), min(r), max(r)


def level12_gbps(thread_counts, repeats=7, n=1 << 24, m=4096, max_wait=30.0):
    """GB/s of saxpy (n elements) and sgemv (m x m) against numpy, per thread count."""
    rng = np.random.default_rng(1)
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    A = rng.random((m, m), dtype=np.float32)
    v = rng.random(m, dtype=np.float32)
    w = np.zeros(m, np.float32)
    alpha = np.float32(1e-3)
    out = {}
    for t in thread_counts:
        with threads(t):
            pause()
            wait_for_idle(max_wait)
            out[("numpy y += a*x", t)] = (
                12
                * n
                / median_time(lambda: np.add(y, alpha * x, out=y), repeats, n_threads=1)
                / 1e9
            )
            out[("numpy A @ x", t)] = (
                4 * m * m / median_time(lambda: A @ v, repeats, n_threads=t) / 1e9
            )
            pause()
            wait_for_idle(max_wait)
            out[("saxpy", t)] = (
                12 * n / median_time(lambda: blas.saxpy(alpha, x, y), repeats, n_threads=t) / 1e9
            )
            out[("sgemv", t)] = (
                4 * m * m / median_time(lambda: blas.sgemv(A, v, w), repeats, n_threads=t) / 1e9
            )
    return out


def gemm_table(result, sizes, thread_counts):
    """Markdown: one row per kernel, one column per (N, threads): 'GFLOP/s (ratio to numpy)'."""
    names = ["numpy"] + [name for name, *_ in LADDER]
    head = (
        "| kernel | " + " | ".join(f"N={n}, {t} thr" for n in sizes for t in thread_counts) + " |"
    )
    lines = [head, "|---" * (1 + len(sizes) * len(thread_counts)) + "|"]
    for name in names:
        cells = []
        for n in sizes:
            for t in thread_counts:
                g = result.get((name, t, n))
                if g is None:
                    cells.append("—")
                elif name == "numpy":
                    cells.append(f"{g:.1f}")
                else:
                    cells.append(f"{g:.1f} ({g / result[('numpy', t, n)]:.2f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def level12_table(res, thread_counts):
    lines = [
        "| kernel | " + " | ".join(f"{t} thr GB/s" for t in thread_counts) + " |",
        "|---" * (1 + len(thread_counts)) + "|",
    ]
    for name in ["saxpy", "numpy y += a*x", "sgemv", "numpy A @ x"]:
        lines.append(
            f"| {name} | " + " | ".join(f"{res[(name, t)]:.1f}" for t in thread_counts) + " |"
        )
    return "\n".join(lines)


def main(args):
    bench.CLOCK = args.clock
    print(f"Machine: {machine_info()}\n")
    res = gemm_gflops(
        args.sizes,
        args.threads,
        args.repeats,
        args.rounds,
        dtype=np.dtype(args.dtype).type,
        max_wait=args.max_wait,
    )
    print(
        f"GEMM, {args.dtype}, C += A @ B with square N x N matrices: GFLOP/s "
        "(ratio to numpy/OpenBLAS with the same number of threads), "
        f"median of {args.rounds} rounds x {args.repeats} calls, {args.clock} clock\n"
    )
    print(gemm_table(res, args.sizes, args.threads))
    if args.rounds > 1:
        print("\npacked, parallel / numpy, round by round: median (min to max)\n")
        for t in args.threads:
            for n in args.sizes:
                m, lo, hi = ratio_spread(gemm_gflops.samples, "packed, parallel", t, n)
                print(f"- N={n}, {t} thread{'s' if t > 1 else ''}: {m:.2f} ({lo:.2f} to {hi:.2f})")
    l12 = {}
    if not args.skip_level12:
        l12 = level12_gbps(args.threads, max_wait=args.max_wait)
        print(
            "\nsaxpy (2^24 float32) and sgemv (4096 x 4096 float32): GB/s of the memory traffic "
            "the kernel must do (12 B per element for saxpy, 4 B per matrix element for sgemv)\n"
        )
        print(level12_table(l12, args.threads))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "machine": machine_info(),
                    "clock": args.clock,
                    "gemm": [
                        {"kernel": k, "threads": t, "n": n, "gflops": g}
                        for (k, t, n), g in res.items()
                    ],
                    "rounds": [
                        {"kernel": k, "threads": t, "n": n, "gflops": v}
                        for (k, t, n), v in gemm_gflops.samples.items()
                    ],
                    "level12": [
                        {"kernel": k, "threads": t, "gbps": g} for (k, t), g in l12.items()
                    ],
                },
                f,
                indent=1,
            )
    return 0
