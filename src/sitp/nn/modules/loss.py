"""The losses as modules (``sitp.nn.modules.loss``, torch's path): each holds its options
(``reduction``, ``weight``, ...) and calls its function in ``sitp.nn.functional``.

``weight`` and ``pos_weight`` are buffers, as in torch: they follow ``.to(device)`` and
appear in ``state_dict``. The deprecated ``size_average`` and ``reduce`` flags still
decide ``reduction`` when given, with torch's warning.
"""

from __future__ import annotations

import warnings

from sitp.nn import functional as F
from sitp.nn.modules.module import Module


def _legacy_reduction(size_average, reduce, reduction):
    """torch's ``_Reduction.legacy_get_string``: the deprecated ``size_average`` and
    ``reduce`` flags, when either is given, decide ``reduction`` (an unset one counts as
    True) and a UserWarning names the ``reduction=`` to write instead."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    ret = "mean" if size_average and reduce else ("sum" if reduce else "none")
    warnings.warn(
        f"size_average and reduce args will be deprecated, please use reduction='{ret}' instead.",
        stacklevel=4,
    )
    return ret


class _Loss(Module):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        self.reduction = _legacy_reduction(size_average, reduce, reduction)


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class L1Loss(_Loss):
    """``F.l1_loss``: the mean (or sum) of ``|input - target|``."""

    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class MSELoss(_Loss):
    """``F.mse_loss``: the mean (or sum) of ``(input - target) ** 2``."""

    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class NLLLoss(_WeightedLoss):
    """``F.nll_loss``: ``-weight[t] * input[t]`` for log-probabilities ``input``
    (N, C) or (N, C, d1, ...) and class indices ``target`` (N,) or (N, d1, ...)."""

    def __init__(
        self,
        weight=None,
        size_average=None,
        ignore_index: int = -100,
        reduce=None,
        reduction: str = "mean",
    ):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(
            input,
            target,
            weight=self.weight,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
        )


class CrossEntropyLoss(_WeightedLoss):
    """``F.cross_entropy``: log_softmax and nll_loss in one fused kernel."""

    def __init__(
        self,
        weight=None,
        size_average=None,
        ignore_index: int = -100,
        reduce=None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(
            input,
            target,
            weight=self.weight,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            label_smoothing=self.label_smoothing,
        )


class BCELoss(_WeightedLoss):
    """``F.binary_cross_entropy`` for probabilities; ``weight`` multiplies each
    element's loss and broadcasts against the input."""

    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, weight=self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """``F.binary_cross_entropy_with_logits``: a sigmoid and BCELoss in one stable
    expression; ``pos_weight`` (one per class, broadcast along the last dim) scales
    the positive targets' term."""

    def __init__(
        self,
        weight=None,
        size_average=None,
        reduce=None,
        reduction: str = "mean",
        pos_weight=None,
    ):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(
            input,
            target,
            self.weight,
            pos_weight=self.pos_weight,
            reduction=self.reduction,
        )


class SmoothL1Loss(_Loss):
    """``F.smooth_l1_loss``: squared below ``beta``, absolute above."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """``F.huber_loss``: squared below ``delta``, ``delta`` times absolute above."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class KLDivLoss(_Loss):
    """``F.kl_div``: KL(target || input) for log-probabilities ``input``; use
    ``reduction='batchmean'`` for the divergence per sample."""

    def __init__(
        self, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False
    ):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)
