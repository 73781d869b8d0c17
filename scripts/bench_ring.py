"""The teaching ring all-reduce against MPI's own Allreduce (chapter 7.1).

    python scripts/bench_ring.py [--nproc 2 4] [--max-mb 64] [--max-mb-oversubscribed 16]

Run alone, it starts itself with ``python -m sitp.distributed.run`` once per entry of
``--nproc`` (2 and 4 ranks by default). Each rank times three all-reduces of float32
messages from 1 KB up: mpi4py's ``Allreduce`` on a numpy array (MPI picks its algorithm
by size), sitp's ``all_reduce`` on a tensor (the same MPI call, through sitp), and
``sitp.distributed.ring.ring_all_reduce`` (``2 (p - 1)`` steps of ``isend``/``recv`` and
sitp's ``add_``, in Python). Timing is ``bench_collectives.timed``'s: the median of 7
samples, each the mean over back-to-back calls lasting about 20 ms, the slowest rank's
time, the three taking turns.

Bus bandwidth is nccl-tests' for all-reduce: ``2 (p - 1) / p * m / t`` for m bytes on p
ranks. A run with more ranks than cores is labelled oversubscribed: MPI's ranks wait by
spinning, so ranks that share a core take turns and the figures say little about a
machine with a core per rank.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

try:
    import mpi4py
    from mpi4py import MPI
except ImportError:
    sys.exit("bench_ring needs mpi4py and an MPI: pip install 'sitp[distributed]'")

import numpy as np
from bench_collectives import timed

import sitp
import sitp.distributed as dist
from sitp.bench import cpu_model
from sitp.distributed.ring import ring_all_reduce

ROOT = Path(__file__).resolve().parent.parent


def ranks_main(max_mb: float) -> None:
    dist.init_process_group()
    comm = MPI.COMM_WORLD
    p = dist.get_world_size()
    x = sitp.ones(1001)  # first, check the ring: the sum of p ones, at a size p does not divide
    ring_all_reduce(x)
    assert x.tolist() == [float(p)] * 1001
    rows = []
    for nbytes in (1024 * 4**k for k in range(20)):
        if nbytes > max_mb * 2**20:
            break
        a = np.zeros(nbytes // 4, np.float32)  # zeros: repeated sums stay finite
        t, r = sitp.zeros(nbytes // 4), sitp.zeros(nbytes // 4)
        mpi, ours, ring = timed(
            comm,
            [
                lambda: comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM),
                lambda: dist.all_reduce(t),
                lambda: ring_all_reduce(r),
            ],
        )
        rows.append((nbytes, mpi, ours, ring))
        if dist.get_rank() == 0:
            print(f"  measured {nbytes / 1024:g} KB", file=sys.stderr, flush=True)
    if dist.get_rank() == 0:
        report(rows, p)
    dist.destroy_process_group()


def report(rows, p: int) -> None:
    cores = os.cpu_count()
    where = (
        f"{p} ranks on {cores} cores (OVERSUBSCRIBED: ranks share cores)"
        if p > cores
        else f"{p} ranks on {cores} cores"
    )
    print(f"\nall-reduce of float32 messages, {where}, one machine; CPU: {cpu_model()}")
    print(f"MPI: {MPI.Get_library_version().splitlines()[0].strip()}; mpi4py {mpi4py.__version__}")
    print("time: median of 7 samples, slowest rank; busbw: bus bandwidth, GB/s")
    print(
        f"{'size':>8} | {'MPI Allreduce us':>16} {'sitp all_reduce us':>18} {'ring us':>10}"
        f" | {'busbw MPI':>9} {'ring':>6} | {'ring/MPI time':>13}"
    )
    factor = 2 * (p - 1) / p
    for m, mpi, ours, ring in rows:
        size = f"{m / 1024:g} KB" if m < 2**20 else f"{m / 2**20:g} MB"
        print(
            f"{size:>8} | {mpi * 1e6:16.1f} {ours * 1e6:18.1f} {ring * 1e6:10.1f}"
            f" | {factor * m / mpi / 1e9:9.2f} {factor * m / ring / 1e9:6.2f} | {ring / mpi:13.2f}"
        )
    print("ring/MPI time: how many times longer the teaching ring takes than MPI's Allreduce")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--max-mb", type=float, default=64)
    ap.add_argument(
        "--max-mb-oversubscribed",
        type=float,
        default=16,
        help="the largest message when there are more ranks than cores",
    )
    a = ap.parse_args()
    if "RANK" in os.environ:  # started by the launcher: one of the ranks
        ranks_main(a.max_mb)
        return
    status = 0
    for n in a.nproc:
        max_mb = a.max_mb if n <= os.cpu_count() else min(a.max_mb, a.max_mb_oversubscribed)
        cmd = [sys.executable, "-m", "sitp.distributed.run", "--nproc-per-node", str(n)]
        cmd += [__file__, "--max-mb", str(max_mb)]
        status = status or subprocess.run(cmd, cwd=ROOT).returncode
    sys.exit(status)


if __name__ == "__main__":
    main()
