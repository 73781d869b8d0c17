"""``LayerNorm``, ``RMSNorm`` and ``BatchNorm1d``."""

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
class BatchNorm1d(Module):
    """Normalise each feature over the batch (and length) dims.

    Training: use the batch's mean and (biased) variance, and update the
    running estimates, ``running = (1 - momentum) * running + momentum * batch``
    (with the unbiased batch variance). Eval: use the running estimates.
    Input (N, C) or (N, C, L).
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
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
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype, device=device))
            self.register_buffer("running_var", ones(num_features, dtype=dtype, device=device))
            self.register_buffer("num_batches_tracked", zeros((), dtype="int64", device=device))

    def forward(self, x):
        if x.ndim not in (2, 3) or x.shape[1] != self.num_features:
            raise ValueError(
                f"BatchNorm1d expected input of shape (N, {self.num_features}) or "
                f"(N, {self.num_features}, L), got {tuple(x.shape)}"
            )
        dims = (0,) if x.ndim == 2 else (0, 2)
        shape = (1, -1) if x.ndim == 2 else (1, -1, 1)
        if self.training or not self.track_running_stats:
            n = x.numel() // self.num_features
            if n <= 1:
                raise ValueError(
                    f"Expected more than 1 value per channel when training, got input size {tuple(x.shape)}"
                )
            mean = x.mean(dims)
            var = x.var(dims, correction=0)
            if self.training and self.track_running_stats:
                with no_grad():
                    m = self.momentum
                    self.running_mean.mul_(1 - m).add_(mean.detach() * m)
                    self.running_var.mul_(1 - m).add_(var.detach() * (m * n / (n - 1)))
                    self.num_batches_tracked.add_(1)
        else:
            mean, var = self.running_mean, self.running_var
        y = (x - mean.view(shape)) * (var.view(shape) + self.eps).rsqrt()
        if self.affine:
            y = y * self.weight.view(shape)
            if self.bias is not None:
                y = y + self.bias.view(shape)
        return y

    # --8<-- [end:batchnorm]

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}"
        )
