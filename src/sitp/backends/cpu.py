"""``sitp.backends.cpu``: the vector instruction set of sitp's CPU kernels."""

from __future__ import annotations

from sitp import _target


def get_cpu_capability() -> str:
    """The vector instruction set sitp's kernels are compiled for, in torch's names.

    numba compiles every kernel for the CPU of :mod:`sitp._target` (the host, or the one
    ``NUMBA_CPU_NAME`` names): ``"AVX512"`` for 512-bit AVX-512, ``"AVX2"`` for 256-bit
    AVX2, and ``"DEFAULT"`` for the rest (SSE, AVX without AVX2, NEON on arm64), as
    torch calls its own kernels' levels.
    """
    return {"AVX-512": "AVX512", "AVX2": "AVX2"}.get(_target.isa_name(), "DEFAULT")


__all__ = ["get_cpu_capability"]
