"""``sitp.nn.utils``: gradient clipping; ``sitp.nn.utils.rnn``, packed sequences."""

from __future__ import annotations

import math

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


@no_grad()
def clip_grad_norm_(
    parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False
):
    """Scale all gradients so their joint norm is at most ``max_norm``.

    Returns the total norm before clipping (a 0-d tensor), as PyTorch does.
    """
    if hasattr(parameters, "grad"):
        parameters = [parameters]
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return tensor(0.0)
    if norm_type == math.inf:
        total = max(g.abs().max().item() for g in grads)
    else:
        total = sum(_norm_pow(g, norm_type) for g in grads) ** (1.0 / norm_type)
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients is non-finite")
    coef = max_norm / (total + 1e-6)
    if coef < 1:
        for g in grads:
            g.mul_(coef)
    return tensor(total)


def clip_grad_value_(parameters, clip_value: float) -> None:
    if hasattr(parameters, "grad"):
        parameters = [parameters]
    with no_grad():
        for p in parameters:
            if p.grad is not None:
                p.grad.clamp_(-clip_value, clip_value)
