"""``python -m sitp.bench roofline``: measure this machine's roofs and draw the roofline.

Two ceilings bound the speed of any kernel (each measured as the best of seven runs). Compute: the peak FLOP/s, measured
by running the GEMM micro-kernel on panels that sit in L1 on every thread (the
best this code generator can do; vendor peak is a little higher). Memory: the
bandwidth of the STREAM triad ``a = b + alpha * c`` on arrays much larger than
the last-level cache (DRAM) and on arrays that fit in L2. A kernel of arithmetic
intensity I (FLOPs per byte moved) cannot exceed min(peak, I * bandwidth).
"""

import json

import numpy as np
from numba import njit, prange

from sitp import bench
from sitp.bench import machine_info, median_time, pause, threads, wait_for_idle
from sitp.bench.gemm import gemm_gflops, level12_gbps
from sitp.kernels.cpu import blas


# --8<-- [start:peak]
@njit(cache=True, parallel=True)
def micro_kernel_peak(n_threads, kc, reps):
    """Each thread runs the micro-kernel ``reps`` times on its own L1-resident panels.

    Returns the number of FLOPs done: n_threads * reps * 2 * MR * NR * kc.
    """
    for t in prange(n_threads):
        Ap = np.full((kc, blas.MR), 1e-3, np.float32)
        Bp = np.full((kc, blas.NR), 1e-3, np.float32)
        C = np.zeros((blas.MR, blas.NR), np.float32)
        for _ in range(reps):
            blas.micro_kernel(Ap, Bp, C, 0, 0)
    return n_threads * reps * 2.0 * blas.MR * blas.NR * kc


# --8<-- [end:peak]


@njit(cache=True, parallel=True)
def triad_repeat(a, b, c, alpha, n_threads, reps):
    """``reps`` STREAM triads on arrays split into n_threads contiguous chunks.

    Each thread sweeps its own chunk ``reps`` times (one parallel region in all),
    so small, cache-resident arrays are not swamped by the cost of starting threads.
    """
    n = a.shape[0]
    chunk = (n + n_threads - 1) // n_threads
    for t in prange(n_threads):
        lo, hi = t * chunk, min(n, (t + 1) * chunk)
        a_t, b_t, c_t = a[lo:hi], b[lo:hi], c[lo:hi]  # views: the loop below starts at 0
        for _ in range(reps):
            for i in range(a_t.shape[0]):
                a_t[i] = b_t[i] + alpha * c_t[i]


def best_time(fn, n_threads, tries=7):
    """Shortest of ``tries`` timings of fn (each as median_time measures one call).

    A roof is the most the machine can do, so the roofs use the best run, where
    the kernels' points use medians.
    """
    fn()
    return min(median_time(fn, 1, warmup=0, n_threads=n_threads) for _ in range(tries))


def measure_peak(n_threads, kc=256, reps=20000):
    """GFLOP/s of the micro-kernel on L1-resident panels, all n_threads busy."""
    flop = 2.0 * n_threads * reps * blas.MR * blas.NR * kc
    return flop / best_time(lambda: micro_kernel_peak(n_threads, kc, reps), n_threads) / 1e9


def measure_bandwidth(n_threads, n, reps):
    """GB/s of the triad on float32 arrays of n elements.

    Counts 16 bytes per element: reading b[i] and c[i], writing a[i], and reading
    a[i]'s cache line before writing it (write-allocate: a store to a line that is
    not in L1 first fetches the line). STREAM itself counts 12 and so reports 3/4
    of the traffic the memory system really carries.
    """
    rng = np.random.default_rng(0)
    a, b, c = (rng.random(n, dtype=np.float32) for _ in range(3))
    sec = best_time(lambda: triad_repeat(a, b, c, np.float32(0.5), n_threads, reps), n_threads)
    return 16.0 * n * reps / sec / 1e9


def add_arguments(p):
    p.add_argument("--out", default="roofline.png", help="where to save the figure (PNG)")
    p.add_argument(
        "--gemm-json",
        help="results of `python -m sitp.bench gemm --json` to plot as points; "
        "without it the ladder is measured here at N=512 and 1024 (slower)",
    )
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
    p.add_argument("--json", help="also write the measured roofs to this JSON file")


def intensity_gemm(n):
    """FLOPs per byte of C += A @ B, N x N float32: 2N^3 FLOPs over reading A, B, C and writing C."""
    return 2.0 * n**3 / (4.0 * 4 * n * n)


def measure_roofs(n_threads, max_wait=None) -> dict:
    """The three roofs on ``n_threads``: ``peak_<t>`` (GFLOP/s), ``dram_<t>`` and ``l2_<t>``
    (GB/s), ``t`` the threads there are. With ``max_wait`` (seconds), each measurement
    first waits for the machine to be idle (:func:`sitp.bench.wait_for_idle`)."""

    def idle():
        if max_wait is not None:
            wait_for_idle(max_wait)

    roofs = {}
    with threads(n_threads) as t:
        if max_wait is not None:
            pause()
        idle()
        roofs[f"peak_{t}"] = measure_peak(t)
        idle()
        roofs[f"dram_{t}"] = measure_bandwidth(t, 1 << 24, 2)  # 3 x 64 MiB: far beyond L3
        idle()
        roofs[f"l2_{t}"] = measure_bandwidth(t, 8192 * t, 4000)  # 3 x 32 KiB per thread
    return roofs


def main(args):
    bench.CLOCK = args.clock
    roofs = {}
    for t in (1, 2):
        roofs.update(measure_roofs(t, args.max_wait))
    print(f"Machine: {machine_info()}, {args.clock} clock\n")
    print("| ceiling | 1 thread | 2 threads |\n|---|---|---|")
    print(
        f"| peak (micro-kernel in L1), GFLOP/s | {roofs['peak_1']:.1f} | {roofs.get('peak_2', 0):.1f} |"
    )
    print(f"| triad bandwidth, DRAM, GB/s | {roofs['dram_1']:.1f} | {roofs.get('dram_2', 0):.1f} |")
    print(f"| triad bandwidth, L2, GB/s | {roofs['l2_1']:.1f} | {roofs.get('l2_2', 0):.1f} |")

    if args.gemm_json:
        with open(args.gemm_json) as f:
            data = json.load(f)
        gemm = {(r["kernel"], r["threads"], r["n"]): r["gflops"] for r in data["gemm"]}
        l12 = {(r["kernel"], r["threads"]): r["gbps"] for r in data["level12"]}
    else:
        gemm = gemm_gflops([512, 1024], [1, 2], repeats=3, rounds=1, max_wait=args.max_wait)
        l12 = level12_gbps([1, 2], repeats=3, max_wait=args.max_wait)
    points = []  # (label, intensity, GFLOP/s)
    for name in [
        "naive (ijk)",
        "loop order (ikj)",
        "cache blocking",
        "packed + micro-kernel",
        "packed, parallel",
        "numpy",
    ]:  # (gemm_small is not a rung)
        n = max(n for (k, _, n) in gemm if k == name)
        best = max(v for (k, _, n2), v in gemm.items() if k == name and n2 == n)
        points.append((f"{name}, N={n}", intensity_gemm(n), best))
    for name, ai in [("saxpy", 2 / 12), ("sgemv", 2 / 4)]:
        best = max(v for (k, _), v in l12.items() if k == name)
        points.append((name, ai, best * ai))
    draw(roofs, points, args.out)
    print(f"\nsaved {args.out}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "machine": machine_info(),
                    "roofs": roofs,
                    "points": [{"label": p[0], "intensity": p[1], "gflops": p[2]} for p in points],
                },
                f,
                indent=1,
            )
    return 0


def draw(roofs, points, out):
    """Log-log roofline: the 2-thread roofs, the 1-thread peak, and one dot per kernel."""
    import matplotlib  # late: matplotlib is slow to import

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # late: matplotlib is slow to import

    peak, dram, l2 = roofs["peak_2"], roofs["dram_2"], roofs["l2_2"]
    x = np.logspace(-1.2, 3, 400)
    fig, ax = plt.subplots(figsize=(10, 4.8), dpi=130)
    ax.loglog(
        x,
        np.minimum(peak, dram * x),
        color="black",
        lw=2,
        label=f"roofline, 2 threads: DRAM {dram:.0f} GB/s, peak {peak:.0f} GFLOP/s",
    )
    ax.loglog(
        x,
        np.minimum(peak, l2 * x),
        color="gray",
        ls="--",
        lw=1,
        label=f"L2-resident data: {l2:.0f} GB/s",
    )
    ax.axhline(
        roofs["peak_1"],
        color="gray",
        ls=":",
        lw=1,
        label=f"peak, 1 thread: {roofs['peak_1']:.0f} GFLOP/s",
    )
    markers = "osD^vPXh*"
    for (label, ai, g), m in zip(points, markers):
        ax.loglog([ai], [g], m, ms=8, label=f"{label}: {g:.1f} GFLOP/s")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title("Roofline of this machine, float32, with the GEMM ladder")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
