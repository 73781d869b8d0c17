"""``sitp.backends.cudnn``: torch's cuDNN switches, for a library sitp does not use.

sitp's GPU kernels are its own (chapter 4), so ``is_available()`` is False and
``version()`` None, as on a torch built without cuDNN. The flags a script sets
(``enabled``, ``benchmark``, ``deterministic``, ``allow_tf32``) are kept and checked as
torch checks them, and have no effect: sitp's kernels pick no algorithm by timing
(``benchmark``), and they give the same result on every run of the same launch
(``deterministic`` holds already).
"""

from __future__ import annotations

import contextlib
import sys
import types

from sitp.backends._flags import BoolFlag


def is_available() -> bool:
    """Whether cuDNN can be used: never, sitp does not call it."""
    return False


def version():
    """cuDNN's version: None, as without cuDNN."""
    return None


class _CudnnModule(types.ModuleType):
    enabled = BoolFlag(True, "set_enabled_cudnn")
    benchmark = BoolFlag(False, "set_benchmark_cudnn")
    deterministic = BoolFlag(False, "set_deterministic_cudnn")
    allow_tf32 = BoolFlag(True, "set_allow_tf32_cudnn")


@contextlib.contextmanager
def flags(
    enabled=False,
    benchmark=False,
    benchmark_limit=10,
    deterministic=False,
    allow_tf32=True,
    fp32_precision="none",
    depthwise_kernel="auto",
):
    """Set the four flags for a block and put the old values back after it, as torch's.

    ``benchmark_limit``, ``fp32_precision`` and ``depthwise_kernel`` tune cuDNN's
    algorithm search in torch; sitp has none, and accepts them for the signature.
    """
    module = sys.modules[__name__]
    names = ("enabled", "benchmark", "deterministic", "allow_tf32")
    old = [getattr(module, n) for n in names]
    for n, v in zip(names, (enabled, benchmark, deterministic, allow_tf32)):
        setattr(module, n, v)
    try:
        yield
    finally:
        for n, v in zip(names, old):
            setattr(module, n, v)


sys.modules[__name__].__class__ = _CudnnModule

__all__ = ["flags", "is_available", "version"]
