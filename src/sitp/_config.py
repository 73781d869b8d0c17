"""``sitp.show_config()``: what sitp compiles for, and where it keeps the result.

In the spirit of ``numpy.show_config()`` and ``torch.__config__.show()``: the CPU and
its vector instruction set, the GEMM register tile chosen for it, the numba settings
that change code generation, the threads, and numba's cache directory. Paste its
output into a bug report, and quote it beside any speed figure.
"""

from __future__ import annotations

import os
import platform

import numba
import numpy as np

from sitp import _env, _target
from sitp.bench import cpu_model
from sitp.kernels.cpu.blas import packed

#: The package's version (``sitp.__version__``; the same as pyproject.toml's).
__version__ = "0.1.0"


def config() -> dict:
    """The configuration as nested dicts (what :func:`show_config` prints)."""
    bits = _target.vector_bits()
    x86 = _target.arch() in ("x86_64", "amd64", "i386", "i686", "x86")
    cpu = {
        "model": cpu_model(),
        "arch": _target.arch(),
        "llvm_cpu_name": _target.cpu_name(),
        "isa": _target.isa_name(),
        "vector_bits": bits,
        "vector_registers": _target.vector_registers(),
        "vector_register": ({512: "zmm", 256: "ymm"}.get(bits, "xmm") if x86 else None),
        "gemm_tile": {"MR": packed.MR, "NR_float32": packed.NR, "KC": packed.KC, "MC": packed.MC},
    }
    settings = _target.codegen_settings()
    return {
        "versions": {
            "sitp": __version__,
            "python": platform.python_version(),
            "numpy": np.__version__,
            "numba": numba.__version__,
            "llvmlite": settings["llvmlite"],
        },
        "cpu": cpu,
        "numba": {
            "NUMBA_CPU_NAME": os.environ.get("NUMBA_CPU_NAME"),
            "NUMBA_CPU_FEATURES": os.environ.get("NUMBA_CPU_FEATURES"),
            "SLP_VECTORIZE": numba.config.SLP_VECTORIZE,
            "LOOP_VECTORIZE": numba.config.LOOP_VECTORIZE,
            "OPT": int(numba.config.OPT),
            "threads": numba.get_num_threads(),
            "threading_layer": numba.config.THREADING_LAYER,
            "cuda_simulator": os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1",
        },
        "cache": {"dir": _env.CACHE_DIR, "key": _target.cache_key()},
    }


def set_num_threads(n: int) -> None:
    """``torch.set_num_threads``: how many threads sitp's parallel kernels use.

    numba starts its pool of ``NUMBA_NUM_THREADS`` threads (the number of CPUs, unless
    the variable says otherwise) with the first parallel kernel; a larger ``n`` is cut
    to that size, since the pool cannot grow after it starts.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise RuntimeError(f"set_num_threads expects a positive integer, got {n!r}")
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


def get_num_threads() -> int:
    """``torch.get_num_threads``: the threads sitp's parallel kernels use now."""
    return numba.get_num_threads()


def show_config(mode: str = "stdout"):
    """Print (``mode="stdout"``) or return (``mode="dicts"``) sitp's build configuration.

    Example:
        >>> import sitp
        >>> cfg = sitp.show_config(mode="dicts")
        >>> sorted(cfg)
        ['cache', 'cpu', 'numba', 'versions']
        >>> cfg["cpu"]["vector_bits"] in (128, 256, 512)
        True
    """
    if mode not in ("stdout", "dicts"):
        raise ValueError(f"show_config: mode must be 'stdout' or 'dicts', not {mode!r}")
    cfg = config()
    if mode == "dicts":
        return cfg
    for section, items in cfg.items():
        print(f"{section}:")
        for key, value in items.items():
            if isinstance(value, dict):
                value = ", ".join(f"{k}={v}" for k, v in value.items())
            elif key == "NUMBA_CPU_FEATURES" and value and len(value) > 60:
                flags = value.split(",")
                off512 = "-avx512f" in flags
                value = f"{len(flags)} features set{' (avx512f off)' if off512 else ''}: {value[:40]}..."
            print(f"  {key}: {value}")
    return None
