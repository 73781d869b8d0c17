"""``LayerNorm``, ``RMSNorm``, ``BatchNorm1d`` and ``BatchNorm2d``."""

from __future__ import annotations

from sitp._tensor.creation import ones, zeros
from sitp.autograd.grad_mode import no_grad
from sitp.nn import functional as F
from sitp.nn.modules.module import Module
from sitp.nn.parameter import Parameter


class LayerNorm(Module):
    """Normalise over the last dims to mean 0, variance 1, then scale and shift."""

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        dtype=None,
        device=None,
    ):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, dtype=dtype, device=device))
            self.bias = (
                Parameter(zeros(self.normalized_shape, dtype=dtype, device=device))
                if bias
                else None
            )
            if not bias:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )


class RMSNorm(Module):
    """Divide by the root mean square over the last dims, then scale (``F.rms_norm``).

    Layer norm without the mean subtraction and the bias: one learnable gain per
    entry of ``normalized_shape`` (ones at first), or none when
    ``elementwise_affine=False``. ``eps=None`` means the input dtype's machine epsilon.

    >>> import sitp
    >>> norm = sitp.nn.RMSNorm(4)
    >>> y = norm(sitp.tensor([[1.0, -1.0, 1.0, -1.0]]) * 3)
    >>> y
    tensor([[1., -1., 1., -1.]], grad_fn=<RMSNormBackward>)
    """

    def __init__(
        self,
        normalized_shape,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self) -> None:
        """Gains back to ones."""
        if self.weight is not None:
            with no_grad():
                self.weight.fill_(1.0)

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )


# --8<-- [start:batchnorm]
class _BatchNorm(Module):
    """Normalise each channel (dim 1) over the batch and every dim after the channels.

    Training: use the batch's mean and (biased) variance, and update the
    running estimates, ``running = (1 - momentum) * running + momentum * batch``
    (with the unbiased batch variance; ``momentum=None`` makes it the plain average
    of all batches so far). Eval: use the running estimates. The arithmetic is
    ``F.batch_norm``'s; the subclasses say which input shapes they take.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(ones(num_features, dtype=dtype, device=device))
            self.bias = Parameter(zeros(num_features, dtype=dtype, device=device)) if bias else None
            if not bias:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype, device=device))
            self.register_buffer("running_var", ones(num_features, dtype=dtype, device=device))
            self.register_buffer("num_batches_tracked", zeros((), dtype="int64", device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def forward(self, x):
        self._check_input_dim(x)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # the cumulative average
                momentum = 1.0 / int(self.num_batches_tracked.item())
        use_batch = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return F.batch_norm(
            x,
            self.running_mean if track else None,
            self.running_var if track else None,
            self.weight,
            self.bias,
            use_batch,
            momentum,
            self.eps,
        )


class BatchNorm1d(_BatchNorm):
    """Batch norm of (N, C) or (N, C, L): each feature over the batch (and length)."""

    def _check_input_dim(self, x):
        if x.ndim not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {x.ndim}D input)")
        _check_channels(self, x, "(N, {C}) or (N, {C}, L)")

    # --8<-- [end:batchnorm]

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
            f"track_running_stats={self.track_running_stats}"
        )


class BatchNorm2d(_BatchNorm):
    """Batch norm of images (N, C, H, W): each channel over the batch and the pixels."""

    extra_repr = BatchNorm1d.extra_repr

    def _check_input_dim(self, x):
        if x.ndim != 4:
            raise ValueError(f"expected 4D input (got {x.ndim}D input)")
        _check_channels(self, x, "(N, {C}, H, W)")


def _check_channels(bn, x, shape):
    """A channel count that is not ``num_features`` (torch lets F.batch_norm raise a
    RuntimeError about running_mean; sitp names the shape it expected)."""
    if x.shape[1] != bn.num_features:
        raise ValueError(
            f"{type(bn).__name__} expected input of shape {shape.format(C=bn.num_features)}, "
            f"got {tuple(x.shape)}"
        )
