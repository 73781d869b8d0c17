"""``sitp.cuda``: the GPU device (chapter 4.3).

Tensors move to the GPU with ``x.to("cuda")`` / ``x.cuda()`` or are made there
with ``device="cuda"``; their ops then run sitp's Numba CUDA kernels
(``sitp/kernels/cuda/ops.py``). Without a GPU, numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``) runs the same kernels on the CPU, one Python thread
per GPU thread: slowly, but correctly. There ``is_available()`` is False and
``is_simulated()`` True, and device tensors still work.

The simulator is chosen by itself: when this module is imported (``import sitp``
does it) and the user has not set ``NUMBA_ENABLE_CUDASIM``, it asks the NVIDIA
driver whether a GPU answers, before anything imports ``numba.cuda`` (which reads
the setting once). If none does, it sets ``NUMBA_ENABLE_CUDASIM=1`` and warns
once, when ``numba.cuda`` is first imported. ``NUMBA_ENABLE_CUDASIM=0`` or ``=1``
set beforehand always wins.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import os
import shutil
import subprocess
import sys
import warnings

#: Why the simulator was switched on by sitp (None when it was not: a GPU answered,
#: the user chose, or ``numba.cuda`` was imported before sitp).
simulator_fallback: str | None = None

_DRIVER_LIBS = {"win32": ("nvcuda.dll",)}.get(sys.platform, ("libcuda.so.1", "libcuda.so"))
_NVML_LIBS = {"win32": ("nvml.dll",)}.get(sys.platform, ("libnvidia-ml.so.1", "libnvidia-ml.so"))


def _load(names):
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _gpu_answers() -> tuple[bool, str]:
    """Whether an NVIDIA driver reports a GPU, and what was found if not.

    Asked without initialising CUDA in this process (a process that has called
    ``cuInit`` cannot hand the GPU to children it forks): the driver library must
    load, then NVML, or ``nvidia-smi`` where NVML cannot be loaded, must count a GPU.
    """
    if _load(_DRIVER_LIBS) is None:
        return False, "no NVIDIA driver (libcuda) is installed"
    nvml = _load(_NVML_LIBS)
    if nvml is not None:
        try:
            if nvml.nvmlInit_v2() != 0:
                return False, "the NVIDIA driver does not answer (nvmlInit failed)"
            count = ctypes.c_uint(0)
            ok = nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
            nvml.nvmlShutdown()
        except AttributeError:
            pass
        else:
            return (True, "") if ok and count.value > 0 else (False, "the driver sees no GPU")
    smi = shutil.which("nvidia-smi")
    try:
        ok = (
            bool(smi)
            and subprocess.run([smi, "-L"], capture_output=True, timeout=20).returncode == 0
        )
    except (OSError, subprocess.SubprocessError):
        ok = False
    return (True, "") if ok else (False, "nvidia-smi finds no GPU")


# --8<-- [start:simulator]
def _choose_simulator() -> None:
    """Without a GPU, turn numba's CUDA simulator on, unless the user chose."""
    global simulator_fallback
    if "NUMBA_ENABLE_CUDASIM" in os.environ or "numba.cuda" in sys.modules:
        return  # an explicit setting wins; numba.cuda imported cannot switch
    has_gpu, why = _gpu_answers()
    if has_gpu:
        return
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    if "numba" in sys.modules:  # numba read its config before sitp was imported
        sys.modules["numba"].config.ENABLE_CUDASIM = 1
    simulator_fallback = why
    sys.meta_path.insert(0, _SimulatorNotice())


# --8<-- [end:simulator]


class _SimulatorNotice(importlib.abc.MetaPathFinder):
    """Warns once, when ``numba.cuda`` is first imported, that kernels run simulated."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "numba.cuda":
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            warnings.warn(
                f"sitp: {simulator_fallback}, so CUDA kernels run in numba's CUDA simulator "
                "(NUMBA_ENABLE_CUDASIM=1): correct results, slowly. Set "
                "NUMBA_ENABLE_CUDASIM=0 before importing sitp to require a GPU.",
                UserWarning,
                stacklevel=2,
            )
        return None  # the ordinary finders import it


_choose_simulator()


def is_simulated() -> bool:
    """Whether numba's CUDA simulator stands in for a GPU."""
    from numba import config  # late: numba must first see the simulator choice made above

    return bool(config.ENABLE_CUDASIM)


def is_available() -> bool:
    """Whether a real CUDA GPU answers (False under the simulator)."""
    if is_simulated():
        return False
    try:
        from numba import cuda  # late: numba.cuda costs a second; only asked here

        return bool(cuda.is_available())
    except Exception:  # a broken driver or no numba-cuda: no GPU
        return False


def _require() -> None:
    """Raise a clear error when neither a GPU nor the simulator is there."""
    if not (is_available() or is_simulated()):
        raise RuntimeError(
            "sitp was asked for a CUDA device, but none is available: no NVIDIA GPU answers "
            "(sitp.cuda.is_available() is False) and numba's CUDA simulator is off "
            "(NUMBA_ENABLE_CUDASIM=0 was set, or numba.cuda was imported before sitp). Unset "
            "it (sitp then switches the simulator on by itself) or set it to 1, and import "
            "sitp first."
        )


def device_count() -> int:
    return 1 if (is_available() or is_simulated()) else 0


def synchronize() -> None:
    """Wait for every kernel launched so far to finish."""
    if is_available():
        from numba import cuda  # late: numba.cuda costs a second; only asked here

        cuda.synchronize()


def manual_seed(seed: int) -> None:
    """Accepted for compatibility: random tensors are drawn by ``sitp.manual_seed``'s generator."""


def manual_seed_all(seed: int) -> None:
    """Accepted for compatibility."""
