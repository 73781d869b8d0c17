"""The bigram model as a network: a learned V x V table of logits (chapter 1).

Row ``i`` of the table holds the logits of the character that follows
character ``i``; training it with cross-entropy finds the same probabilities
that counting does (:mod:`sitp.models.bigram`), up to the smoothing. It is the
first rung of the ladder: every later model replaces the table lookup with
something that reads more context.

This file is PyTorch code with ``sitp`` in its import lines (see
:mod:`sitp.models.port`).

Example:
    >>> import sitp
    >>> from sitp.models.neural_bigram import Bigram, BigramConfig
    >>> model = Bigram(BigramConfig(vocab_size=27))
    >>> X_B1 = sitp.tensor([[0], [1]])
    >>> logits_BV, loss = model(X_B1, sitp.tensor([1, 2]))
    >>> tuple(logits_BV.shape), round(loss.item(), 4)   # a zero table: uniform, log 27
    ((2, 27), 3.2958)
"""

from dataclasses import dataclass

import sitp as torch
import sitp.nn as nn
from sitp.nn import functional as F


# --8<-- [start:bigram]
@dataclass
class BigramConfig:
    block_size: int = 1  # one character of context: the current one
    vocab_size: int = 27  # V


class Bigram(nn.Module):
    """``logits[b] = W[X[b, 0]]``: the next-character logits are a row of W."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.block_size = config.block_size
        self.logits_table = nn.Embedding(config.vocab_size, config.vocab_size)  # W: (V, V)
        torch.nn.init.zeros_(self.logits_table.weight)  # start uniform: loss = log V

    def forward(self, X_B1, targets_B=None):
        logits_BV = self.logits_table(X_B1[:, -1])  # (B, V): the row of the last character
        loss = None
        if targets_B is not None:
            loss = F.cross_entropy(logits_BV, targets_B)
        return logits_BV, loss


# --8<-- [end:bigram]
