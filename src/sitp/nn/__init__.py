"""``sitp.nn``: modules, parameters, functional ops and initialisation (chapter 4.2)."""

from . import functional, init, utils
from .modules import (GELU, BatchNorm1d, Conv1d, Dropout, Embedding, Flatten, GRUCell, Identity,
                      LayerNorm, Linear, LogSoftmax, Module, ModuleDict, ModuleList, ReLU, RNNCell,
                      Sequential, SiLU, Sigmoid, Softmax, Tanh, Unflatten)
from .parameter import Parameter


class CrossEntropyLoss(Module):
    """``F.cross_entropy`` as a module."""

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__()
        self.weight, self.ignore_index = weight, ignore_index
        self.reduction, self.label_smoothing = reduction, label_smoothing

    def forward(self, input, target):
        return functional.cross_entropy(input, target, weight=self.weight,
                                        ignore_index=self.ignore_index, reduction=self.reduction,
                                        label_smoothing=self.label_smoothing)


class MSELoss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):
        return functional.mse_loss(input, target, reduction=self.reduction)


class BCELoss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):
        return functional.binary_cross_entropy(input, target, reduction=self.reduction)
