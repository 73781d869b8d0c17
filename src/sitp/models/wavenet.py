"""A WaveNet-style hierarchical model, as in makemore part 5 (chapter 3.3).

Instead of squashing all ``block_size`` characters into one layer (the MLP),
the model fuses them two at a time, level by level, like the dilated causal
convolutions of WaveNet (van den Oord et al., 2016): 8 characters -> 4 pairs
-> 2 quads -> 1 vector of the whole context. Each level is
FlattenConsecutive(2) -> Linear -> BatchNorm1d -> Tanh.

makemore's config (emb 24, hidden 128, block 8) has 76,579 parameters.

This file is PyTorch code with ``sitp`` in its import lines (see
:mod:`sitp.models.port`).

Example:
    >>> import sitp
    >>> from sitp.models.wavenet import WaveNet, WaveNetConfig
    >>> _ = sitp.manual_seed(0)
    >>> model = WaveNet(WaveNetConfig(vocab_size=27))
    >>> sum(p.numel() for p in model.parameters())
    76579
"""

from dataclasses import dataclass

import sitp as torch
import sitp.nn as nn
from sitp.nn import functional as F


@dataclass
class WaveNetConfig:
    block_size: int = 8  # T: characters of context; a power of 2 (one level per halving)
    vocab_size: int = 27  # V
    n_embd: int = 24  # C: width of a character's embedding
    n_hidden: int = 128  # S: width of every level


# --8<-- [start:level]
class FlattenConsecutive(nn.Module):
    """(B, T, C) -> (B, T/n, n*C): concatenate each run of n neighbours."""

    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x_BTC):
        B, T, C = x_BTC.size()
        return x_BTC.reshape(B, T // self.n, C * self.n)


class Level(nn.Module):
    """One level of the tree: FlattenConsecutive(2) -> Linear -> BatchNorm1d -> Tanh.

    BatchNorm1d normalises each of the S features over the batch *and* the
    positions, as makemore's own BatchNorm1d does for 3-d input; PyTorch's
    expects (N, C, L), so the positions are folded into the batch first.
    """

    def __init__(self, fan_in, n_hidden, n=2):
        super().__init__()
        self.flatten = FlattenConsecutive(n)
        self.linear = nn.Linear(fan_in * n, n_hidden, bias=False)  # BatchNorm brings the bias
        self.bn = nn.BatchNorm1d(n_hidden)

    def forward(self, x_BTC):
        x_BT_2C = self.flatten(x_BTC)  # (B, T/2, 2C)
        h_BTS = self.linear(x_BT_2C)  # (B, T/2, S)
        B, T, S = h_BTS.size()
        h_NS = self.bn(h_BTS.reshape(B * T, S))  # statistics over batch and time
        return torch.tanh(h_NS.view(B, T, S))


# --8<-- [end:level]


# --8<-- [start:wavenet]
class WaveNet(nn.Module):
    """Embedding, log2(block_size) levels, then a Linear to the logits."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.block_size = config.block_size
        levels = config.block_size.bit_length() - 1
        assert 1 << levels == config.block_size, "block_size must be a power of 2"
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        widths = [config.n_embd] + [config.n_hidden] * levels
        self.levels = nn.ModuleList([Level(widths[i], config.n_hidden) for i in range(levels)])
        self.lm_head = nn.Linear(config.n_hidden, config.vocab_size)
        with torch.no_grad():  # makemore: a less confident last layer at init
            self.lm_head.weight.mul_(0.1)

    def forward(self, X_BT, targets_B=None):
        x = self.wte(X_BT)  # (B, 8, C)
        for level in self.levels:
            x = level(x)  # (B, 4, S), (B, 2, S), (B, 1, S)
        logits_BV = self.lm_head(x[:, 0, :])  # (B, V)
        loss = None
        if targets_B is not None:
            loss = F.cross_entropy(logits_BV, targets_B)
        return logits_BV, loss


# --8<-- [end:wavenet]
