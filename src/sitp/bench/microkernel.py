"""``python -m sitp.bench microkernel``: the micro-kernel, and what each numba detail is worth.

Times, on L1-resident panels on one core, the shipped micro-kernel
(``sitp.kernels.cpu.blas.packed.micro_kernel``, whose tile is written with explicit vector
types by ``tile_fma``) next to the plain-loop version (``micro_kernel_loops``),
which leaves the vectors to LLVM, compiled four ways:

* as compiled here: stack-allocated tile, SLP vectorizer on, loop vectorizer on;
* heap tile: ``acc = np.zeros((MR, NR))`` instead of the stack tile;
* SLP vectorizer off: ``numba.config.SLP_VECTORIZE = 0`` while compiling;
* loop vectorizer off: ``numba.config.LOOP_VECTORIZE = 0`` while compiling.

Each variant is compiled afresh from packed.py's source (no cache), and its machine
code is summarised: vector FMAs by register width, gathers and scatters, stack
spills. Timing uses the thread's CPU time (``time.thread_time``), best of several
calls: time that another program takes from the core is not counted.
"""

import inspect
import re
import statistics
import time
import types

import numba
import numpy as np
from numba import njit

from sitp import _target
from sitp.kernels.cpu.blas import packed

# name: (function, text edits to packed.py's source, SLP, loop vectorizer)
VARIANTS = {
    "explicit vectors (shipped)": ("micro_kernel", [], 1, 1),
    "plain loops": ("micro_kernel_loops", [], 1, 1),
    "plain loops, heap tile": (
        "micro_kernel_loops",
        [
            (
                "acc = carray(_register_tile(Ap_i.dtype), (MR, NR))\n    for i in range(MR):\n        for j in range(NR):\n            acc[i, j] = 0",  # noqa: E501
                "acc = np.zeros((MR, NR), Ap_i.dtype)",
            )
        ],
        1,
        1,
    ),
    "plain loops, SLP vectorizer off": ("micro_kernel_loops", [], 0, 1),
    "plain loops, loop vectorizer off": ("micro_kernel_loops", [], 1, 0),
}


def machine_code_summary(asm: str) -> str:
    """FMAs by register width, gathers/scatters and spills in a function's assembly."""
    fma = {w: len(re.findall(rf"\bvfmadd\w*\s+[^\n]*%{w}mm", asm)) for w in "xyz"}
    mul = len(re.findall(r"\bv?mulp[sd]\s", asm))
    gathers = len(re.findall(r"\bv(gather|scatter)\w*", asm))
    spills = len(re.findall(r"-byte (Spill|Reload)", asm))
    parts = [f"{n} {w}mm FMA" for w, n in fma.items() if n]
    if mul and not any(fma.values()):
        parts.append(f"{mul} vector mul")
    parts.append(f"{gathers} gather/scatter")
    parts.append(f"{spills} spill/reload")
    return ", ".join(parts)


def compile_variant(func, edits, slp, loop_vectorize):
    """One micro-kernel compiled from packed.py's source after text edits, with the flags given."""
    src = inspect.getsource(packed).replace("cache=True", "cache=False")
    for old, new in edits:
        assert old in src, old
        src = src.replace(old, new)
    module = types.ModuleType("micro_kernel_variant")
    module.__dict__["__package__"] = packed.__package__
    exec(compile(src, "micro_kernel_variant", "exec"), module.__dict__)
    kernel = getattr(module, func)

    @njit
    def repeat(Ap, Bp, C, n):
        for _ in range(n):
            kernel(Ap, Bp, C, 0, 0)

    saved = numba.config.SLP_VECTORIZE, numba.config.LOOP_VECTORIZE
    numba.config.SLP_VECTORIZE, numba.config.LOOP_VECTORIZE = slp, loop_vectorize
    try:
        kc = packed.KC
        Ap = np.full((kc, packed.MR), 1e-3, np.float32)
        Bp = np.full((kc, packed.NR), 1e-3, np.float32)
        C = np.zeros((packed.MR, packed.NR), np.float32)
        kernel(Ap, Bp, C, 0, 0)  # compiles now, with these settings
        repeat(Ap, Bp, C, 1)
        asm = kernel.inspect_asm(kernel.signatures[0])
    finally:
        numba.config.SLP_VECTORIZE, numba.config.LOOP_VECTORIZE = saved
    np.testing.assert_allclose(C, 2 * kc * 1e-6, rtol=1e-3)  # two calls so far
    n = 500
    return (
        (lambda: repeat(Ap, Bp, C, n)),
        2.0 * packed.MR * packed.NR * kc * n,
        machine_code_summary(asm),
    )


def add_arguments(p):
    p.add_argument(
        "--rounds", type=int, default=5, help="rounds of best-of-5 timings; the median is reported"
    )


def main(args):
    runs = {name: compile_variant(*v) for name, v in VARIANTS.items()}
    samples = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, (fn, flop, _) in runs.items():
            best = float("inf")
            for _ in range(5):
                t0 = time.thread_time()
                fn()
                best = min(best, time.thread_time() - t0)
            samples[name].append(flop / best / 1e9)
    print(
        f"CPU: {_target.cpu_name()} ({_target.isa_name()}, {_target.vector_bits()}-bit vectors), "
        f"numba {numba.__version__}"
    )
    print(
        f"micro-kernel {packed.MR}x{packed.NR}, KC={packed.KC}, float32, one core, panels in L1\n"
    )
    print("| variant | GFLOP/s | machine code |\n|---|---|---|")
    for name, v in samples.items():
        print(f"| {name} | {statistics.median(v):.1f} | {runs[name][2]} |")
    return 0
