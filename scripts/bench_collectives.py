"""Collectives on MPI: sitp.distributed on tensors against mpi4py on numpy buffers (chapter 7.1).

    python scripts/bench_collectives.py [--nproc 2] [--max-mb 64]

Run alone, it starts itself on ``--nproc`` ranks with ``python -m sitp.distributed.run``,
after timing that launcher on a script that imports sitp and makes one all-reduce. Each
rank then times all_reduce, all_gather (into one tensor) and broadcast of float32 messages
from 1 KB to ``--max-mb`` MB, both ways in turn: mpi4py's ``Allreduce``, ``Allgather``,
``Bcast`` on numpy arrays, and sitp's ``all_reduce``, ``all_gather_into_tensor``,
``broadcast`` on sitp tensors. Each figure is the median of 7 samples, each sample the
mean over enough back-to-back calls to last about 20 ms, the slowest rank's time counted;
mpi4py's and sitp's samples take turns, so that a busy machine slows both alike.

Bus bandwidth, as nccl-tests defines it, makes the three comparable with the links'
speed: for a message of m bytes on n ranks, all_reduce moves 2(n-1)/n * m per rank,
all_gather (n-1)/n * m of the gathered m, broadcast m. Last, the alpha-beta model
t(m) = alpha + beta * m is fitted to each all_reduce column (least squares on the relative
error, so that small and large messages count alike): alpha is the latency, 1/beta the
bandwidth that large messages approach.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

try:
    import mpi4py
    from mpi4py import MPI
except ImportError:
    sys.exit("bench_collectives needs mpi4py and an MPI: pip install 'sitp[distributed]'")

import sitp
import sitp.distributed as dist
from sitp.bench import cpu_model

ROOT = Path(__file__).resolve().parent.parent
HELLO = """
import sitp, sitp.distributed as dist
dist.init_process_group()
x = sitp.ones(4)
dist.all_reduce(x)
assert x.tolist() == [float(dist.get_world_size())] * 4
"""


def launch_seconds(nproc: int, repeats: int = 3) -> tuple[float, float]:
    """Median seconds of the launcher running a script that imports sitp and all-reduces
    once on ``nproc`` ranks, and of the same script run by one plain ``python``."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "hello.py"
        script.write_text(HELLO)
        run = [sys.executable, "-m", "sitp.distributed.run", "--nproc-per-node", str(nproc)]
        times = {}
        for name, cmd in (("launch", [*run, str(script)]), ("alone", [sys.executable, script])):
            samples = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                subprocess.run(cmd, check=True, timeout=120, cwd=ROOT)
                samples.append(time.perf_counter() - t0)
            times[name] = statistics.median(samples)
    return times["launch"], times["alone"]


def timed(comm, calls, budget_s: float = 0.02, samples: int = 7) -> list[float]:
    """Median seconds per call of each of ``calls``, the slowest rank's (every rank returns
    the same). The calls take turns, sample by sample, so that both see the same load."""
    reps = []
    for call in calls:
        call()  # warm-up
        comm.Barrier()
        t0 = time.perf_counter()
        call()
        one = np.array([time.perf_counter() - t0])
        comm.Allreduce(MPI.IN_PLACE, one, op=MPI.MAX)
        reps.append(max(1, min(1000, int(budget_s / max(one[0], 1e-7)))))
    out = [[] for _ in calls]
    for _ in range(samples):
        for call, n, got in zip(calls, reps, out):
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(n):
                call()
            t = np.array([(time.perf_counter() - t0) / n])
            comm.Allreduce(MPI.IN_PLACE, t, op=MPI.MAX)
            got.append(t[0])
    return [statistics.median(got) for got in out]


def fit_alpha_beta(sizes, times) -> tuple[float, float]:
    """(alpha s, beta s/byte) minimising sum(((alpha + beta m) / t - 1)^2)."""
    m, t = np.asarray(sizes, float), np.asarray(times, float)
    a = np.stack([1 / t, m / t], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    return alpha, beta


def ranks_main(max_mb: float) -> None:
    dist.init_process_group()
    comm = MPI.COMM_WORLD
    r, n = dist.get_rank(), dist.get_world_size()
    sizes = [1024 * 4**k for k in range(20) if 1024 * 4**k <= max_mb * 2**20]
    rows = []
    for nbytes in sizes:
        k = nbytes // 4
        a = np.zeros(k, np.float32)  # zeros: repeated sums stay finite
        t = sitp.zeros(k)
        ga, gt = np.zeros(n * k, np.float32), sitp.zeros(n * k)
        row = {"bytes": nbytes}
        row["ar_raw"], row["ar_sitp"] = timed(
            comm, [lambda: comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM), lambda: dist.all_reduce(t)]
        )
        row["ag_raw"], row["ag_sitp"] = timed(
            comm, [lambda: comm.Allgather(a, ga), lambda: dist.all_gather_into_tensor(gt, t)]
        )
        row["bc_raw"], row["bc_sitp"] = timed(
            comm, [lambda: comm.Bcast(a, root=0), lambda: dist.broadcast(t, src=0)]
        )
        rows.append(row)
        if r == 0:
            print(f"  measured {nbytes / 1024:g} KB", file=sys.stderr, flush=True)
    if r == 0:
        report(rows, n)
    dist.destroy_process_group()


def report(rows, n: int) -> None:
    factor = {"ar": 2 * (n - 1) / n, "ag": (n - 1) / n, "bc": 1.0}
    print(f"\nfloat32 messages, {n} ranks on one machine; CPU: {cpu_model()}")
    print(f"MPI: {MPI.Get_library_version().splitlines()[0].strip()}; mpi4py {mpi4py.__version__}")
    print(
        "time: median of 7 samples (mpi4py's and sitp's in turn), slowest rank; busbw: bus bandwidth in GB/s"
    )
    head = f"{'size':>8}"
    for name in ("all_reduce", "all_gather", "broadcast"):
        head += f" | {name + ' us (mpi4py/sitp)':>27} {'busbw':>11} {'ratio':>5}"
    print(head)
    for row in rows:
        m = row["bytes"]
        size = f"{m / 1024:g} KB" if m < 2**20 else f"{m / 2**20:g} MB"
        line = f"{size:>8}"
        for op in ("ar", "ag", "bc"):
            raw, ours = row[f"{op}_raw"], row[f"{op}_sitp"]
            moved = m * (n if op == "ag" else 1) * factor[op]
            bw = f"{moved / raw / 1e9:5.2f}/{moved / ours / 1e9:5.2f}"
            line += f" | {raw * 1e6:13.1f} {ours * 1e6:13.1f} {bw:>11} {raw / ours:5.2f}"
        print(line)
    print("ratio: mpi4py time / sitp time (1.00: sitp adds nothing)")
    sizes = [row["bytes"] for row in rows]
    print("\nalpha-beta fit of all_reduce, t(m) = alpha + beta * m:")
    for who in ("raw", "sitp"):
        times = [row[f"ar_{who}"] for row in rows]
        alpha, beta = fit_alpha_beta(sizes, times)
        worst = max(abs((alpha + beta * m) / t - 1) for m, t in zip(sizes, times))
        label = "mpi4py" if who == "raw" else "sitp  "
        print(
            f"  {label}: alpha = {alpha * 1e6:6.1f} us, 1/beta = {1 / beta / 1e9:5.2f} GB/s "
            f"(algorithm bandwidth), half of it at m = alpha/beta = {alpha / beta / 1024:.0f} KB; "
            f"worst relative error of the fit {worst:.0%}"
        )
    one_mb = [row for row in rows if row["bytes"] == 4 * 2**20]
    if one_mb:
        print(
            f"all_reduce of 1M float32 (4 MB): mpi4py {one_mb[0]['ar_raw'] * 1e3:.2f} ms, "
            f"sitp {one_mb[0]['ar_sitp'] * 1e3:.2f} ms"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--max-mb", type=float, default=64)
    a = p.parse_args()
    if "RANK" in os.environ:  # started by the launcher: one of the ranks
        ranks_main(a.max_mb)
        return
    launch, alone = launch_seconds(a.nproc)
    print(
        f"launch: python -m sitp.distributed.run --nproc-per-node {a.nproc} of a script that "
        f"imports sitp and all-reduces once: {launch:.2f} s (median of 3); the same script "
        f"alone, python script.py: {alone:.2f} s",
        flush=True,
    )
    cmd = [sys.executable, "-m", "sitp.distributed.run", "--nproc-per-node", str(a.nproc)]
    cmd += [__file__, "--max-mb", str(a.max_mb)]
    sys.exit(subprocess.run(cmd, cwd=ROOT).returncode)


if __name__ == "__main__":
    main()
