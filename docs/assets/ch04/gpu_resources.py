"""Registers, shared memory and spills of every sitp.kernels.cuda kernel, as ptxas reports them.

Sections 4.4 and 4.6 quote this table. It needs no GPU, only NVIDIA's compilers:
numba-cuda turns each kernel into PTX with NVVM, and ``ptxas -v`` assembles it for one
architecture and prints the resources. Run from the repository root, with a CUDA
toolkit's ptxas and NVRTC (which numba-cuda loads) on the library path, for example:

    NUMBA_ENABLE_CUDASIM=0 python docs/assets/ch04/gpu_resources.py 8.0 /usr/local/cuda/bin/ptxas

NVRTC alone also installs from PyPI (``pip install nvidia-cuda-nvrtc-cu12``, then add
its ``nvidia/cuda_nvrtc/lib`` to LD_LIBRARY_PATH). Default tilings, head width D = 64.
The book's tables: numba-cuda 0.30.4, NVVM and ptxas from CUDA 13.0. With a CUDA 12
ptxas, which reads PTX up to version 8.8, the header of NVVM 13's PTX (9.0) is lowered;
the kernels use no instruction that needs the newer version, and the tables come out
the same.
"""

import re
import subprocess
import sys
import tempfile

from numba import cuda, types

from sitp.kernels.cuda import attention as A
from sitp.kernels.cuda import gemm as G

F2, F3, F4 = (types.Array(types.float32, n, "C") for n in (2, 3, 4))
F, BOOL = types.float32, types.boolean


def kernels():
    """(name, kernel, signature) of every kernel, default tilings."""
    for k in G.KERNELS:
        yield f"gemm `{k}`", G.LADDER[k](), (F2, F2, F2)
    yield "attention `scores`", A.scores_kernel(), (F4, F4, F4, F, BOOL)
    yield "attention `softmax_rows`", A.softmax_rows, (F4, F4)
    yield "attention `weighted_sum`", A.weighted_sum_kernel(), (F4, F4, F4)
    yield "attention `fused_softmax`", A.fused_softmax_kernel(), (F4, F4, F4, F, BOOL)
    yield "flash forward", A.flash_forward_kernel(64), (F4, F4, F4, F4, F3, F, BOOL)
    yield (
        "flash backward dK, dV",
        A.flash_backward_dkdv_kernel(64),
        (F4,) * 4 + (F3, F3, F4, F4, F, BOOL),
    )
    yield "flash backward dQ", A.flash_backward_dq_kernel(64), (F4,) * 4 + (F3, F3, F4, F, BOOL)


def resources(ptx, arch, ptxas):
    """ptxas -v's registers, shared bytes, stack frame and spill bytes for one PTX text."""
    version = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout
    major, minor = re.search(r"release (\d+)\.(\d+)", version).groups()
    ptx_max = {"12": f"8.{min(int(minor), 8)}"}.get(major)
    if ptx_max:
        ptx = re.sub(r"\.version 9\.\d+", f".version {ptx_max}", ptx)
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        out = subprocess.run(
            [ptxas, "-v", f"-arch={arch}", f.name, "-o", "/dev/null"],
            capture_output=True,
            text=True,
            check=True,
        ).stderr

    def num(pattern):
        m = re.search(pattern, out)
        return int(m.group(1)) if m else 0

    return (
        num(r"Used (\d+) registers"),
        num(r"(\d+) bytes smem"),
        num(r"(\d+) bytes stack frame"),
        num(r"(\d+) bytes spill stores"),
        num(r"(\d+) bytes spill loads"),
    )


def main(cc="8.0", ptxas="ptxas"):
    major, minor = (int(x) for x in cc.split("."))
    arch = f"sm_{major}{minor}"
    print(
        f"| kernel ({arch}) | registers per thread | shared memory, bytes | stack frame, bytes "
        "| spill stores / loads, bytes |"
    )
    print("|---|---|---|---|---|")
    for name, kern, sig in kernels():
        bounds = getattr(kern, "targetoptions", {}).get("launch_bounds")
        ptx, _ = cuda.compile_ptx(kern.py_func, sig, cc=(major, minor), launch_bounds=bounds)
        regs, smem, stack, st, ld = resources(ptx, arch, ptxas)
        print(f"| {name} | {regs} | {smem:,} | {stack} | {st} / {ld} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
