"""``Dropout`` (zero entries with probability p while training) and ``Dropout2d``
(zero whole channels)."""

from __future__ import annotations

from sitp.nn import functional as F
from sitp.nn.modules.module import Module


class Dropout(Module):
    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace=False"


class Dropout2d(Module):
    """Zero each channel of (N, C, H, W) with probability p while training, and scale
    the kept ones by 1/(1-p) (``F.dropout2d``): neighbouring pixels are correlated, so
    dropping single ones regularises little."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x):
        return F.dropout2d(x, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"
