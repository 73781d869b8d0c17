"""Activation layers: thin modules over ``sitp.nn.functional``."""

from __future__ import annotations

from sitp.nn import functional as F
from sitp.nn.modules.module import Module


class Tanh(Module):
    def forward(self, x):
        return x.tanh()


class ReLU(Module):
    """``inplace=True`` writes the result into the input and returns it, as torch does
    (recorded by autograd when the input is not a leaf)."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        return x.copy_(x.relu()) if self.inplace else x.relu()

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Sigmoid(Module):
    def forward(self, x):
        return x.sigmoid()


class GELU(Module):
    """GELU, exact (``approximate='none'``) or with the tanh approximation."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate='{self.approximate}'"


class SiLU(Module):
    """``inplace=True`` writes the result into the input and returns it, as torch does."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        if not self.inplace:
            return F.silu(x)
        # silu's backward reads its input: give it a copy, since x is overwritten
        return x.copy_(F.silu(x.clone() if x.requires_grad else x))

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Softmax(Module):
    def __init__(self, dim: int = None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return x.softmax(self.dim if self.dim is not None else -1)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, x):
        return x.log_softmax(self.dim if self.dim is not None else -1)
