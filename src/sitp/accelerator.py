"""``sitp.accelerator``: torch's device-agnostic questions, answered for sitp's one
accelerator, a CUDA GPU.

Code written for any device asks ``torch.accelerator.is_available()`` and
``current_accelerator()`` before it picks where to run. sitp's answers follow
:func:`sitp.cuda.is_available`: an accelerator is there when a real GPU answers. Under
numba's CUDA simulator (no GPU; the kernels run, slowly, on the CPU) there is none, so
such code runs on the CPU, as torch's CPU build does; a program can still ask for
``"cuda"`` tensors there by name.

>>> import sitp
>>> sitp.accelerator.is_available() == sitp.cuda.is_available()
True
"""

from __future__ import annotations

from sitp import cuda
from sitp._tensor.tensor import device as Device

_NONE = "Cannot access accelerator device when none is available."


def is_available() -> bool:
    """Whether an accelerator (a CUDA GPU, not the simulator) can be used."""
    return cuda.is_available()


def current_accelerator(check_available: bool = False) -> Device | None:
    """The accelerator's device type, ``device(type='cuda')``, or None without one.

    Args:
        check_available: accepted as in torch; sitp names an accelerator only when
            it is available, so the answer is the same either way.
    """
    return Device("cuda") if is_available() else None


def device_count() -> int:
    """How many accelerators there are: sitp uses one GPU, so 1 or 0."""
    return 1 if is_available() else 0


def _require() -> None:
    if not is_available():
        raise RuntimeError(_NONE)


def current_device_index() -> int:
    """The index of the accelerator in use: 0 (sitp uses one GPU)."""
    _require()
    return 0


def _index(device) -> int:
    if device is None:
        return 0
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    d = Device(device)
    if d.type != "cuda":
        raise ValueError(f"{d.type} doesn't match the current accelerator cuda.")
    return d.index or 0


def set_device_index(device, /) -> None:
    """Choose the accelerator to use: sitp has one, index 0."""
    _require()
    if _index(device) != 0:
        raise RuntimeError(f"Invalid device index {_index(device)}: sitp uses one GPU, index 0")


def synchronize(device=None, /) -> None:
    """Wait until every kernel launched so far on the accelerator has finished."""
    _require()
    set_device_index(device)
    cuda.synchronize()


__all__ = [
    "current_accelerator",
    "current_device_index",
    "device_count",
    "is_available",
    "set_device_index",
    "synchronize",
]
