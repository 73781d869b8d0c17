"""Recurrent language models: a vanilla RNN, a GRU and an LSTM (chapter 3.4).

The model reads a name one character at a time, carrying a hidden state:
``h_t = cell(emb(x_t), h_{t-1})``; the logits at step t are a Linear of
``h_t``. The first hidden state ``h_{-1}`` is a learned parameter
(``start``), as in makemore. The cells are ``nn.RNNCell`` (tanh),
``nn.GRUCell`` and ``nn.LSTMCell``; the LSTM also carries a cell state ``c_t``, which
starts at zero.

This file is PyTorch code with ``sitp`` in its import lines (see
:mod:`sitp.models.port`).

Example:
    >>> import sitp
    >>> from sitp.models.rnn import RNN, RNNConfig
    >>> _ = sitp.manual_seed(0)
    >>> model = RNN(RNNConfig(vocab_size=27, cell_type="gru"))
    >>> logits_BTV, _ = model(sitp.zeros((2, 5), dtype=sitp.long))
    >>> tuple(logits_BTV.shape)
    (2, 5, 27)
"""

from dataclasses import dataclass

import sitp as torch
import sitp.nn as nn
from sitp.nn import functional as F


@dataclass
class RNNConfig:
    block_size: int = 32  # longest sequence sampled (the recurrence itself has no limit)
    vocab_size: int = 27  # V
    n_embd: int = 64  # C: width of a character's embedding
    n_embd2: int = 64  # S: width of the hidden state
    cell_type: str = "rnn"  # "rnn" (tanh RNNCell), "gru" (GRUCell) or "lstm" (LSTMCell)


# --8<-- [start:rnn]
class RNN(nn.Module):
    """``forward(idx_BT, targets_BT=None) -> (logits_BTV, loss)``, one cell step per position."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.block_size = config.block_size
        self.start = nn.Parameter(torch.zeros(1, config.n_embd2))  # the learned h_{-1}
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        if config.cell_type == "rnn":
            self.cell = nn.RNNCell(config.n_embd, config.n_embd2)
        elif config.cell_type == "gru":
            self.cell = nn.GRUCell(config.n_embd, config.n_embd2)
        elif config.cell_type == "lstm":
            self.cell = nn.LSTMCell(config.n_embd, config.n_embd2)
        else:
            raise ValueError(f"cell_type must be 'rnn', 'gru' or 'lstm', got {config.cell_type!r}")
        self.lm_head = nn.Linear(config.n_embd2, config.vocab_size)

    # --8<-- [start:forward]
    def forward(self, idx_BT, targets_BT=None):
        B, T = idx_BT.size()
        emb_BTC = self.wte(idx_BT)  # (B, T, C)
        h_BS = self.start.expand((B, -1))  # (B, S): the same start for every row
        c_BS = torch.zeros_like(self.start).expand((B, -1))  # the LSTM's cell state: zero
        hiddens = []
        for x_BC in emb_BTC.unbind(1):  # the recurrence: one step per character
            if self.config.cell_type == "lstm":
                h_BS, c_BS = self.cell(x_BC, (h_BS, c_BS))  # (B, S) each
            else:
                h_BS = self.cell(x_BC, h_BS)  # (B, S)
            hiddens.append(h_BS)
        hidden_BTS = torch.stack(hiddens, 1)  # (B, T, S)
        logits_BTV = self.lm_head(hidden_BTS)  # (B, T, V)
        loss = None
        if targets_BT is not None:  # -1 marks padding after a name's end
            loss = F.cross_entropy(
                logits_BTV.view(-1, logits_BTV.size(-1)), targets_BT.view(-1), ignore_index=-1
            )
        return logits_BTV, loss

    # --8<-- [end:forward]


# --8<-- [end:rnn]
