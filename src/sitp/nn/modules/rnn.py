"""Recurrent cells: ``RNNCell`` and ``GRUCell`` (chapter 3.4)."""

from __future__ import annotations

import math

from sitp._tensor.creation import empty, zeros
from sitp.nn import functional as F
from sitp.nn import init
from sitp.nn._functions import gru as _gru
from sitp.nn.modules.module import Module
from sitp.nn.parameter import Parameter


class _CellBase(Module):
    def __init__(
        self, input_size: int, hidden_size: int, bias: bool, gates: int, dtype=None, device=None
    ):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self.weight_ih = Parameter(
            empty(gates * hidden_size, input_size, dtype=dtype, device=device)
        )
        self.weight_hh = Parameter(
            empty(gates * hidden_size, hidden_size, dtype=dtype, device=device)
        )
        if bias:
            self.bias_ih = Parameter(empty(gates * hidden_size, dtype=dtype, device=device))
            self.bias_hh = Parameter(empty(gates * hidden_size, dtype=dtype, device=device))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        bound = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def _check(self, x, h):
        if x.shape[-1] != self.input_size:
            raise ValueError(
                f"input has {x.shape[-1]} features, expected input_size={self.input_size} (shape {tuple(x.shape)})"
            )
        if h is None:
            h = zeros(x.shape[:-1] + (self.hidden_size,), dtype=x.dtype, device=x.device)
        elif tuple(h.shape) != tuple(x.shape[:-1]) + (self.hidden_size,):
            raise ValueError(
                f"hidden state has shape {tuple(h.shape)}, expected {tuple(x.shape[:-1]) + (self.hidden_size,)}"
            )
        return h

    def _affine(self, x, h):
        """x W_ih^T + b_ih and h W_hh^T + b_hh: a linear layer each (one node apiece)."""
        return F.linear(x, self.weight_ih, self.bias_ih), F.linear(h, self.weight_hh, self.bias_hh)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}"


# --8<-- [start:rnn_cell]
class RNNCell(_CellBase):
    """h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        nonlinearity: str = "tanh",
        dtype=None,
        device=None,
    ):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(
                f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'."
            )
        super().__init__(input_size, hidden_size, bias, 1, dtype, device)
        self.nonlinearity = nonlinearity

    def forward(self, x, h=None):
        h = self._check(x, h)
        gi, gh = self._affine(x, h)
        pre = gi + gh
        return pre.tanh() if self.nonlinearity == "tanh" else pre.relu()


# --8<-- [end:rnn_cell]


# --8<-- [start:gru_cell]
class GRUCell(_CellBase):
    """The gated recurrent unit, in PyTorch's formulation.

    r = σ(W_ir x + b_ir + W_hr h + b_hr)         (reset gate)
    z = σ(W_iz x + b_iz + W_hz h + b_hz)         (update gate)
    n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn)) (candidate)
    h' = (1 − z) ⊙ n + z ⊙ h
    """

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, dtype=None, device=None
    ):
        super().__init__(input_size, hidden_size, bias, 3, dtype, device)

    def forward(self, x, h=None):
        h = self._check(x, h)
        gi, gh = self._affine(x, h)
        if _gru.fits(gi, gh, h):  # on the CPU: the lines below as one kernel each way
            return _gru.GRUGates.apply(gi, gh, h)
        i_r, i_z, i_n = gi.chunk(3, -1)
        h_r, h_z, h_n = gh.chunk(3, -1)
        r = (i_r + h_r).sigmoid()
        z = (i_z + h_z).sigmoid()
        n = (i_n + r * h_n).tanh()
        return (1 - z) * n + z * h


# --8<-- [end:gru_cell]
