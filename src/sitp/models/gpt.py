"""A GPT in the style of nanoGPT, sized for names (chapter 3.5).

Token and position embeddings; ``n_layer`` blocks of pre-LayerNorm causal
self-attention and a GELU MLP, each added back into the residual stream; a
final LayerNorm; a language-model head that shares its weight with the token
embedding. The names of the modules are nanoGPT's (``transformer.wte``,
``c_attn``, ``c_proj``, ``ln_1``, ``lm_head``), so its state_dict reads the same.

This file is PyTorch code: change ``sitp`` to ``torch`` in the three import lines
and PyTorch runs it (``sitp.models.port.load_module("gpt", "torch")`` does it).

Example:
    >>> import sitp
    >>> from sitp.models.gpt import GPT, GPTConfig
    >>> _ = sitp.manual_seed(0)
    >>> model = GPT(GPTConfig(vocab_size=27))
    >>> idx_BT, targets_BT = sitp.randint(0, 27, (2, 4)), sitp.randint(0, 27, (2, 4))
    >>> logits_BTV, loss = model(idx_BT, targets_BT)
    >>> tuple(logits_BTV.shape), loss.ndim
    ((2, 4, 27), 0)
    >>> sum(p.numel() for p in model.parameters())   # the tied (V, C) matrix counted once
    203840
"""

# --8<-- [start:header]
import math
from dataclasses import dataclass

import sitp as torch
import sitp.nn as nn
from sitp.nn import functional as F


@dataclass
class GPTConfig:
    block_size: int = 32  # the longest sequence the model reads (positions 0..block_size-1)
    vocab_size: int = 27  # V: '.' and the 26 letters for names
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # H: attention heads per block; head width D = n_embd // n_head
    n_embd: int = 64  # C: the width of the residual stream
    dropout: float = 0.0  # the share of activations zeroed in training (0: none)
    bias: bool = True  # biases in the Linears and LayerNorms, as GPT-2


# --8<-- [end:header]


# --8<-- [start:attention]
class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t sees positions 0..t only."""

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # key, query, value projections for all heads, in one matrix
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout

    def forward(self, x_BTC):
        B, T, C = x_BTC.size()
        q, k, v = self.c_attn(x_BTC).split(self.n_embd, dim=2)  # 3 x (B, T, C)
        hs = C // self.n_head
        q_BHTD = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, H, T, D)
        k_BHTD = k.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, H, T, D)
        v_BHTD = v.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, H, T, D)
        # softmax(q k^T / sqrt(D) + causal mask) v, for every head at once
        y_BHTD = F.scaled_dot_product_attention(
            q_BHTD, k_BHTD, v_BHTD, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        y_BTC = y_BHTD.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side
        return self.resid_dropout(self.c_proj(y_BTC))


# --8<-- [end:attention]


# --8<-- [start:mlp]
class MLP(nn.Module):
    """Position-wise feed-forward: widen 4x, GELU, project back."""

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x_BTC):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x_BTC))))


# --8<-- [end:mlp]


# --8<-- [start:block]
class Block(nn.Module):
    """x + attn(ln_1(x)), then x + mlp(ln_2(x)): communicate, then compute."""

    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x_BTC):
        x_BTC = x_BTC + self.attn(self.ln_1(x_BTC))
        x_BTC = x_BTC + self.mlp(self.ln_2(x_BTC))
        return x_BTC


# --8<-- [end:block]


# --8<-- [start:gpt]
class GPT(nn.Module):
    """The decoder-only transformer: ``forward(idx, targets=None) -> (logits, loss)``."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.block_size = config.block_size
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),  # token embeddings
                wpe=nn.Embedding(config.block_size, config.n_embd),  # position embeddings
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying: one (V, C) matrix
        # GPT-2's init: N(0, 0.02), and residual projections scaled by 1/sqrt(2 n_layer)
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    # --8<-- [start:forward]
    def forward(self, idx_BT, targets_BT=None):
        B, T = idx_BT.size()
        assert T <= self.block_size, f"sequence of length {T} > block_size {self.block_size}"
        pos_T = torch.arange(0, T, dtype=torch.long)  # (T,)
        tok_emb_BTC = self.transformer.wte(idx_BT)  # (B, T, C)
        pos_emb_TC = self.transformer.wpe(pos_T)  # (T, C), broadcast over B
        x_BTC = self.transformer.drop(tok_emb_BTC + pos_emb_TC)
        for block in self.transformer.h:
            x_BTC = block(x_BTC)
        x_BTC = self.transformer.ln_f(x_BTC)
        logits_BTV = self.lm_head(x_BTC)  # (B, T, V)
        loss = None
        if targets_BT is not None:  # -1 marks padding after a name's end
            loss = F.cross_entropy(
                logits_BTV.view(-1, logits_BTV.size(-1)), targets_BT.view(-1), ignore_index=-1
            )
        return logits_BTV, loss

    # --8<-- [end:forward]


# --8<-- [end:gpt]
