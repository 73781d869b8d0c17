"""Recurrent layers (chapter 3.4): the cells ``RNNCell``, ``GRUCell`` and ``LSTMCell``, one
step each, and the layers ``RNN``, ``LSTM`` and ``GRU``, which run a cell over a whole
sequence, with torch's options (stacked layers, both directions, dropout between layers,
LSTM projections, packed sequences) and torch's parameter names, so that state dicts
load both ways."""

from __future__ import annotations

import math
import warnings

from sitp._tensor.creation import empty, zeros
from sitp.functional import cat, stack
from sitp.nn import functional as F
from sitp.nn import init
from sitp.nn._functions import gru as _gru
from sitp.nn._functions import lstm as _lstm
from sitp.nn._functions import recurrent as _recurrent
from sitp.nn.modules.module import Module
from sitp.nn.parameter import Parameter
from sitp.nn.utils.rnn import PackedSequence


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


# --8<-- [start:lstm_cell]
class LSTMCell(_CellBase):
    """One step of the long short-term memory, in torch's formulation (gates i, f, g, o):

    i, f, o = σ(x W_i^T + h U_i^T + b), ...,  g = tanh(x W_g^T + h U_g^T + b)
    c' = f ⊙ c + i ⊙ g,   h' = o ⊙ tanh(c')

    ``forward(input, (h, c))`` returns ``(h', c')``; the gates are one autograd node
    (``sitp.nn._functions.lstm``).
    """

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None
    ):
        super().__init__(input_size, hidden_size, bias, 4, dtype, device)

    def forward(self, input, hx=None):
        if input.ndim not in (1, 2):
            raise ValueError(f"LSTMCell: Expected input to be 1D or 2D, got {input.ndim}D instead")
        h, c = (None, None) if hx is None else hx
        h, c = self._check(input, h), self._check(input, c)
        gi, gh = self._affine(input, h)
        return _lstm.LSTMGates.apply(gi, gh, c)


# --8<-- [end:lstm_cell]


# ------------------------------------------------------------- the sequence layers
def _rnn_step(mode):
    """One step of a layer: (gi_t, h, c, weights) -> (h', c'), gi_t = x_t W_ih^T + b_ih."""

    def tanh_or_relu(gi, h, c, w_hh, b_hh, w_hr):
        pre = gi + F.linear(h, w_hh, b_hh)
        return (pre.tanh() if mode == "RNN_TANH" else pre.relu()), None

    def gru(gi, h, c, w_hh, b_hh, w_hr):
        gh = F.linear(h, w_hh, b_hh)
        if _gru.fits(gi, gh, h):
            return _gru.GRUGates.apply(gi, gh, h), None
        i_r, i_z, i_n = gi.chunk(3, -1)
        h_r, h_z, h_n = gh.chunk(3, -1)
        r, z = (i_r + h_r).sigmoid(), (i_z + h_z).sigmoid()
        n = (i_n + r * h_n).tanh()
        return (1 - z) * n + z * h, None

    def lstm(gi, h, c, w_hh, b_hh, w_hr):
        h, c = _lstm.LSTMGates.apply(gi, F.linear(h, w_hh, b_hh), c)
        return (h if w_hr is None else F.linear(h, w_hr)), c

    return {"LSTM": lstm, "GRU": gru}.get(mode, tanh_or_relu)


def _run_direction(mode, x_NI, batch_sizes, h0, c0, w, reverse):
    """Run one layer in one direction over packed rows ``x_NI`` (N = sum of batch_sizes).

    The input projection of every step is one GEMM; the loop does the recurrent part.
    Sequences are sorted longest first, so step t updates the first batch_sizes[t] rows
    of the state: going forward the state shrinks as sequences end (their final states
    are set aside); going backward it grows as sequences start, from their h0.
    Returns the outputs (N, H_out) in the rows' order, and the final h and c (B, H).
    On the CPU, an LSTM (without projection) or GRU layer is one node,
    ``sitp.nn._functions.recurrent.RecurrentLayer``; the loop below is the general case.
    """
    w_ih, w_hh, b_ih, b_hh, w_hr = w
    gi_NG = F.linear(x_NI, w_ih, b_ih)  # all steps at once
    T, B = len(batch_sizes), h0.shape[0]
    if w_hr is None and _recurrent.fits(mode, gi_NG, h0, c0, w_hh, b_hh):
        res = _recurrent.RecurrentLayer.apply(
            gi_NG, h0, c0, w_hh, b_hh, mode, reverse, tuple(batch_sizes)
        )
        return res if mode == "LSTM" else (*res, None)
    step = _rnn_step(mode)
    gi_steps = gi_NG.split(batch_sizes, 0) if len(batch_sizes) > 1 else (gi_NG,)
    outs, ended_h, ended_c = [None] * T, [], []
    if reverse:
        b = batch_sizes[-1]
        h = h0[:b] if b < B else h0
        c = None if c0 is None else (c0[:b] if b < B else c0)
        for t in range(T - 1, -1, -1):
            b, now = batch_sizes[t], h.shape[0]
            if b > now:  # sequences that start at step t join with their h0
                h = cat([h, h0[now:b]], 0)
                c = None if c is None else cat([c, c0[now:b]], 0)
            h, c = step(gi_steps[t], h, c, w_hh, b_hh, w_hr)
            outs[t] = h
        return cat(outs, 0), h, c
    h, c = h0, c0
    for t in range(T):
        b = batch_sizes[t]
        if b < h.shape[0]:  # sequences that ended at step t - 1 keep their state
            ended_h.append(h[b:])
            h = h[:b]
            if c is not None:
                ended_c.append(c[b:])
                c = c[:b]
        h, c = step(gi_steps[t], h, c, w_hh, b_hh, w_hr)
        outs[t] = h
    if ended_h:
        h = cat([h] + ended_h[::-1], 0)
        c = None if c is None else cat([c] + ended_c[::-1], 0)
    return cat(outs, 0) if T > 1 else outs[0], h, c


class RNNBase(Module):
    """What ``RNN``, ``LSTM`` and ``GRU`` share: torch's parameters and the layer loop.

    ``mode`` is ``'RNN_TANH'``, ``'RNN_RELU'``, ``'LSTM'`` or ``'GRU'``. Layer l in
    direction d has ``weight_ih_l{l}{suffix}`` (gates * hidden, layer input),
    ``weight_hh_l{l}{suffix}``, the biases ``bias_ih_l{l}``, ``bias_hh_l{l}`` and, for an
    LSTM with ``proj_size > 0``, ``weight_hr_l{l}``; suffix is ``'_reverse'`` for the
    backward direction. All are uniform in ±1/sqrt(hidden_size), as in torch.
    """

    _GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}

    def __init__(
        self,
        mode: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if mode not in self._GATES:
            raise ValueError(f"Unrecognized RNN mode: {mode}")
        if isinstance(dropout, bool) or not 0 <= dropout <= 1:
            raise ValueError(
                "dropout should be a number in range [0, 1] representing the probability of "
                "an element being zeroed"
            )
        if dropout > 0 and num_layers == 1:
            warnings.warn(
                "dropout option adds dropout after all but last recurrent layer, so non-zero "
                f"dropout expects num_layers greater than 1, but got dropout={dropout} and "
                f"num_layers={num_layers}",
                stacklevel=2,
            )
        for name, v in (("hidden_size", hidden_size), ("num_layers", num_layers)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"{name} should be of type int, got: {type(v).__name__}")
            if v <= 0:
                raise ValueError(f"{name} must be greater than zero")
        if proj_size < 0:
            raise ValueError(
                "proj_size should be a positive integer or zero to disable projections"
            )
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if proj_size and mode != "LSTM":
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, proj_size
        D, G = 2 if bidirectional else 1, self._GATES[mode] * hidden_size
        H_out = proj_size or hidden_size
        self._flat_weights_names = []
        for layer in range(num_layers):
            for d in range(D):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                shapes = [
                    ("weight_ih", (G, input_size if layer == 0 else H_out * D)),
                    ("weight_hh", (G, H_out)),
                ]
                if bias:
                    shapes += [("bias_ih", (G,)), ("bias_hh", (G,))]
                if proj_size:
                    shapes.append(("weight_hr", (proj_size, hidden_size)))
                for name, shape in shapes:
                    p = Parameter(empty(*shape, dtype=dtype, device=device))
                    setattr(self, name + sfx, p)
                    self._flat_weights_names.append(name + sfx)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def flatten_parameters(self) -> None:
        """Nothing to do: torch packs the weights into one buffer for cuDNN here; sitp
        keeps them as separate parameters (kept so that torch code runs unchanged)."""

    @property
    def all_weights(self):
        """The parameters of each layer and direction, as torch lists them."""
        per = len(self._flat_weights_names) // (self.num_layers * (2 if self.bidirectional else 1))
        names = self._flat_weights_names
        return [[getattr(self, n) for n in names[i : i + per]] for i in range(0, len(names), per)]

    def _weights(self, layer: int, d: int):
        sfx = f"_l{layer}" + ("_reverse" if d else "")
        get = lambda name: getattr(self, name + sfx, None)  # noqa: E731
        b = self.bias
        return (
            get("weight_ih"),
            get("weight_hh"),
            get("bias_ih") if b else None,
            get("bias_hh") if b else None,
            get("weight_hr") if self.proj_size else None,
        )

    def _name(self) -> str:
        return "RNN" if self.mode.startswith("RNN") else self.mode

    def _check_state(self, state, expected, what: str):
        if tuple(state.shape) != expected:
            raise RuntimeError(f"Expected {what} size {expected}, got {list(state.shape)}")

    def forward(self, input, hx=None):
        is_lstm = self.mode == "LSTM"
        D, H = 2 if self.bidirectional else 1, self.hidden_size
        H_out = self.proj_size or H
        packed = isinstance(input, PackedSequence)
        batched = True
        if packed:
            data, sizes_t, sorted_indices, unsorted_indices = input
            batch_sizes = sizes_t.tolist()
            B = batch_sizes[0]
        else:
            if input.ndim not in (2, 3):
                raise ValueError(
                    f"{self._name()}: Expected input to be 2D or 3D, got {input.ndim}D instead"
                )
            batched = input.ndim == 3
            x = input if batched else input.unsqueeze(1)
            if self.batch_first and batched:
                x = x.transpose(0, 1)  # (T, B, I)
            T, B = x.shape[0], x.shape[1]
            data, batch_sizes = x.reshape(T * B, x.shape[2]), [B] * T
        w_dtype = self.weight_ih_l0.dtype
        if data.dtype is not w_dtype:
            raise ValueError(
                f"RNN input dtype ({data.dtype}) does not match weight dtype ({w_dtype}). "
                f"Convert input: input.to({w_dtype}), or convert model: model.to({data.dtype})"
            )
        if data.shape[-1] != self.input_size:
            raise RuntimeError(
                f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                f"got {data.shape[-1]}"
            )
        if hx is None:
            kw = dict(dtype=data.dtype, device=data.device)
            h0 = zeros(self.num_layers * D, B, H_out, **kw)
            c0 = zeros(self.num_layers * D, B, H, **kw) if is_lstm else None
        else:
            h0, c0 = hx if is_lstm else (hx, None)
            if not packed:
                want = 3 if batched else 2
                if h0.ndim != want or (is_lstm and c0.ndim != want):
                    kind = "batched 3-D" if batched else "unbatched 2-D"
                    raise RuntimeError(
                        f"For {kind} input, hx{' and cx' if is_lstm else ''} should also be "
                        f"{want}-D but got "
                        + (
                            f"({h0.ndim}-D, {c0.ndim}-D) tensors"
                            if is_lstm
                            else f"{h0.ndim}-D tensor"
                        )
                    )
                if not batched:
                    h0 = h0.unsqueeze(1)
                    c0 = None if c0 is None else c0.unsqueeze(1)
            elif sorted_indices is not None:
                h0 = h0.index_select(1, sorted_indices)
                c0 = None if c0 is None else c0.index_select(1, sorted_indices)
            L = self.num_layers * D
            self._check_state(h0, (L, B, H_out), "hidden[0]" if is_lstm else "hidden")
            if is_lstm:
                self._check_state(c0, (L, B, H), "hidden[1]")
            for state in (h0, c0) if is_lstm else (h0,):
                if state.dtype is not data.dtype:
                    raise RuntimeError(
                        f"hidden state of dtype {state.dtype} and input of dtype {data.dtype}: "
                        "they must have the same dtype"
                    )
        layer_in, h_n, c_n = data, [], []
        for layer in range(self.num_layers):
            outs = []
            for d in range(D):
                k = layer * D + d
                out, h, c = _run_direction(
                    self.mode,
                    layer_in,
                    batch_sizes,
                    h0[k],
                    None if c0 is None else c0[k],
                    self._weights(layer, d),
                    reverse=d == 1,
                )
                outs.append(out)
                h_n.append(h)
                c_n.append(c)
            layer_in = outs[0] if D == 1 else cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_in = F.dropout(layer_in, self.dropout, True)
        h_n = stack(h_n, 0)
        c_n = stack(c_n, 0) if is_lstm else None
        if packed:
            if unsorted_indices is not None:
                h_n = h_n.index_select(1, unsorted_indices)
                c_n = None if c_n is None else c_n.index_select(1, unsorted_indices)
            output = PackedSequence(layer_in, sizes_t, sorted_indices, unsorted_indices)
        else:
            output = layer_in.reshape(len(batch_sizes), B, D * H_out)
            if not batched:
                output, h_n = output.squeeze(1), h_n.squeeze(1)
                c_n = None if c_n is None else c_n.squeeze(1)
            elif self.batch_first:
                output = output.transpose(0, 1)
        return output, ((h_n, c_n) if is_lstm else h_n)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(RNNBase):
    """The Elman network: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or ReLU),
    over a sequence (T, B, input_size); returns ``(output, h_n)``."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        device=None,
        dtype=None,
    ):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(
                f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'."
            )
        super().__init__(
            "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU",
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            0,
            device,
            dtype,
        )
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """:class:`LSTMCell` over a sequence; returns ``(output, (h_n, c_n))``.

    With ``proj_size > 0`` each step's h is projected by ``weight_hr_l{k}`` (proj_size,
    hidden_size) before it is output and fed back.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device=None,
        dtype=None,
    ):
        super().__init__(
            "LSTM",
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            proj_size,
            device,
            dtype,
        )


class GRU(RNNBase):
    """:class:`GRUCell` over a sequence; returns ``(output, h_n)``."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__(
            "GRU",
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            0,
            device,
            dtype,
        )
