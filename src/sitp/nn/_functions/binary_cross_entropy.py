"""The binary cross-entropy losses as autograd nodes of their own (chapter 4.2):
:class:`BinaryCrossEntropy` on probabilities and :class:`BinaryCrossEntropyWithLogits`.

Both are compositions of tensor ops (they run on any backend); they are nodes so that
their backward uses PyTorch's formulas, which stay finite where the composition's
derivative would not.
"""

from __future__ import annotations

from sitp.autograd.derivatives import unbroadcast
from sitp.autograd.function import Function


class BinaryCrossEntropy(Function):
    """Elementwise -(y log x + (1 - y) log(1 - x)), each log clamped at -100.

    The clamp keeps x = 0 and x = 1 finite, as PyTorch does; the gradient uses
    PyTorch's formula (x - y) / max(x (1 - x), 1e-12) rather than the clamp's
    zero, so a confident wrong prediction still gets a (large, finite) push.
    """

    @staticmethod
    def forward(ctx, x, y):
        log_x = x.log().clamp(min=-100.0)
        log_1mx = (1 - x).log().clamp(min=-100.0)
        ctx.save_for_backward(x, y, log_x, log_1mx)
        return -(y * log_x + (1 - y) * log_1mx)

    @staticmethod
    def backward(ctx, g):
        x, y, log_x, log_1mx = ctx.saved_tensors
        gx = g * (x - y) / (x * (1 - x)).clamp(min=1e-12) if ctx.needs_input_grad[0] else None
        gy = g * (log_1mx - log_x) if ctx.needs_input_grad[1] else None
        return gx, gy


class BinaryCrossEntropyWithLogits(Function):
    """Elementwise (1 - y) z + (1 + (pw - 1) y) softplus(-z), stable for any z.

    softplus(-z) = log(1 + exp(-z)) = max(-z, 0) + log1p(exp(-|z|)) never
    overflows. Gradients: dz = sigmoid(z) (1 + (pw - 1) y) - pw y (sigmoid(z) - y
    without pos_weight), dy = (pw - 1) softplus(-z) - z.
    """

    @staticmethod
    def forward(ctx, z, y, pos_weight):
        sp = (-z).relu() + (-z.abs()).exp().log1p()  # softplus(-z)
        coef = 1 if pos_weight is None else 1 + (pos_weight - 1) * y
        ctx.save_for_backward(z, y, sp)
        ctx.pos_weight = pos_weight
        return (1 - y) * z + coef * sp

    @staticmethod
    def backward(ctx, g):
        z, y, sp = ctx.saved_tensors
        pw = ctx.pos_weight
        s = z.sigmoid()
        if pw is None:
            gz = g * (s - y)
            gy = g * -z
        else:
            gz = g * (s * (1 + (pw - 1) * y) - pw * y)
            gy = g * ((pw - 1) * sp - z)
        nz, ny = ctx.needs_input_grad[:2]
        return (
            unbroadcast(gz, z.shape) if nz else None,
            unbroadcast(gy, y.shape) if ny else None,
            None,
        )
