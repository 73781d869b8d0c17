"""``Linear`` (y = x W^T + b), ``Identity``, ``Flatten``."""

from __future__ import annotations

import math

from sitp._tensor.creation import empty
from sitp.nn import functional as F
from sitp.nn import init
from sitp.nn.modules.module import Module
from sitp.nn.parameter import Parameter


# --8<-- [start:linear]
class Linear(Module):
    """y = x @ W.T + b, with W of shape (out_features, in_features).

    Initialised as PyTorch does: W and b uniform in ±1/sqrt(in_features).
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, dtype=None, device=None
    ):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty(out_features, in_features, dtype=dtype, device=device))
        self.bias = Parameter(empty(out_features, dtype=dtype, device=device)) if bias else None
        if not bias:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))  # = U(±1/sqrt(fan_in))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    # --8<-- [end:linear]

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x):
        return x.unflatten(self.dim, self.unflattened_size)


class NonDynamicallyQuantizableLinear(Linear):
    """A ``Linear`` under another name: torch uses this class for the output projection of
    ``MultiheadAttention`` (its quantization tools treat it apart); here it only keeps the
    name, so that models print and load as in torch."""
