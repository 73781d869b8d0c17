"""The machine code of the hot CPU kernels, for several x86 targets, on any x86 host.

Each target is compiled in a subprocess (tests/codegen_probe.py) whose environment
names it through ``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES``, with a private, empty
numba cache. LLVM generates code for a target without running it, so an AVX2 host
checks the AVX-512 code and the other way round. Asserted:

* the GEMM micro-kernel and ``gemm_small``'s tile: vector FMAs on registers of the
  target's width (``ymm`` for AVX2, ``zmm`` for AVX-512; multiplies and adds on
  ``xmm`` for baseline x86-64, which has no FMA), 2 * MR of them per step, no
  gathers or scatters, nothing spilled to the stack;
* the loop-vectorised kernels of the training step (elementwise fast lane, GELU,
  layer norm, cross-entropy, attention): packed vector arithmetic on registers of
  at least 256 bits on AVX2 and AVX-512 targets (LLVM picks 256 bits on Intel's
  AVX-512 CPUs, whose 512-bit units lower the clock, and 512 on AMD's), no stack
  spills, and no gathers except where a kernel reads through run-time strides.
"""

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import llvmlite.binding as llvm
import pytest

from sitp._target import host_features_without_avx512

PROBE = Path(__file__).with_name("codegen_probe.py")
X86 = platform.machine().lower() in ("x86_64", "amd64")

pytestmark = pytest.mark.skipif(
    not X86, reason="x86 code generation (other hosts cannot target x86 here)"
)


# name: (NUMBA_CPU_NAME, NUMBA_CPU_FEATURES or a callable, expected vector bits, whole step)
# "+cx16" is a no-op delta: a non-empty feature string makes LLVM start from the
# named CPU's own features instead of the host's. Compiling the training step's
# kernels takes about 13 s a target, so it runs for one AVX2 and two AVX-512 CPUs
# (Intel's, which prefers 256-bit loops, and AMD's, which does not); the GEMM
# kernels (2 s) for all five.
TARGETS = {
    "haswell": ("haswell", "+cx16", 256, True),
    "skylake-avx512": ("skylake-avx512", "+cx16", 512, True),
    "znver4": ("znver4", "+cx16", 512, True),
    "x86-64": ("x86-64", "+cx16", 128, False),
    "host-avx2": (None, host_features_without_avx512, 256, False),
}

# Kernels whose reads may be gathers: they load through strides known only at run
# time (attention reads q, k, v in any layout; gemm_small with a B whose layout numba
# cannot see handles its edge strips with strided loads).
STRIDED = (
    "attention_forward_kernel",
    "attention_backward_kernel",
    "gemm_small[array(float32, 2d, C),array(float32, 2d, A)",
)
VECTORISED = (
    "zip_fast_kernel",
    "gelu_kernel",
    "gelu_backward_kernel",
    "layer_norm_kernel",
    "layer_norm_backward_kernel",
    "rms_norm_kernel",
    "rms_norm_backward_kernel",
    "sum_of_squares",
    "cross_entropy_kernel",
    "attention_forward_kernel",
    "attention_backward_kernel",
)


@pytest.fixture(scope="module", params=list(TARGETS))
def report(request, tmp_path_factory):
    return _probe(request, tmp_path_factory)


def _probe(request, tmp_path_factory):
    cpu, features, bits, whole_step = TARGETS[request.param]
    if callable(features):
        features = features()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NUMBA_CPU_", "_SITP_", "SITP_USER"))
    }
    env["NUMBA_CACHE_DIR"] = str(tmp_path_factory.mktemp(f"numba-{request.param}"))
    env["NUMBA_CPU_FEATURES"] = features
    if cpu:
        env["NUMBA_CPU_NAME"] = cpu
    env.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    proc = subprocess.run(
        [sys.executable, str(PROBE)] + ["--all"] * whole_step,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    data["expected_bits"] = bits
    data["target"] = request.param
    data["cache_root"] = env["NUMBA_CACHE_DIR"]
    data["whole_step"] = whole_step
    return data


def _pick(report, name):
    found = {k: v for k, v in report["kernels"].items() if k.startswith(name)}
    assert found, f"{name} was not compiled for {report['target']}"
    return found


def test_target_seen_by_sitp(report):
    """sitp sizes its tile from the target numba compiles for, and keys its cache on it."""
    bits = report["expected_bits"]
    assert report["vector_bits"] == bits
    mr, nr = report["tile"]
    assert nr == 2 * bits // 32 and mr == (14 if bits == 512 else 6)
    cache = Path(report["cache"])  # the user's cache directory, keyed below it
    assert cache.parent == Path(report["cache_root"]) and cache.name.startswith("sitp-"), cache


def test_micro_kernel_is_a_register_tile(report):
    bits, (mr, _) = report["expected_bits"], report["tile"]
    for sig, code in _pick(report, "micro_kernel").items():
        assert code["gather_scatter"] == 0, sig
        assert code["spills"] == 0, sig
        if bits == 128:  # SSE2: no FMA; 2 * MR mulps/mulpd and as many adds
            assert sum(code["fma"].values()) == 0 and code["sse_packed"] >= 4 * mr, (sig, code)
        else:
            assert code["fma"][str(bits)] >= 2 * mr, (sig, code)
            wider = [w for w in ("256", "512") if int(w) > bits]
            assert all(code["fma"][w] == 0 for w in wider), (sig, code)


def test_gemm_small_tile(report):
    bits, (mr, _) = report["expected_bits"], report["tile"]
    for sig, code in _pick(report, "gemm_small").items():
        assert code["spills"] == 0, sig
        if not sig.startswith(STRIDED):
            assert code["gather_scatter"] == 0, sig
        if bits > 128:
            assert code["fma"][str(bits)] >= 2 * mr, (sig, code)


@pytest.mark.parametrize("report", [t for t, v in TARGETS.items() if v[3]], indirect=True)
@pytest.mark.parametrize("name", VECTORISED)
def test_training_kernels_vectorised(report, name):
    assert report["whole_step"]
    bits = report["expected_bits"]
    for sig, code in _pick(report, name).items():
        assert code["spills"] == 0, sig
        if not sig.startswith(STRIDED):
            assert code["gather_scatter"] == 0, (sig, code)
        if bits == 128:
            assert code["sse_packed"] > 0, (sig, code)
        else:
            wide = code["packed"]["256"] + code["packed"]["512"]
            assert wide > 0, (sig, code)
            if bits == 256:
                assert code["packed"]["512"] == 0, (sig, code)


# The numeric tests whose results could depend on the code generated: exp/erf/GELU
# special values and error bounds, and GEMM tiles at every edge.
NUMERIC_TESTS = [
    "tests/test_vecmath.py",
    "tests/test_blas.py",
    "-k",
    "exp_f32_edges or erf_f32_edges or dense_grid or special_values or float32_close "
    "or micro_kernel or test_matmul or test_bmm",
]


def test_numerics_with_the_other_targets_code(tmp_path):
    """The numeric tests again, run with code compiled for another ISA this host can run.

    On an AVX-512 host, that is its AVX2 code (the same CPU with the AVX-512 features
    off); on an AVX2 host, the x86-64 baseline's (SSE2). The results must follow
    torch's semantics whatever the vector width.
    """
    if llvm.get_host_cpu_features().get("avx512f"):
        env_target = {
            "NUMBA_CPU_NAME": llvm.get_host_cpu_name(),
            "NUMBA_CPU_FEATURES": host_features_without_avx512(),
        }
    else:
        env_target = {"NUMBA_CPU_NAME": "x86-64", "NUMBA_CPU_FEATURES": "+cx16"}
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NUMBA_CPU_", "_SITP_", "SITP_USER"))
    }
    env.update(env_target, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    env.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            *NUMERIC_TESTS,
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout
