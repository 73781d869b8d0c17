"""Weight initialisation, as ``torch.nn.init`` (all in place, without grad)."""

from __future__ import annotations

import math

from sitp._tensor.creation import tensor as _tensor
from sitp.autograd.grad_mode import no_grad
from sitp.random import _rng


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The recommended gain for a nonlinearity (PyTorch's table)."""
    if nonlinearity in ("linear", "conv1d", "conv2d", "conv3d", "sigmoid", "conv_transpose1d"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor):
    if tensor.ndim < 2:
        raise ValueError(
            "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions"
        )
    receptive = 1
    for n in tensor.shape[2:]:
        receptive *= n
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(tensor, mode):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    return fan_in if mode == "fan_in" else fan_out


@no_grad()
def uniform_(tensor, a: float = 0.0, b: float = 1.0, generator=None):
    return tensor.uniform_(a, b, generator=generator)


@no_grad()
def normal_(tensor, mean: float = 0.0, std: float = 1.0, generator=None):
    return tensor.normal_(mean, std, generator=generator)


@no_grad()
def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """Normal samples redrawn until they fall in [a, b]."""
    rng = _rng(generator)
    vals = rng.normal(mean, std, size=tuple(tensor.shape))
    bad = (vals < a) | (vals > b)
    while bad.any():
        vals[bad] = rng.normal(mean, std, size=int(bad.sum()))
        bad = (vals < a) | (vals > b)
    return tensor.copy_(_tensor(vals, dtype=tensor.dtype))


@no_grad()
def constant_(tensor, val: float):
    return tensor.fill_(val)


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)


def xavier_uniform_(tensor, gain: float = 1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor, gain: float = 1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def kaiming_uniform_(
    tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", generator=None
):
    """U(-bound, bound) with bound = gain * sqrt(3 / fan)."""
    gain = calculate_gain(nonlinearity, a)
    bound = math.sqrt(3.0) * gain / math.sqrt(_fan(tensor, mode))
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(
    tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", generator=None
):
    gain = calculate_gain(nonlinearity, a)
    return normal_(tensor, 0.0, gain / math.sqrt(_fan(tensor, mode)), generator)
