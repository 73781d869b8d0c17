"""``sitp.autograd``: reverse-mode automatic differentiation (chapter 4.1), as ``torch.autograd``.

The layer above the tensor (``sitp/_tensor``). Its modules, bottom to top:

* ``grad_mode``    ``no_grad``, ``enable_grad``, ``set_grad_enabled``, ``inference_mode``
* ``function``     ``Function``, its ``Context`` and the graph's ``Node``
* ``derivatives``  the table of local derivatives: one ``Function`` per op
* ``engine``       ``backward`` and ``grad``: the topological walk
* ``forward_ad``   forward mode with dual numbers (``jvp``)
* ``gradcheck``    gradients against central differences
"""

from sitp.autograd import forward_ad
from sitp.autograd.engine import backward, grad, toposort
from sitp.autograd.function import Context, Function, Node
from sitp.autograd.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from sitp.autograd.gradcheck import gradcheck

__all__ = [
    "Context",
    "Function",
    "Node",
    "backward",
    "enable_grad",
    "forward_ad",
    "grad",
    "gradcheck",
    "inference_mode",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "no_grad",
    "set_grad_enabled",
    "toposort",
]
