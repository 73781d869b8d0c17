"""``sitp.backends.opt_einsum``: the switch of torch's einsum for the opt_einsum
package, which orders a contraction of many operands. sitp has no einsum, so the
package is never used: ``is_available()`` is False, ``enabled`` is False and
``strategy`` None, as torch reports when the package is missing."""

from __future__ import annotations

import sys
import types

from sitp.backends._flags import BoolFlag


def is_available() -> bool:
    """Whether einsum can use opt_einsum: not in sitp, which has no einsum."""
    return False


def get_opt_einsum():
    """The opt_einsum package einsum would use: None."""
    return None


class _OptEinsumModule(types.ModuleType):
    enabled = BoolFlag(False, "set_enabled")
    strategy = None


sys.modules[__name__].__class__ = _OptEinsumModule

__all__ = ["get_opt_einsum", "is_available"]
