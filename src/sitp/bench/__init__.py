"""sitp.bench: measurements behind the numbers in the book.

The timings of chapters 2.3 (the GEMM ladder, the micro-kernel, the roofline) and 4.3 to
4.6 (the GPU kernels), collected on the page "The book's numbers". An application
(layer 6 of docs/layout.md).

Run ``python -m sitp.bench --help`` for the subcommands. This module holds the
shared tools: a timer that reports medians, control of numba's and OpenBLAS's
thread counts, and a description of the machine to print next to every table.

Timing rules (the machine may be shared and noisy):

* every number is the median of several repeats, after one warm-up call;
* numpy/OpenBLAS and sitp are timed in separate phases with a pause in between,
  because OpenBLAS's threads keep spinning for a while after a call and would
  steal the cores from a numba kernel timed right after it (and vice versa).
"""

import contextlib
import ctypes
import datetime
import glob
import os
import platform
import statistics
import subprocess
import time

import numba
import numpy as np

from sitp import _target
from sitp.kernels.cpu.blas import packed, saxpy

# Between phases: lets OpenBLAS / OpenMP worker threads fall asleep. The tests' smoke runs
# of the benchmark scripts set SITP_BENCH_PAUSE_S=0: they check the scripts and the records
# they write, not the figures, and their pauses were most of their wall time.
PAUSE_S = float(os.environ.get("SITP_BENCH_PAUSE_S", "0.3"))


CLOCK = "wall"  # or "cpu"; set by the subcommands' --clock option


def median_time(fn, repeats=5, warmup=1, max_s=None, n_threads=None):
    """Median time of ``fn()`` in seconds over ``repeats`` calls.

    Args:
        fn: callable with no arguments.
        repeats: number of timed calls.
        warmup: untimed calls first (compilation, caches).
        max_s: stop early once this many seconds have been spent timing
            (at least one timed call is always made).
        n_threads: the number of threads ``fn`` runs on. With the wall clock,
            only *uncontended* calls are kept: those during which this process
            got at least 90% of n_threads cores (process CPU time >= 0.9 *
            n_threads * wall time), since a call slowed by another program says
            nothing about the kernel. Up to 3 * repeats calls are made to
            collect ``repeats`` clean ones; if fewer are clean, the fastest half
            of all calls is used.

    With ``CLOCK == "cpu"`` (for a machine that other jobs keep busy), the time
    of a call is instead the CPU time it used divided by n_threads: the calling
    thread's CPU time for one thread (numba and OpenBLAS then run on the calling
    thread), the whole process's for more. Time during which another program
    held the core is not counted; time spent spinning at a barrier is. The
    kernel's CPU clocks advance in scheduler ticks, so each sample is a run of
    back-to-back calls lasting at least 0.1 s, divided by the number of calls.
    """
    for _ in range(warmup):
        fn()
    clean, every = [], []
    start = time.perf_counter()
    cpu_clock = CLOCK == "cpu" and n_threads is not None
    cpu_fn = time.thread_time if n_threads == 1 else time.process_time
    attempts = repeats if (n_threads is None or cpu_clock) else 3 * repeats
    for _ in range(attempts):
        c0, t0 = cpu_fn(), time.perf_counter()
        fn()
        calls = 1
        while cpu_clock and time.perf_counter() - t0 < 0.1:
            fn()
            calls += 1
        wall, cpu = time.perf_counter() - t0, cpu_fn() - c0
        if cpu_clock:
            clean.append(cpu / n_threads / calls)
        else:
            every.append(wall)
            if n_threads is None or cpu >= 0.9 * n_threads * wall:
                clean.append(wall)
        if len(clean) >= repeats or (max_s is not None and time.perf_counter() - start > max_s):
            break
    if not cpu_clock and n_threads is not None and len(clean) < (repeats + 1) // 2:
        clean = sorted(every)[: max(1, len(every) // 2)]
    return statistics.median(clean)


def pause():
    time.sleep(PAUSE_S)


def idle_fraction(interval=0.2):
    """Fraction of the machine's CPU time that was idle over the next ``interval`` s (Linux)."""

    def snapshot():
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields[:8])  # idle + iowait, total

    try:
        idle0, total0 = snapshot()
        time.sleep(interval)
        idle1, total1 = snapshot()
    except (OSError, ValueError, IndexError):
        return 1.0
    return (idle1 - idle0) / max(1, total1 - total0)


def wait_for_idle(max_wait_s=30.0, threshold=0.9):
    """Wait (at most max_wait_s) until other programs leave the CPUs at least 90% idle.

    On a shared machine another user's job can take a core for minutes; a
    measurement taken meanwhile says nothing about the kernel. Returns whether
    the machine was idle when it returned.
    """
    start = time.perf_counter()
    while True:
        if idle_fraction() >= threshold:
            return True
        if time.perf_counter() - start > max_wait_s:
            return False
        time.sleep(0.5)


# ---------------------------------------------------------------- threads
def _openblas_lib():
    """ctypes handle and symbol prefix of the OpenBLAS that numpy uses, or None."""
    libdir = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for path in glob.glob(os.path.join(libdir, "*openblas*")):
        lib = ctypes.CDLL(path)
        for prefix in ("scipy_openblas_", "openblas_"):
            for suffix in ("64_", "_64_", ""):
                if hasattr(lib, f"{prefix}set_num_threads{suffix}"):
                    return lib, prefix, suffix
    return None


def openblas_info():
    """(config string, core name) of numpy's OpenBLAS, or ('unknown', 'unknown')."""
    found = _openblas_lib()
    if found is None:
        return "unknown", "unknown"
    lib, prefix, suffix = found
    out = []
    for name in ("get_config", "get_corename"):
        fn = getattr(lib, f"{prefix}{name}{suffix}", None)
        if fn is None:
            out.append("unknown")
            continue
        fn.restype = ctypes.c_char_p
        out.append(fn().decode())
    return tuple(out)


@contextlib.contextmanager
def threads(n):
    """Run the body with n threads in numba and in numpy's BLAS, then restore."""
    n = min(n, numba.config.NUMBA_NUM_THREADS)
    old_numba = numba.get_num_threads()
    found = _openblas_lib()
    if found is not None:
        lib, prefix, suffix = found
        get = getattr(lib, f"{prefix}get_num_threads{suffix}")
        setn = getattr(lib, f"{prefix}set_num_threads{suffix}")
        setn.argtypes = [ctypes.c_int]
        old_blas = get()
    numba.set_num_threads(n)
    if found is not None:
        setn(n)
    try:
        yield n
    finally:
        numba.set_num_threads(old_numba)
        if found is not None:
            setn(old_blas)


# ---------------------------------------------------------------- machine
def cpu_model():
    """CPU model name from lscpu (or /proc/cpuinfo, or platform)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=5).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def simd_flags():
    """The widest x86 vector extensions the CPU reports (e.g. 'avx2 fma')."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return "unknown"
    wanted = ["avx512f", "avx2", "fma"]
    return " ".join(w for w in wanted if w in flags) or "none of avx2/avx512"


def machine_info():
    """A one-paragraph description of the machine and software, for tables."""
    config, core = openblas_info()

    saxpy(np.float32(1), np.zeros(8, np.float32), np.zeros(8, np.float32))  # start the thread pool

    return (
        f"{cpu_model()}, {os.cpu_count()} cores ({simd_flags()}), "
        f"sitp compiled for {_target.cpu_name()} ({_target.isa_name()}, "
        f"GEMM tile {packed.MR}x{packed.NR}), "
        f"numba {numba.__version__} with {numba.get_num_threads()} threads ({numba.threading_layer()}), "
        f"numpy {np.__version__} with OpenBLAS kernel '{core}', "
        f"{datetime.date.today().isoformat()}"
    )


def train_step(model, optimizer, batches):
    """A training step of a GPT-style ``model`` (``model(X, Y)`` returns the logits and
    the loss) on the next of ``batches`` (pairs of tensors, cycled): forward, zero the
    gradients, backward, ``optimizer.step()``. The same function times sitp's and torch's
    step in the benchmarks (``scripts/compare_torch.py``, ``scripts/thread_profile.py``)."""
    at = [0]

    def step():
        X, Y = batches[at[0] % len(batches)]
        at[0] += 1
        _, loss = model(X, Y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step
