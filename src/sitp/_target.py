"""The code-generation target: which CPU numba compiles for, and what follows from it.

numba compiles for the CPU it runs on, or for the one named by ``NUMBA_CPU_NAME`` and
``NUMBA_CPU_FEATURES``. Two things in sitp depend on that choice and are decided here,
once, before anything is compiled:

* the **vector width** (128-bit SSE or NEON, 256-bit AVX2, 512-bit AVX-512) and the
  number of vector registers, from which :mod:`sitp.kernels.cpu.blas` sizes its register tile;
* the **cache key**: numba's on-disk cache records the CPU name and features, but not
  the vectorizer flags (``NUMBA_SLP_VECTORIZE``, ``NUMBA_LOOP_VECTORIZE``), the
  optimisation level, nor constants that one module's kernels take from another (the
  tile shape). :func:`cache_key` hashes all of them, and ``sitp/_env.py`` puts numba's
  cache in a directory of that name, so a cache built for other code generation is
  never reused.

This module imports llvmlite only (not numba): ``_env`` calls it before numba starts.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm

# LLVM CPU names whose default features include AVX-512F, and those with 256-bit AVX
# (used only when NUMBA_CPU_FEATURES names a CPU without saying so itself).
_AVX512_CPUS = frozenset(
    """
    skylake-avx512 cascadelake cooperlake cannonlake icelake-client icelake-server
    tigerlake rocketlake sapphirerapids emeraldrapids graniterapids graniterapids-d
    diamondrapids znver4 znver5 x86-64-v4 knl knm
""".split()
)
_AVX_CPUS = frozenset(
    """
    sandybridge ivybridge corei7-avx core-avx-i haswell core-avx2 broadwell skylake
    alderlake raptorlake meteorlake arrowlake arrowlake-s lunarlake pantherlake
    gracemont sierraforest grandridge clearwaterforest znver1 znver2 znver3 x86-64-v3
    bdver1 bdver2 bdver3 bdver4 btver2
""".split()
)


def cpu_name() -> str:
    """The CPU numba compiles for: ``NUMBA_CPU_NAME``, else LLVM's name for this host."""
    name = os.environ.get("NUMBA_CPU_NAME") or ""
    return name if name and name != "host" else llvm.get_host_cpu_name()


def cpu_features() -> str:
    """The feature string numba passes to LLVM (``NUMBA_CPU_FEATURES``, else the host's)."""
    if os.environ.get("NUMBA_CPU_FEATURES"):
        return os.environ["NUMBA_CPU_FEATURES"]
    if (os.environ.get("NUMBA_CPU_NAME") or "").lower() == "generic":
        return ""
    try:
        return llvm.get_host_cpu_features().flatten()
    except RuntimeError:  # LLVM cannot read this host's features
        return ""


def host_features_without_avx512() -> str:
    """The host's feature string with every AVX-512 feature (and AMX, AVX10) turned off:
    with ``NUMBA_CPU_NAME`` set to the host's name, numba then compiles the host's AVX2
    code, which an AVX-512 host can run."""
    off = ("avx512", "amx", "avx10", "evex512")
    return ",".join(
        ("+" if on and not name.startswith(off) else "-") + name
        for name, on in llvm.get_host_cpu_features().items()
    )


def _feature_flags(features: str) -> dict[str, bool]:
    flags = {}
    for item in features.split(","):
        item = item.strip()
        if len(item) > 1 and item[0] in "+-":
            flags[item[1:]] = item[0] == "+"
    return flags


@lru_cache(maxsize=None)
def _vector_bits(arch: str, name: str, features: str) -> int:
    if arch not in ("x86_64", "amd64", "i386", "i686", "x86"):
        return 128  # NEON on arm64, VSX on ppc64le, the base vectors elsewhere
    flags = _feature_flags(features)
    if "avx512f" in flags:
        if flags["avx512f"]:
            return 512
    elif name in _AVX512_CPUS:
        return 512
    if flags.get("avx2") or flags.get("avx"):
        return 256
    if "avx" not in flags and "avx2" not in flags and name in _AVX_CPUS | _AVX512_CPUS:
        return 256
    return 128


def arch() -> str:
    """The machine's architecture, as ``platform.machine()`` lower-cased (x86_64, arm64...)."""
    return platform.machine().lower()


def vector_bits() -> int:
    """Width of the vector registers LLVM will use: 512, 256 or 128."""
    return _vector_bits(arch(), cpu_name(), cpu_features())


def vector_registers() -> int:
    """How many vector registers the target has: 32 with AVX-512 and on arm64, else 16."""
    if vector_bits() == 512 or arch() in ("arm64", "aarch64"):
        return 32
    return 16


def tile_shape() -> tuple[int, int]:
    """(MR, NR) of the float32 GEMM register tile for this target.

    A row of the tile is two vector registers (NR = 2 * lanes); MR rows take
    2 * MR accumulators, plus two registers for a row of B and one for a broadcast
    value of A: MR = 6 fits 16 registers (15 used), MR = 14 fits 32 (31 used).
    """
    lanes = vector_bits() // 32
    mr = 14 if vector_registers() >= 32 else 6
    return mr, 2 * lanes


def isa_name() -> str:
    """A short name for the vector instruction set in use."""
    bits = vector_bits()
    if arch() in ("x86_64", "amd64", "i386", "i686", "x86"):
        return {
            512: "AVX-512",
            256: "AVX2" if _feature_flags(cpu_features()).get("avx2", True) else "AVX",
        }.get(bits, "SSE2")
    return {"arm64": "NEON", "aarch64": "NEON"}.get(arch(), f"{bits}-bit vectors")


def _numba_version() -> str:
    try:
        return version("numba")
    except Exception:  # an unusual install: fall back to no version
        return "?"


_KERNEL_MARKERS = (b"njit", b"@intrinsic", b"cuda.jit", b"@jit", b"generated_jit", b"overload")


@lru_cache(maxsize=None)
def kernel_sources_hash() -> str:
    """A hash of every sitp source file that defines or calls compiled code.

    numba's cache checks only the file of the function it caches. A kernel that
    calls (or inlines) a kernel from another file, as attention calls
    ``gemm_small``, would keep its old machine code after that other file changed.
    Keying the cache on all of them costs a recompile after any kernel edit, and
    never runs stale code.
    """
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        # every file of the backend layer (kernels inline plain functions from files that
        # compile nothing themselves, such as kernels/scalar.py), and any file that compiles
        if path.is_relative_to(root / "kernels") or any(m in data for m in _KERNEL_MARKERS):
            h.update(str(path.relative_to(root)).encode() + b"\0" + data)
    return h.hexdigest()[:16]


def codegen_settings() -> dict[str, str]:
    """Everything that changes the machine code numba generates for sitp's kernels."""
    return {
        "python": sys.version.split()[0],
        "numba": _numba_version(),
        "llvmlite": llvmlite.__version__,
        "cpu": cpu_name(),
        "features": cpu_features(),
        "NUMBA_SLP_VECTORIZE": os.environ.get("NUMBA_SLP_VECTORIZE", "1"),
        "NUMBA_LOOP_VECTORIZE": os.environ.get("NUMBA_LOOP_VECTORIZE", "1"),
        "NUMBA_OPT": os.environ.get("NUMBA_OPT", "3"),
        "NUMBA_ENABLE_AVX": os.environ.get("NUMBA_ENABLE_AVX", "1"),
        "NUMBA_FASTMATH": os.environ.get("NUMBA_FASTMATH", ""),
        "tile": "%dx%d" % tile_shape(),
        "kernel_sources": kernel_sources_hash(),
    }


def cache_key() -> str:
    """12 hex digits that change whenever :func:`codegen_settings` does."""
    text = "\n".join(f"{k}={v}" for k, v in sorted(codegen_settings().items()))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def default_cache_root() -> Path:
    """Where numba's cache for sitp lives unless ``NUMBA_CACHE_DIR`` says otherwise."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sitp" / "numba"
