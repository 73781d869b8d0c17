"""A GPT in the style of nanoGPT (chapter 3.5), with the modern options of chapter 5.3.

Token and position embeddings; ``n_layer`` blocks of pre-LayerNorm causal
self-attention and a GELU MLP, each added back into the residual stream; a
final LayerNorm; a language-model head that shares its weight with the token
embedding. The names of the modules are nanoGPT's (``transformer.wte``,
``c_attn``, ``c_proj``, ``ln_1``, ``lm_head``), so its state_dict reads the same.

The config's later fields are what changed since GPT-2 (section 5.3), each off by
default, so that ``GPTConfig()`` is chapter 3.5's model: rotary position
embeddings, RMSNorm, norms without parameters, QK-norm, a ReLU² MLP, an untied
head and logit soft-capping (biases were already an option). The forward pass
takes an optional :class:`KVCache` (section 5.4): the keys and values of the
positions read so far, so that decoding one more token costs one position's work.

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
    # what changed since GPT-2 (section 5.3); the defaults are GPT-2's choices
    rope: bool = False  # rotary position embeddings on q, k instead of the learned wpe
    rope_base: float = 10000.0  # the base of rotary's geometric ladder of frequencies
    norm: str = "layernorm"  # "layernorm" or "rmsnorm"
    norm_params: bool = True  # False: norms without a learnable gain (or shift)
    qk_norm: bool = False  # RMS-normalise every head's queries and keys
    mlp: str = "gelu"  # the MLP's nonlinearity: "gelu" or "relu2" (ReLU squared)
    tie_weights: bool = True  # lm_head and wte share one (V, C) matrix
    logit_softcap: float = 0.0  # > 0: logits = cap * tanh(logits / cap)

    def __post_init__(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")
        if self.rope and (self.n_embd // self.n_head) % 2:
            raise ValueError(f"rope needs an even head width, got {self.n_embd // self.n_head}")
        if self.norm not in ("layernorm", "rmsnorm"):
            raise ValueError(f"norm must be 'layernorm' or 'rmsnorm', got {self.norm!r}")
        if self.mlp not in ("gelu", "relu2"):
            raise ValueError(f"mlp must be 'gelu' or 'relu2', got {self.mlp!r}")
        if self.logit_softcap < 0:
            raise ValueError(f"logit_softcap must be >= 0 (0: off), got {self.logit_softcap}")


# --8<-- [end:header]

#: Section 5.3's modern options all on, as GPTConfig fields: ``GPTConfig(**MODERN, ...)``
#: (the ablation's "all" row; the Muon optimizer is chosen apart from the config).
MODERN = {
    "rope": True,
    "norm": "rmsnorm",
    "norm_params": False,
    "bias": False,
    "qk_norm": True,
    "mlp": "relu2",
    "tie_weights": False,
    "logit_softcap": 15.0,
}


# --8<-- [start:norm]
def make_norm(config, width):
    """The block's normalisation: GPT-2's LayerNorm, or RMSNorm; with or without a gain."""
    if config.norm == "rmsnorm":  # x / rms(x) [* g]: no mean subtracted, no shift
        return nn.RMSNorm(width, elementwise_affine=config.norm_params)
    return nn.LayerNorm(width, elementwise_affine=config.norm_params, bias=config.bias)


# --8<-- [end:norm]


# --8<-- [start:rotary]
def rotary_cos_sin(block_size, head_dim, base=10000.0):
    """cos and sin of the angles t * theta_i, both (block_size, head_dim // 2).

    Pair i of a head's coordinates turns at the frequency theta_i = base^(-2i/D):
    the first pair once per position, the last one about 1/base as fast.
    """
    theta_F = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    t_T = torch.arange(block_size, dtype=torch.float32)
    angle_TF = t_T[:, None] * theta_F[None, :]  # (T, D/2): an outer product
    return angle_TF.cos(), angle_TF.sin()


def apply_rotary(x_BHTD, cos_TF, sin_TF):
    """Rotates each pair (x_i, x_{i+D/2}) of every position t by the angle t * theta_i."""
    d = x_BHTD.size(-1) // 2
    x1, x2 = x_BHTD[..., :d], x_BHTD[..., d:]  # the two halves: (B, H, T, D/2) each
    y1 = x1 * cos_TF - x2 * sin_TF  # (x1 + i x2) * e^(i angle), in real arithmetic
    y2 = x1 * sin_TF + x2 * cos_TF
    return torch.cat([y1, y2], dim=-1)  # (B, H, T, D)


# --8<-- [end:rotary]


# --8<-- [start:kv_cache]
class KVCache:
    """The keys and values of every layer for the positions read so far (section 5.4).

    Two tensors of shape (n_layer, B, H, block_size, D), filled from the left;
    ``pos`` is how many positions they hold. A sequence never grows past
    ``block_size``: a write that would is refused with a ValueError.
    """

    def __init__(self, n_layer, batch_size, n_head, head_dim, block_size, dtype=torch.float32):
        shape = (n_layer, batch_size, n_head, block_size, head_dim)
        self.k_LBHSD = torch.zeros(shape, dtype=dtype)
        self.v_LBHSD = torch.zeros(shape, dtype=dtype)
        self.batch_size, self.block_size, self.pos = batch_size, block_size, 0

    def check(self, B, T):
        """Raises ValueError unless T more positions of a batch of B fit."""
        if B != self.batch_size:
            raise ValueError(f"the KV cache holds a batch of {self.batch_size}, got {B}")
        if self.pos + T > self.block_size:
            raise ValueError(
                f"the KV cache holds {self.pos} positions; {T} more would pass "
                f"block_size {self.block_size} (start a new cache, or crop the prompt)"
            )

    def update(self, layer, k_BHTD, v_BHTD):
        """Writes the new positions' keys and values; returns all of them so far."""
        end = self.pos + k_BHTD.size(2)
        self.k_LBHSD[layer, :, :, self.pos : end] = k_BHTD
        self.v_LBHSD[layer, :, :, self.pos : end] = v_BHTD
        return self.k_LBHSD[layer, :, :, :end], self.v_LBHSD[layer, :, :, :end]  # (B, H, S, D)


# --8<-- [end:kv_cache]


# --8<-- [start:attention]
class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t sees positions 0..t only."""

    def __init__(self, config, layer_idx=0):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # key, query, value projections for all heads, in one matrix
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout
        self.qk_norm, self.layer_idx = config.qk_norm, layer_idx  # section 5.3, 5.4

    def forward(self, x_BTC, rope=None, kv_cache=None):
        B, T, C = x_BTC.size()
        q, k, v = self.c_attn(x_BTC).split(self.n_embd, dim=2)  # 3 x (B, T, C)
        hs = C // self.n_head
        q_BHTD = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, H, T, D)
        k_BHTD = k.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, H, T, D)
        v_BHTD = v.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, H, T, D)
        if self.qk_norm:  # unit RMS per head: the scores are bounded by sqrt(D)
            q_BHTD, k_BHTD = F.rms_norm(q_BHTD, (hs,)), F.rms_norm(k_BHTD, (hs,))
        if rope is not None:  # the (cos, sin) rows of these T positions
            q_BHTD, k_BHTD = apply_rotary(q_BHTD, *rope), apply_rotary(k_BHTD, *rope)
        mask, causal = None, True
        if kv_cache is not None:  # attend to the cached positions as well: S = pos + T
            k_BHTD, v_BHTD = kv_cache.update(self.layer_idx, k_BHTD, v_BHTD)
            mask, causal = causal_mask(T, k_BHTD.size(2)), False
        # softmax(q k^T / sqrt(D) + causal mask) v, for every head at once
        y_BHTD = F.scaled_dot_product_attention(
            q_BHTD,
            k_BHTD,
            v_BHTD,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=causal,
        )
        y_BTC = y_BHTD.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side
        return self.resid_dropout(self.c_proj(y_BTC))


def causal_mask(T, S):
    """(T, S) bool: the last T of S positions each see themselves and every earlier one."""
    if T == 1:
        return None  # one new position sees all S
    return torch.arange(S)[None, :] <= torch.arange(S - T, S)[:, None]


# --8<-- [end:attention]


# --8<-- [start:mlp]
class MLP(nn.Module):
    """Position-wise feed-forward: widen 4x, GELU (or ReLU²), project back."""

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.relu2 = config.mlp == "relu2"  # section 5.3
        if not self.relu2:
            self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x_BTC):
        h_BTF = self.c_fc(x_BTC)  # (B, T, 4C)
        h_BTF = F.relu(h_BTF).square() if self.relu2 else self.gelu(h_BTF)
        return self.dropout(self.c_proj(h_BTF))


# --8<-- [end:mlp]


# --8<-- [start:block]
class Block(nn.Module):
    """x + attn(ln_1(x)), then x + mlp(ln_2(x)): communicate, then compute."""

    def __init__(self, config, layer_idx=0):
        super().__init__()
        self.ln_1 = make_norm(config, config.n_embd)
        self.attn = CausalSelfAttention(config, layer_idx)
        self.ln_2 = make_norm(config, config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x_BTC, rope=None, kv_cache=None):
        x_BTC = x_BTC + self.attn(self.ln_1(x_BTC), rope, kv_cache)
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
        modules = dict(wte=nn.Embedding(config.vocab_size, config.n_embd))  # token embeddings
        if not config.rope:  # learned position embeddings (rotary has none to learn)
            modules["wpe"] = nn.Embedding(config.block_size, config.n_embd)
        modules.update(
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config, i) for i in range(config.n_layer)]),
            ln_f=make_norm(config, config.n_embd),
        )
        self.transformer = nn.ModuleDict(modules)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_weights:
            self.transformer.wte.weight = self.lm_head.weight  # weight tying: one (V, C) matrix
        if config.rope:  # buffers, not parameters, and not saved: they are recomputed
            cos, sin = rotary_cos_sin(config.block_size, config.n_embd // config.n_head,
                                      config.rope_base)  # fmt: skip
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
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
    def forward(self, idx_BT, targets_BT=None, kv_cache=None):
        B, T = idx_BT.size()
        t0 = 0 if kv_cache is None else kv_cache.pos  # the absolute position of idx[:, 0]
        if kv_cache is not None:
            kv_cache.check(B, T)  # a ValueError if these T positions do not fit
        assert t0 + T <= self.block_size, f"sequence of length {T} > block_size {self.block_size}"
        x_BTC = self.transformer.wte(idx_BT)  # (B, T, C)
        rope = None
        if self.config.rope:  # rotary: positions enter q and k inside attention
            rope = self.rope_cos[t0 : t0 + T], self.rope_sin[t0 : t0 + T]  # 2 x (T, D/2)
        else:
            pos_T = torch.arange(t0, t0 + T, dtype=torch.long)  # (T,)
            x_BTC = x_BTC + self.transformer.wpe(pos_T)  # (T, C), broadcast over B
        x_BTC = self.transformer.drop(x_BTC)
        for block in self.transformer.h:
            x_BTC = block(x_BTC, rope, kv_cache)
        if kv_cache is not None:
            kv_cache.pos += T  # every layer has written these T positions
        x_BTC = self.transformer.ln_f(x_BTC)
        logits_BTV = self.lm_head(x_BTC)  # (B, T, V)
        if self.config.logit_softcap:  # squash smoothly into (-cap, cap)
            cap = self.config.logit_softcap
            logits_BTV = cap * torch.tanh(logits_BTV / cap)
        loss = None
        if targets_BT is not None:  # -1 marks padding after a name's end
            loss = F.cross_entropy(
                logits_BTV.view(-1, logits_BTV.size(-1)), targets_BT.view(-1), ignore_index=-1
            )
        return logits_BTV, loss

    # --8<-- [end:forward]

    def make_kv_cache(self, batch_size):
        """An empty :class:`KVCache` for ``batch_size`` sequences of this model."""
        c = self.config
        dtype = self.transformer.wte.weight.dtype
        return KVCache(c.n_layer, batch_size, c.n_head, c.n_embd // c.n_head, c.block_size, dtype)


# --8<-- [end:gpt]


# --8<-- [start:optimizers]
def muon_and_adamw(model, lr=3e-3, muon_lr=0.02, weight_decay=0.0, betas=(0.9, 0.99)):
    """Two optimizers, as modern recipes split the parameters (section 5.3).

    Muon for the 2-D matrices inside the blocks (``c_attn``, ``c_proj``, ``c_fc``);
    AdamW for everything else: the embeddings, the head, norm gains and biases,
    which are lookup tables or vectors rather than maps between hidden spaces.
    Step both (and zero both) every iteration.
    """
    matrices = [p for p in model.transformer.h.parameters() if p.dim() == 2]
    in_muon = {id(p) for p in matrices}
    rest = [p for p in model.parameters() if id(p) not in in_muon]
    muon = torch.optim.Muon(matrices, lr=muon_lr, weight_decay=weight_decay)
    adamw = torch.optim.AdamW(rest, lr=lr, betas=betas, weight_decay=weight_decay)
    return muon, adamw


# --8<-- [end:optimizers]
