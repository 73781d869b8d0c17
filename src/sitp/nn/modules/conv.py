"""``Conv1d`` (a 1-D convolution, dilated and padded, for WaveNet-style models) and
``Conv2d`` (the image convolution of a LeNet)."""

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


_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _pair(v):
    return tuple(int(a) for a in v) if isinstance(v, (tuple, list)) else (int(v), int(v))


class Conv2d(Module):
    """out[n, o] = b[o] + sum_c w[o, c] (*) x[n, c]: a 2-D cross-correlation (``F.conv2d``).

    ``weight`` is (out_channels, in_channels / groups, KH, KW), drawn as torch draws it
    (Kaiming-uniform with a = sqrt(5), so bound 1/sqrt(fan_in), the bias likewise).
    ``padding_mode`` other than ``'zeros'`` pads with ``F.pad`` first, then convolves
    without padding.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(
                f"padding_mode must be one of {list(_PADDING_MODES)}, but got "
                f"padding_mode='{padding_mode}'"
            )
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(
                    f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}"
                )
            if padding == "same" and _pair(stride) != (1, 1):
                raise ValueError("padding='same' is not supported for strided convolutions")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride = _pair(kernel_size), _pair(stride)
        self.padding = padding if isinstance(padding, str) else _pair(padding)
        self.dilation, self.padding_mode = _pair(dilation), padding_mode
        KH, KW = self.kernel_size
        self.weight = Parameter(
            empty(out_channels, in_channels // groups, KH, KW, dtype=dtype, device=device)
        )
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight[0].numel()
            bound = 1 / math.sqrt(fan_in) if fan_in else 0.0
            init.uniform_(self.bias, -bound, bound)

    def _pads(self):
        """(left, right, top, bottom), as F.pad takes them."""
        if self.padding == "valid":
            return (0, 0, 0, 0)
        if self.padding == "same":
            (KH, KW), (dh, dw) = self.kernel_size, self.dilation
            th, tw = dh * (KH - 1), dw * (KW - 1)
            return (tw // 2, tw - tw // 2, th // 2, th - th // 2)
        ph, pw = self.padding
        return (pw, pw, ph, ph)

    def forward(self, x):
        if self.padding_mode != "zeros":
            x = F.pad(x, self._pads(), mode=self.padding_mode)
            padding = 0
        else:
            padding = self.padding
        return F.conv2d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0, 0):
            s += (
                f", padding={self.padding!r}"
                if isinstance(self.padding, str)
                else f", padding={self.padding}"
            )
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s
