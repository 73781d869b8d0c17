"""``Conv1d``: a 1-D convolution (dilated, padded) for WaveNet-style models."""

from __future__ import annotations

import math

from sitp._tensor.creation import empty
from sitp.nn import functional as F
from sitp.nn import init
from sitp.nn.modules.module import Module
from sitp.nn.parameter import Parameter


class Conv1d(Module):
    """out[n, o, t] = b[o] + sum_{c, k} w[o, c, k] * x[n, c, t*stride + k*dilation - padding]."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int = 0,
        dilation: int = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        super().__init__()
        if groups != 1:
            raise NotImplementedError(f"Conv1d: groups={groups}; sitp has groups=1 only")
        if padding_mode != "zeros":
            raise NotImplementedError(
                f"Conv1d: padding_mode={padding_mode!r}; sitp pads with zeros only"
            )
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding, self.dilation = (
            kernel_size,
            stride,
            padding,
            dilation,
        )
        self.weight = Parameter(
            empty(out_channels, in_channels, kernel_size, dtype=dtype, device=device)
        )
        self.bias = Parameter(empty(out_channels, dtype=dtype, device=device)) if bias else None
        if not bias:
            self.register_parameter("bias", None)
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if bias:
            bound = 1 / math.sqrt(in_channels * kernel_size)
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size=({self.kernel_size},), "
            f"stride=({self.stride},), padding=({self.padding},), dilation=({self.dilation},)"
        )
