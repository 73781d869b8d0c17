"""Optimizers and learning-rate schedules, with PyTorch's names (chapter 3.2).

``optimizer.py``  the base class: parameter groups, state, ``state_dict``
``sgd.py``        gradient descent with momentum, Nesterov and weight decay
``adam.py``       Adam and AdamW
``lr_scheduler.py``  LambdaLR, StepLR, CosineAnnealingLR, warmup + cosine
"""

from . import lr_scheduler
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "lr_scheduler"]
