"""sitp keeps freed tensor memory in the process (sitp/kernels/cpu/memory.py): glibc's mallopt.

Without it, each large output array is a fresh mmap of zeroed pages and every 4 KiB
of it page-faults when first written (about 4,900 faults per GPT training step).
"""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)"
)

# Allocate, write and free arrays of a training step's sizes twice; count the page
# faults of the second pass, when freed memory could be reused.
PROBE = """
import resource, sys
import numpy as np
import sitp, sitp.kernels.cpu.memory as m
sizes = [(1 << 18) * (1 + i % 4) for i in range(40)]     # 0.25 to 1 MiB
def one_pass():
    arrays = []
    for n in sizes:
        a = np.empty(n, np.uint8)
        a[:] = 1
        arrays.append(a)
        if len(arrays) > 8:
            arrays.pop(0)
one_pass()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
one_pass()
print(m.applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _run(env_value):
    env = {"SITP_MALLOC_TUNING": env_value, "PATH": "/usr/bin:/bin", "NUMBA_ENABLE_CUDASIM": "1"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr
    applied, faults = out.stdout.split()
    return applied == "True", int(faults)


def test_import_keeps_freed_memory_for_reuse():
    applied, faults = _run("1")
    assert applied
    # 40 arrays of 64 to 256 pages each: thousands of faults if every one were fresh
    assert faults < 200, f"{faults} page faults in a pass that should reuse freed memory"


def test_the_setting_can_be_turned_off():
    applied, _ = _run("0")
    assert not applied
