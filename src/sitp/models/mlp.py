"""The MLP language model of Bengio et al. (2003), as in makemore part 2 (chapter 3.1).

The last ``block_size`` characters are looked up in an embedding table E,
their vectors concatenated, passed through one tanh hidden layer, and
projected to the logits of the next character:

    logits = tanh(concat(E[x_1], ..., E[x_T]) W1 + b1) W2 + b2

This file is PyTorch code with ``sitp`` in its import lines (see
:mod:`sitp.models.port`).

Example:
    >>> import sitp
    >>> from sitp.models.mlp import MLP, MLPConfig
    >>> _ = sitp.manual_seed(0)
    >>> model = MLP(MLPConfig(vocab_size=27))
    >>> sum(p.numel() for p in model.parameters())   # makemore's 11,897
    11897
"""

from dataclasses import dataclass

import sitp as torch
import sitp.nn as nn
from sitp.nn import functional as F


@dataclass
class MLPConfig:
    block_size: int = 3  # T: characters of context (makemore: 3)
    vocab_size: int = 27  # V
    n_embd: int = 10  # C: width of a character's embedding
    n_hidden: int = 200  # S: width of the tanh hidden layer


# --8<-- [start:mlp]
class MLP(nn.Module):
    """Embedding -> flatten -> Linear -> tanh -> Linear."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.block_size = config.block_size
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)  # the table E: (V, C)
        self.hidden = nn.Linear(config.block_size * config.n_embd, config.n_hidden)
        self.lm_head = nn.Linear(config.n_hidden, config.vocab_size)
        with torch.no_grad():  # makemore part 3: small output logits, so loss starts at log V
            self.lm_head.weight.mul_(0.01)
            self.lm_head.bias.zero_()

    def forward(self, X_BT, targets_B=None):
        B, T = X_BT.size()
        emb_BTC = self.wte(X_BT)  # (B, T, C)
        x_B_TC = emb_BTC.view(B, -1)  # (B, T*C): the context, concatenated
        h_BS = torch.tanh(self.hidden(x_B_TC))  # (B, S)
        logits_BV = self.lm_head(h_BS)  # (B, V)
        loss = None
        if targets_B is not None:
            loss = F.cross_entropy(logits_BV, targets_B)
        return logits_BV, loss


# --8<-- [end:mlp]
