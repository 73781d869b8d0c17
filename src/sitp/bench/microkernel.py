"""``python -m sitp.bench microkernel``: what each numba detail of the micro-kernel is worth.

Compiles variants of ``sitp.blas.packed.micro_kernel`` from its own source, each
with one detail undone, and times them on L1-resident panels on one core:

* as shipped: stack-allocated tile, SLP vectorizer on, fast-math without reassoc;
* heap tile: ``acc = np.zeros((MR, NR))`` instead of the stack tile;
* fastmath=True: all fast-math flags, ``reassoc`` included;
* SLP vectorizer off: ``numba.config.SLP_VECTORIZE = 0`` while compiling.

Timing uses the thread's CPU time (``time.thread_time``), best of several calls:
the kernel runs on the calling thread, so time that another program takes from
the core is not counted.
"""
import inspect
import statistics
import time
import types

import numba
import numpy as np
from numba import njit

from ..blas import packed

VARIANTS = {
    "as shipped": ([], 1),
    "heap tile (np.zeros)": ([("acc = carray(_register_tile(Ap_i.dtype), (MR, NR))",
                               "acc = np.zeros((MR, NR), Ap_i.dtype)")], 1),
    "fastmath=True": ([("@njit(cache=False, fastmath=FASTMATH)\ndef micro_kernel",
                        "@njit(cache=False, fastmath=True)\ndef micro_kernel")], 1),
    "SLP vectorizer off": ([], 0),
}


def compile_variant(edits, slp):
    """The micro-kernel compiled from packed.py's source after text edits, with SLP on/off."""
    src = inspect.getsource(packed).replace("cache=True", "cache=False")
    for old, new in edits:
        assert old in src, old
        src = src.replace(old, new)
    module = types.ModuleType("micro_kernel_variant")
    exec(compile(src, "micro_kernel_variant", "exec"), module.__dict__)
    kernel = module.micro_kernel

    @njit
    def repeat(Ap, Bp, C, n):
        for _ in range(n):
            kernel(Ap, Bp, C, 0, 0)

    old = numba.config.SLP_VECTORIZE
    numba.config.SLP_VECTORIZE = slp
    try:
        kc = packed.KC
        Ap = np.full((kc, packed.MR), 1e-3, np.float32)
        Bp = np.full((kc, packed.NR), 1e-3, np.float32)
        C = np.zeros((packed.MR, packed.NR), np.float32)
        repeat(Ap, Bp, C, 1)  # compiles now, with this SLP setting
    finally:
        numba.config.SLP_VECTORIZE = old
    n = 1000
    return (lambda: repeat(Ap, Bp, C, n)), 2.0 * packed.MR * packed.NR * kc * n


def add_arguments(p):
    p.add_argument("--rounds", type=int, default=5, help="rounds of best-of-5 timings; the median is reported")


def main(args):
    runs = {name: compile_variant(*v) for name, v in VARIANTS.items()}
    samples = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, (fn, flop) in runs.items():
            best = float("inf")
            for _ in range(5):
                t0 = time.thread_time()
                fn()
                best = min(best, time.thread_time() - t0)
            samples[name].append(flop / best / 1e9)
    print(f"micro-kernel {packed.MR}x{packed.NR}, KC={packed.KC}, float32, one core, panels in L1\n")
    print("| variant | GFLOP/s |\n|---|---|")
    for name, v in samples.items():
        print(f"| {name} | {statistics.median(v):.1f} |")
    return 0
