"""``sitp.nn``: modules, parameters, functional ops and initialisation (chapter 4.2).

Part of the PyTorch mirror (layer 5 of docs/layout.md), at ``torch.nn``'s dotted paths;
the layers of chapter 3's models are built here, their kernels in ``sitp.backends``.
"""

import warnings as _warnings

from sitp.nn import functional, init, parallel, utils
from sitp.nn.modules import (
    GELU,
    BatchNorm1d,
    Conv1d,
    Dropout,
    Embedding,
    Flatten,
    GRUCell,
    Identity,
    LayerNorm,
    Linear,
    LogSoftmax,
    Module,
    ModuleDict,
    ModuleList,
    ReLU,
    RMSNorm,
    RNNCell,
    Sequential,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
    Unflatten,
)
from sitp.nn.parameter import Parameter


def _legacy_reduction(size_average, reduce, reduction):
    """torch's ``_Reduction.legacy_get_string``: the deprecated ``size_average`` and
    ``reduce`` flags, when either is given, decide ``reduction`` (an unset one counts as
    True) and a UserWarning names the ``reduction=`` to write instead."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    ret = "mean" if size_average and reduce else ("sum" if reduce else "none")
    _warnings.warn(
        f"size_average and reduce args will be deprecated, please use reduction='{ret}' instead.",
        stacklevel=3,
    )
    return ret


class CrossEntropyLoss(Module):
    """``F.cross_entropy`` as a module."""

    def __init__(
        self,
        weight=None,
        size_average=None,
        ignore_index: int = -100,
        reduce=None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ):
        super().__init__()
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index
        self.reduction = _legacy_reduction(size_average, reduce, reduction)
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return functional.cross_entropy(
            input,
            target,
            weight=self.weight,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            label_smoothing=self.label_smoothing,
        )


class MSELoss(Module):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        self.reduction = _legacy_reduction(size_average, reduce, reduction)

    def forward(self, input, target):
        return functional.mse_loss(input, target, reduction=self.reduction)


class BCELoss(Module):
    """``F.binary_cross_entropy`` as a module; ``weight`` (a buffer, as in torch)
    multiplies each element's loss and broadcasts against the input."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        self.register_buffer("weight", weight)
        self.reduction = _legacy_reduction(size_average, reduce, reduction)

    def forward(self, input, target):
        return functional.binary_cross_entropy(
            input, target, weight=self.weight, reduction=self.reduction
        )
