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
    # section 5.4: G key/value heads shared by groups of H / G query heads (0: G = H)
    n_kv_head: int = 0  # 0 or H: multi-head; 1: multi-query; between: grouped-query

    def __post_init__(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")
        if self.n_kv_head < 0 or (self.n_kv_head and self.n_head % self.n_kv_head):
            raise ValueError(
                f"n_kv_head must divide n_head {self.n_head} (0: n_head), got {self.n_kv_head}"
            )
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
    """Rotates each pair (x_i, x_{i+D/2}) of every position t by the angle t * theta_i.

    ``cos_TF`` and ``sin_TF`` are (T, D/2), or (B, 1, T, D/2) when each sequence of a
    batch has positions of its own (a padded batch, section 5.4).
    """
    d = x_BHTD.size(-1) // 2
    x1, x2 = x_BHTD[..., :d], x_BHTD[..., d:]  # the two halves: (B, H, T, D/2) each
    y1 = x1 * cos_TF - x2 * sin_TF  # (x1 + i x2) * e^(i angle), in real arithmetic
    y2 = x1 * sin_TF + x2 * cos_TF
    return torch.cat([y1, y2], dim=-1)  # (B, H, T, D)


# --8<-- [end:rotary]


# --8<-- [start:kv_cache]
class KVCache:
    """The keys and values of every layer for the positions read so far (section 5.4).

    Two tensors of shape (n_layer, B, G, block_size, D), filled from the left (G key/value
    heads: H for multi-head attention, fewer for grouped-query); ``pos`` is how many
    slots they hold. A sequence never grows past ``block_size``: a write that would is
    refused with a ValueError. Setting ``pos`` back forgets the slots after it (the next
    write overwrites them), which is how speculative decoding drops rejected tokens.

    ``padding``: for a batch of prompts of different lengths, left-padded to one length,
    the number of pad slots at the left of each sequence, (B,) int64. A sequence's
    positions then start at its first real token, and its queries never see its pads.
    """

    def __init__(
        self, n_layer, batch_size, n_head, head_dim, block_size, dtype=torch.float32, padding=None
    ):
        shape = (n_layer, batch_size, n_head, block_size, head_dim)
        self.k_LBGSD = torch.zeros(shape, dtype=dtype)
        self.v_LBGSD = torch.zeros(shape, dtype=dtype)
        self.batch_size, self.block_size, self.pos = batch_size, block_size, 0
        if padding is not None:
            padding = torch.as_tensor(padding, dtype=torch.long)
            if tuple(padding.shape) != (batch_size,) or bool((padding < 0).any()):
                raise ValueError(
                    f"padding must be {batch_size} counts >= 0, one per sequence, "
                    f"got {padding.tolist()}"
                )
            if not bool(padding.any()):
                padding = None  # no sequence is padded: the plain causal mask
        self.pad_B = padding

    def check(self, B, T):
        """Raises ValueError unless T more positions of a batch of B fit."""
        if B != self.batch_size:
            raise ValueError(f"the KV cache holds a batch of {self.batch_size}, got {B}")
        if self.pos + T > self.block_size:
            raise ValueError(
                f"the KV cache holds {self.pos} positions; {T} more would pass "
                f"block_size {self.block_size} (start a new cache, or crop the prompt)"
            )

    def update(self, layer, k_BGTD, v_BGTD):
        """Writes the new positions' keys and values; returns all of them so far."""
        end = self.pos + k_BGTD.size(2)
        self.k_LBGSD[layer, :, :, self.pos : end] = k_BGTD
        self.v_LBGSD[layer, :, :, self.pos : end] = v_BGTD
        return self.k_LBGSD[layer, :, :, :end], self.v_LBGSD[layer, :, :, :end]  # (B, G, S, D)

    def repeat_interleave(self, repeats):
        """A new cache whose batch holds each sequence ``repeats`` times, one after another.

        Many samples from one prompt: prefill it once, copy its keys and values.
        """
        rows = torch.tensor([b for b in range(self.batch_size) for _ in range(repeats)])
        L, _, G, S, D = self.k_LBGSD.shape
        new = KVCache(L, len(rows), G, D, S, self.k_LBGSD.dtype)
        new.k_LBGSD, new.v_LBGSD = self.k_LBGSD[:, rows], self.v_LBGSD[:, rows]  # copies
        new.pos = self.pos
        new.pad_B = None if self.pad_B is None else self.pad_B[rows]
        return new

    @property
    def k_LBHSD(self):  # the name of the keys before grouped-query attention (G = H)
        return self.k_LBGSD

    @property
    def v_LBHSD(self):
        return self.v_LBGSD


# --8<-- [end:kv_cache]


# --8<-- [start:attention]
class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t sees positions 0..t only.

    With ``n_kv_head`` G < H (section 5.4), the H query heads share G key/value heads,
    each serving a group of H / G consecutive query heads: grouped-query attention
    (multi-query when G = 1). The keys and values, and so the KV cache, shrink by H / G.
    """

    def __init__(self, config, layer_idx=0):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout
        self.n_kv_head = config.n_kv_head or config.n_head  # G
        self.kv_width = self.n_kv_head * (config.n_embd // config.n_head)  # G * D
        # query, key and value projections for all heads, in one matrix: (C + 2 G D, C)
        self.c_attn = nn.Linear(config.n_embd, config.n_embd + 2 * self.kv_width, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.qk_norm, self.layer_idx = config.qk_norm, layer_idx  # section 5.3, 5.4

    def forward(self, x_BTC, rope=None, kv_cache=None, mask=None):
        B, T, C = x_BTC.size()
        H, G, hs = self.n_head, self.n_kv_head, C // self.n_head
        # c_attn's columns are H query heads, G key heads, G value heads, D columns each:
        # N = H + 2G heads, split by a view and a transpose that move no data
        qkv_BNTD = self.c_attn(x_BTC).view(B, T, H + 2 * G, hs).transpose(1, 2)
        qk_BMTD, v_BGTD = qkv_BNTD.split([H + G, G], dim=1)  # queries and keys: M = H + G
        if self.qk_norm:  # unit RMS per head: the scores are bounded by sqrt(D)
            qk_BMTD = F.rms_norm(qk_BMTD, (hs,))
        if rope is not None:  # the (cos, sin) rows of these T positions, q and k at once
            qk_BMTD = apply_rotary(qk_BMTD, *rope)
        q_BHTD, k_BGTD = qk_BMTD.split([H, G], dim=1)  # (B, H, T, D) and (B, G, T, D)
        causal = True
        if kv_cache is not None:  # attend to the cached positions as well: S = pos + T
            k_BGTD, v_BGTD = kv_cache.update(self.layer_idx, k_BGTD, v_BGTD)
            if mask is None:  # the model passes it; computed here for a direct call
                mask = causal_mask(T, k_BGTD.size(2))
            causal = False
        if kv_cache is not None and T == 1 and G < H:  # a decode step of grouped-query:
            q_BGQD = q_BHTD.reshape(B, G, H // G, hs)  # a group's queries are rows of one head,
            # (B, G, H/G, D) against (B, G, S, D): each key and value head is read once
            y = F.scaled_dot_product_attention(q_BGQD, k_BGTD, v_BGTD, attn_mask=mask)
            y_BTC = y.reshape(B, 1, C)  # (B, G, H/G, D) is heads 0..H-1 in order
            return self.resid_dropout(self.c_proj(y_BTC))
        # softmax(q k^T / sqrt(D) + causal mask) v, for every head at once
        y_BHTD = F.scaled_dot_product_attention(
            q_BHTD,
            k_BGTD,
            v_BGTD,
            attn_mask=None if causal else mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=causal,
            enable_gqa=G < H,  # each key/value head serves H/G query heads
        )
        y_BTC = y_BHTD.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side
        return self.resid_dropout(self.c_proj(y_BTC))


def causal_mask(T, S):
    """(T, S) bool: the last T of S positions each see themselves and every earlier one."""
    if T == 1:
        return None  # one new position sees all S
    return torch.arange(S)[None, :] <= torch.arange(S - T, S)[:, None]


def padded_mask(pad_B, T, S):
    """(B, 1, T, S) bool: ``causal_mask`` without each sequence's first ``pad_B[b]`` slots.

    A pad slot's own query still sees itself, so that no row of the softmax is empty;
    what it computes is never read, since no real query sees a pad slot.
    """
    s_S, t_T = torch.arange(S), torch.arange(S - T, S)
    causal_TS = s_S[None, :] <= t_T[:, None]
    real_BS = s_S[None, :] >= pad_B[:, None]  # slot s holds a token of sequence b
    own_TS = s_S[None, :] == t_T[:, None]
    return (causal_TS[None] & (real_BS[:, None, :] | own_TS[None]))[:, None]  # (B, 1, T, S)


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

    def forward(self, x_BTC, rope=None, kv_cache=None, mask=None):
        x_BTC = x_BTC + self.attn(self.ln_1(x_BTC), rope, kv_cache, mask)
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
        t0 = 0 if kv_cache is None else kv_cache.pos  # the slot of idx[:, 0]
        if kv_cache is not None:
            kv_cache.check(B, T)  # a ValueError if these T positions do not fit
        assert t0 + T <= self.block_size, f"sequence of length {T} > block_size {self.block_size}"
        x_BTC = self.transformer.wte(idx_BT)  # (B, T, C)
        pad_B = None if kv_cache is None else kv_cache.pad_B
        mask, rope = None, None  # without a cache, attention is plainly causal
        if pad_B is None:  # slot = position, alike for every sequence
            if kv_cache is not None:
                mask = causal_mask(T, t0 + T)  # (T, S), or None for one new position
            if self.config.rope:  # rotary: positions enter q and k inside attention
                rope = self.rope_cos[t0 : t0 + T], self.rope_sin[t0 : t0 + T]  # 2 x (T, D/2)
            else:
                pos_T = torch.arange(t0, t0 + T, dtype=torch.long)  # (T,)
                x_BTC = x_BTC + self.transformer.wpe(pos_T)  # (T, C), broadcast over B
        else:  # a left-padded batch (section 5.4): positions count from each first token
            pos_BT = (torch.arange(t0, t0 + T)[None, :] - pad_B[:, None]).clamp(min=0)
            mask = padded_mask(pad_B, T, t0 + T)  # (B, 1, T, S)
            if self.config.rope:
                rope = self.rope_cos[pos_BT][:, None], self.rope_sin[pos_BT][:, None]
            else:
                x_BTC = x_BTC + self.transformer.wpe(pos_BT)  # (B, T, C)
        x_BTC = self.transformer.drop(x_BTC)
        for block in self.transformer.h:
            x_BTC = block(x_BTC, rope, kv_cache, mask)
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

    def make_kv_cache(self, batch_size, padding=None):
        """An empty :class:`KVCache` for ``batch_size`` sequences of this model.

        ``padding``: each sequence's count of pad slots at the left (prompts of
        different lengths, left-padded to one); None: no padding.
        """
        c = self.config
        dtype = self.transformer.wte.weight.dtype
        G, D = c.n_kv_head or c.n_head, c.n_embd // c.n_head
        return KVCache(c.n_layer, batch_size, G, D, c.block_size, dtype, padding)


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
