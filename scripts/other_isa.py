"""Print the environment that compiles sitp's kernels for another vector width.

``make test-other-isa`` runs the page-output comparison (tests/test_copy_run.py) once
more under these settings, so that no recorded output holds only on the vector width
of the machine that recorded it:

- on an AVX-512 host, the host's own CPU with every AVX-512 feature off: numba then
  emits the AVX2 code an AVX2 machine of the same family would run, torch takes its
  AVX2 kernels (``ATEN_CPU_CAPABILITY=avx2``) and numpy leaves out its AVX-512 ones
  (``NPY_DISABLE_CPU_FEATURES``);
- on an AVX2 host, x86-64's baseline (SSE2) for numba, torch's ``default`` kernels and
  numpy's baseline;
- elsewhere (arm64) there is no other target to emulate, and it says so on stderr.

Each line is ``NAME=value``, for ``env $(python scripts/other_isa.py) command``.
numba's cache is keyed on the CPU name and features (``sitp._target.cache_key``), so
this code never mixes with the host's.
"""

from __future__ import annotations

import sys

import llvmlite.binding as llvm


def numpy_dispatch_without(prefixes: tuple[str, ...]) -> str:
    """numpy's run-time dispatch targets that start with one of ``prefixes``, for
    ``NPY_DISABLE_CPU_FEATURES`` (names differ between numpy versions: ask this one)."""
    from numpy._core._multiarray_umath import __cpu_dispatch__

    return ",".join(name for name in __cpu_dispatch__ if name.startswith(prefixes))


def other_target() -> dict[str, str]:
    from sitp._target import arch, host_features_without_avx512

    if arch() not in ("x86_64", "amd64"):
        return {}
    features = llvm.get_host_cpu_features()
    if features.get("avx512f"):
        return {
            "NUMBA_CPU_NAME": llvm.get_host_cpu_name(),
            "NUMBA_CPU_FEATURES": host_features_without_avx512(),
            "ATEN_CPU_CAPABILITY": "avx2",
            "NPY_DISABLE_CPU_FEATURES": numpy_dispatch_without(("AVX512", "X86_V4")),
        }
    if features.get("avx2"):
        return {
            "NUMBA_CPU_NAME": "x86-64",
            "NUMBA_CPU_FEATURES": "+sse2",  # not empty: numba would read the host's
            "ATEN_CPU_CAPABILITY": "default",
            "NPY_DISABLE_CPU_FEATURES": numpy_dispatch_without(
                ("AVX512", "X86_V4", "X86_V3", "AVX2", "FMA3", "F16C", "AVX")
            ),
        }
    return {}


def named_target(cpu: str) -> dict[str, str]:
    """The code LLVM generates for the CPU named ``cpu`` (its own features, not the
    host's: ``+cx16`` is a no-op delta), which this host must be able to run: Intel's
    ``skylake-avx512`` on an AMD AVX-512 host, say. torch and numpy keep the host's
    kernels but for the vector width."""
    from sitp._target import _vector_bits

    bits = _vector_bits("x86_64", cpu, "+cx16")
    host = llvm.get_host_cpu_features()
    if (bits == 512 and not host.get("avx512f")) or (bits >= 256 and not host.get("avx2")):
        raise SystemExit(f"other_isa: this host cannot run {cpu}'s {bits}-bit code")
    target = {"NUMBA_CPU_NAME": cpu, "NUMBA_CPU_FEATURES": "+cx16"}
    if bits == 256:
        target["ATEN_CPU_CAPABILITY"] = "avx2"
        target["NPY_DISABLE_CPU_FEATURES"] = numpy_dispatch_without(("AVX512", "X86_V4"))
    return target


if __name__ == "__main__":
    # `python scripts/other_isa.py skylake-avx512`: that CPU's code instead of the other width
    target = named_target(sys.argv[1]) if len(sys.argv) > 1 else other_target()
    if not target:
        print("other_isa: no other x86 target to emulate on this machine", file=sys.stderr)
        sys.exit(1)
    print("\n".join(f"{k}={v}" for k, v in target.items()))
