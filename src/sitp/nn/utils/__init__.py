"""``sitp.nn.utils``: gradient clipping; ``sitp.nn.utils.rnn``, packed sequences."""

from __future__ import annotations

import math

import numpy as np

from sitp._tensor.creation import tensor
from sitp.autograd.grad_mode import no_grad
from sitp.kernels.cpu.fused.norms import sum_of_squares
from sitp.kernels.cpu.ops import flat
from sitp.nn.utils import rnn  # noqa: F401  (torch.nn.utils.rnn)


def _norm_pow(g, norm_type: float) -> float:
    """``sum(|g|**norm_type)`` as a Python float: one fused pass for the 2-norm of a
    contiguous CPU gradient (``sitp/kernels/cpu/fused/norms.py``), ops otherwise."""
    if norm_type == 2.0 and not g.is_cuda and g.is_contiguous() and g.dtype.is_floating_point:
        return sum_of_squares(flat(g))
    return (g.double().abs() ** norm_type).sum().item()


def _scale_(g, coef: float) -> None:
    """``g.mul_(coef)``; a contiguous CPU gradient is scaled by numpy in its storage, the
    same float product (coef rounded to g's dtype, as ``mul_`` rounds a Python number)
    without the op's temporary and copy back."""
    s = g._storage
    if s.__class__ is np.ndarray and g.dtype.is_floating_point and g.is_contiguous():
        v = s[g._offset : g._offset + g.numel()]
        np.multiply(v, s.dtype.type(coef), out=v)
        g._vc[0] += 1  # an in-place write, as mul_ counts it
    else:
        g.mul_(coef)


@no_grad()
def clip_grad_norm_(
    parameters,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach=None,
):
    """Scale all gradients so their joint norm is at most ``max_norm``.

    Returns the total norm before clipping (a 0-d tensor), as PyTorch does. ``foreach``
    is accepted for PyTorch's signature: each contiguous CPU gradient is read by one
    fused pass and scaled in place by one numpy call, whatever it says.
    """
    if hasattr(parameters, "grad"):
        parameters = [parameters]
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return tensor(0.0)
    norm_type = float(norm_type)
    if norm_type == math.inf:
        total = max(g.abs().max().item() for g in grads)
    else:
        total = sum(_norm_pow(g, norm_type) for g in grads) ** (1.0 / norm_type)
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients is non-finite")
    coef = max_norm / (total + 1e-6)
    if coef < 1:
        for g in grads:
            _scale_(g, coef)
    return tensor(total)


def clip_grad_value_(parameters, clip_value: float) -> None:
    if hasattr(parameters, "grad"):
        parameters = [parameters]
    with no_grad():
        for p in parameters:
            if p.grad is not None:
                p.grad.clamp_(-clip_value, clip_value)
