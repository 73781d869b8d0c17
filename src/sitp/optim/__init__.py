"""Optimizers and learning-rate schedules, with PyTorch's names (chapter 3.2).

Part of the PyTorch mirror (layer 5 of docs/layout.md), at ``torch.optim``'s paths.

``optimizer.py``  the base class: parameter groups, state, ``state_dict``
``sgd.py``        gradient descent with momentum, Nesterov and weight decay
``adam.py``       Adam and AdamW
``muon.py``       Muon: Newton–Schulz-orthogonalised momentum for 2-D parameters
``lr_scheduler.py``  LambdaLR, StepLR, CosineAnnealingLR, warmup + cosine
"""

from sitp.optim import lr_scheduler
from sitp.optim.adam import Adam, AdamW
from sitp.optim.muon import Muon
from sitp.optim.optimizer import Optimizer
from sitp.optim.sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Muon", "lr_scheduler"]
