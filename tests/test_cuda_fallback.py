"""Without a GPU driver, ``import sitp`` switches numba's CUDA simulator on by itself.

Each case runs in a fresh interpreter: numba reads NUMBA_ENABLE_CUDASIM once, when
``numba.cuda`` is first imported, so the choice cannot be tested in this process (whose
conftest has already set it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

# Stands in for a machine without an NVIDIA driver: the driver's libraries do not load.
NO_DRIVER = """
import ctypes
_real = ctypes.CDLL
def _cdll(name, *args, **kwargs):
    base = str(name).rsplit("/", 1)[-1]
    if base.startswith(("libcuda.so", "libnvidia-ml.so", "nvcuda.dll", "nvml.dll")):
        raise OSError(f"{name}: cannot open shared object file")
    return _real(name, *args, **kwargs)
ctypes.CDLL = _cdll
"""

REPORT = """
import json, os, sys, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    {before}
    import sitp
    import sitp.cuda
    from numba import cuda
    import numba.cuda
    x = sitp.ones(3, device="cuda") * 2
    values = x.cpu().tolist()
    from numba import cuda as again
print(json.dumps({{
    "env": os.environ.get("NUMBA_ENABLE_CUDASIM"),
    "simulated": sitp.cuda.is_simulated(),
    "fallback": sitp.cuda.simulator_fallback,
    "values": values,
    "warnings": [str(w.message) for w in caught if "simulator" in str(w.message)],
}}))
"""


def run(code: str, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    environ.update(env)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("before", ["pass", "import numba"], ids=["sitp-first", "numba-first"])
def test_no_driver_falls_back_to_the_simulator_and_says_so_once(before):
    out = run(NO_DRIVER + textwrap.dedent(REPORT).format(before=before))
    assert out["env"] == "1"
    assert out["simulated"] is True
    assert "no NVIDIA driver" in out["fallback"]
    assert out["values"] == [2.0, 2.0, 2.0]  # a device op ran, in the simulator
    assert len(out["warnings"]) == 1, out["warnings"]
    assert "NUMBA_ENABLE_CUDASIM=1" in out["warnings"][0]


@pytest.mark.parametrize("setting", ["0", "1"])
def test_an_explicit_setting_wins(setting):
    code = NO_DRIVER + textwrap.dedent("""
        import json, os, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import sitp.cuda
            from numba import config
        print(json.dumps({"env": os.environ["NUMBA_ENABLE_CUDASIM"],
                          "sim": sitp.cuda.is_simulated(),
                          "fallback": sitp.cuda.simulator_fallback,
                          "warnings": [str(w.message) for w in caught]}))
    """)
    out = run(code, NUMBA_ENABLE_CUDASIM=setting)
    assert out == {"env": setting, "sim": setting == "1", "fallback": None, "warnings": []}


def test_the_probe_agrees_with_nvidia_smi():
    """On this machine, sitp finds a GPU exactly when nvidia-smi lists one."""
    smi = shutil.which("nvidia-smi")
    listed = bool(smi) and subprocess.run([smi, "-L"], capture_output=True).returncode == 0
    out = run("import json, sitp.cuda as c; print(json.dumps(c._gpu_answers()))")
    assert out[0] is listed, out
