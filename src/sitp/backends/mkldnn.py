"""``sitp.backends.mkldnn``: torch's switch for oneDNN (MKL-DNN), a library sitp does not
use: its CPU kernels are its own numba code (chapters 2 and 4). ``is_available()`` is
False; ``enabled`` is kept, checked, and has no effect."""

from __future__ import annotations

import sys
import types

from sitp.backends._flags import BoolFlag


def is_available() -> bool:
    """Whether oneDNN can be used: never, sitp does not call it."""
    return False


class _MkldnnModule(types.ModuleType):
    enabled = BoolFlag(True, "set_enabled_mkldnn")


sys.modules[__name__].__class__ = _MkldnnModule

__all__ = ["is_available"]
