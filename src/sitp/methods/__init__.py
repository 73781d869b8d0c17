"""The Tensor's methods that compute (chapters 2.1, 2.2 and 4.1), one file per concept.

* ``views``     view, reshape, permute, expand, squeeze, split, ...: no copies
* ``indexing``  ``x[key]``, ``x[key] = v``, gather, index_select, masked_fill
* ``math``      arithmetic, comparisons, elementwise maths, reductions, matmul
* ``inplace``   ``add_``, ``copy_``, fills, ``new_zeros``: they bump the version counter
* ``convert``   ``to``, ``cpu``, ``cuda``, ``float``, ``clone``, ``contiguous``, ``backward``

They live above autograd because they record the graph (each calls a ``Function`` of
``sitp/autograd/derivatives.py``), while :class:`sitp.Tensor` itself lives below it, in
``sitp/_tensor/tensor.py``. Importing this package installs every method on the class:
``Tensor.view`` *is* ``TensorViews.view``, the same function object, so a method call
costs what it would if the method were written in the class body.
"""

from sitp._tensor.tensor import Tensor
from sitp.methods.convert import TensorConvert
from sitp.methods.indexing import TensorIndexing
from sitp.methods.inplace import TensorInplace
from sitp.methods.math import TensorMath, matmul
from sitp.methods.views import TensorViews

MIXINS = (TensorViews, TensorIndexing, TensorMath, TensorInplace, TensorConvert)
_NOT_METHODS = {"__module__", "__qualname__", "__doc__", "__slots__", "__dict__", "__weakref__"}


def _install() -> None:
    """Copy each mixin's methods, properties and aliases onto :class:`sitp.Tensor`."""
    seen: dict = {}
    for mixin in MIXINS:
        for name, value in vars(mixin).items():
            if name in _NOT_METHODS:
                continue
            if name in seen or name in vars(Tensor):
                raise RuntimeError(
                    f"Tensor.{name} is defined twice ({seen.get(name, 'Tensor')} and {mixin.__name__})"
                )
            seen[name] = mixin.__name__
            setattr(Tensor, name, value)


_install()

__all__ = ["MIXINS", "Tensor", "matmul"]
