"""Activation layers: thin modules over ``sitp.nn.functional``; and, where torch keeps it,
``MultiheadAttention`` (chapter 3.5)."""

from __future__ import annotations

import math

from sitp._tensor.creation import empty, zeros
from sitp.dtypes import bool_
from sitp.functional import cat
from sitp.nn import functional as F
from sitp.nn import init
from sitp.nn.modules.linear import NonDynamicallyQuantizableLinear
from sitp.nn.modules.module import Module
from sitp.nn.parameter import Parameter


class Tanh(Module):
    def forward(self, x):
        return x.tanh()


class ReLU(Module):
    """``inplace=True`` writes the result into the input and returns it, as torch does
    (recorded by autograd when the input is not a leaf)."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        return x.copy_(x.relu()) if self.inplace else x.relu()

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Sigmoid(Module):
    def forward(self, x):
        return x.sigmoid()


class GELU(Module):
    """GELU, exact (``approximate='none'``) or with the tanh approximation."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate='{self.approximate}'"


class SiLU(Module):
    """``inplace=True`` writes the result into the input and returns it, as torch does."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        if not self.inplace:
            return F.silu(x)
        # silu's backward reads its input: give it a copy, since x is overwritten
        return x.copy_(F.silu(x.clone() if x.requires_grad else x))

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Softmax(Module):
    def __init__(self, dim: int = None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return x.softmax(self.dim if self.dim is not None else -1)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, x):
        return x.log_softmax(self.dim if self.dim is not None else -1)


def _float_mask(mask, dtype):
    """A bool mask (True = may not attend) as 0 / -inf, a float mask as it is."""
    if mask is None:
        return None
    if mask.dtype is bool_:
        return zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, -math.inf)
    return mask.to(dtype)


def _pad_key(mask):
    """One more key column at the end of a mask, which every query may attend."""
    if mask is None:
        return None
    return F.pad(mask, (0, 1))


# --8<-- [start:multihead_attention]
class MultiheadAttention(Module):
    """Attention with ``num_heads`` heads (Vaswani et al. 2017), torch's module.

    The query, key and value are projected by ``in_proj_weight`` (3E, E) (or, when
    ``kdim`` or ``vdim`` differ from ``embed_dim``, by ``q_proj_weight``,
    ``k_proj_weight``, ``v_proj_weight``), split into heads of E / num_heads, attended,
    and joined by ``out_proj``. Inputs are (L, N, E) (or (N, L, E) with ``batch_first``,
    or unbatched (L, E)); ``forward`` returns ``(output, weights)``, the weights averaged
    over the heads unless ``average_attn_weights=False``, or None with
    ``need_weights=False``, which runs :func:`F.scaled_dot_product_attention` (one fused
    node on the CPU) instead of materialising the weights.

    Masks follow torch: in a bool ``attn_mask`` (L, S) or (N * num_heads, L, S), True
    means "may not attend"; a float one is added to the scores; in
    ``key_padding_mask`` (N, S), True marks padding. ``is_causal`` is a hint that
    ``attn_mask`` is the causal mask. Unlike torch, a query that may attend no key gets
    zeros where torch's composed path gives NaN, and shape errors torch reports as
    AssertionError are ValueError here.
    """

    def __init__(
        self,
        embed_dim,
        num_heads,
        dropout=0.0,
        bias=True,
        add_bias_kv=False,
        add_zero_attn=False,
        kdim=None,
        vdim=None,
        batch_first=False,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} "
                f"and num_heads={num_heads} instead"
            )
        if embed_dim % num_heads:
            raise ValueError(
                f"embed_dim must be divisible by num_heads (embed_dim={embed_dim}, "
                f"num_heads={num_heads})"
            )
        kw = dict(dtype=dtype, device=device)
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.dropout, self.batch_first = dropout, batch_first
        self.head_dim = embed_dim // num_heads
        E = embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * E, E, **kw))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = Parameter(empty(E, E, **kw))
            self.k_proj_weight = Parameter(empty(E, self.kdim, **kw))
            self.v_proj_weight = Parameter(empty(E, self.vdim, **kw))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * E, **kw))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(E, E, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k = Parameter(empty(1, 1, E, **kw))
            self.bias_v = Parameter(empty(1, 1, E, **kw))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """Xavier-uniform projections, zero biases, Xavier-normal bias_k and bias_v."""
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def _check(self, query, key, value, key_padding_mask, attn_mask):
        if query.ndim not in (2, 3):
            raise ValueError(
                "query should be unbatched 2D or batched 3D tensor but received "
                f"{query.ndim}-D query tensor"
            )
        for name, t in (("key", key), ("value", value)):
            if t.ndim != query.ndim:
                raise ValueError(
                    f"for {query.ndim}-D query, {name} should be {query.ndim}-D too, got a "
                    f"{name} of shape {tuple(t.shape)}"
                )
        if query.shape[-1] != self.embed_dim:
            raise ValueError(
                f"was expecting embedding dimension of {self.embed_dim}, but got "
                f"{query.shape[-1]} (query of shape {tuple(query.shape)})"
            )
        if key.shape[-1] != self.kdim or value.shape[-1] != self.vdim:
            raise ValueError(
                f"key of shape {tuple(key.shape)} and value of shape {tuple(value.shape)}: "
                f"expected last dims kdim={self.kdim} and vdim={self.vdim}"
            )
        if tuple(key.shape[:-1]) != tuple(value.shape[:-1]):
            raise ValueError(
                f"key shape {tuple(key.shape)} does not match value shape {tuple(value.shape)}"
            )
        b = 0 if self.batch_first else 1
        if query.ndim == 3 and key.shape[b] != query.shape[b]:
            raise ValueError(
                f"query of shape {tuple(query.shape)} and key of shape {tuple(key.shape)} have "
                "different batch sizes"
            )
        batched = query.ndim == 3
        N = query.shape[b] if batched else None
        S = key.shape[1 - b] if batched else key.shape[0]
        L = query.shape[1 - b] if batched else query.shape[0]
        if key_padding_mask is not None:
            want = (N, S) if batched else (S,)
            if tuple(key_padding_mask.shape) != want:
                raise ValueError(
                    f"key_padding_mask of shape {tuple(key_padding_mask.shape)}: expected {want} "
                    "(batch, source length)"
                )
        if attn_mask is not None:
            if attn_mask.ndim == 2 and tuple(attn_mask.shape) != (L, S):
                raise RuntimeError(
                    f"The shape of the 2D attn_mask is {tuple(attn_mask.shape)}, but should be "
                    f"{(L, S)}."
                )
            if attn_mask.ndim == 3:
                want = ((N or 1) * self.num_heads, L, S)
                if tuple(attn_mask.shape) != want:
                    raise RuntimeError(
                        f"The shape of the 3D attn_mask is {tuple(attn_mask.shape)}, but should "
                        f"be {want}."
                    )
            if attn_mask.ndim not in (2, 3):
                raise RuntimeError(f"attn_mask's dimension {attn_mask.ndim} is not supported")

    def _project(self, query, key, value):
        """q, k, v = the three input projections, (N, L or S, E)."""
        b = self.in_proj_bias
        b_q, b_k, b_v = (None, None, None) if b is None else b.chunk(3)
        if self._qkv_same_embed_dim:
            if query is key and key is value:  # self-attention: one GEMM
                return F.linear(query, self.in_proj_weight, b).chunk(3, -1)
            w_q, w_k, w_v = self.in_proj_weight.chunk(3)
        else:
            w_q, w_k, w_v = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        return F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)

    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights: bool = True,
        attn_mask=None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ):
        self._check(query, key, value, key_padding_mask, attn_mask)
        batched = query.ndim == 3
        if is_causal and attn_mask is None:
            raise RuntimeError(
                "Need attn_mask if specifying the is_causal hint. You may use the Transformer "
                "module method `generate_square_subsequent_mask` to create this mask."
            )
        same = (query is key, key is value)
        if not batched:  # (L, E) -> (1, L, E)
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:  # (L, N, E) -> (N, L, E)
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        if same[0] and same[1]:
            key = value = query
        N, L, S, H, K = query.shape[0], query.shape[1], key.shape[1], self.num_heads, self.head_dim
        dt = query.dtype
        use_causal = is_causal and key_padding_mask is None and not need_weights
        mask = None if use_causal else _float_mask(attn_mask, dt)
        if mask is not None and mask.ndim == 3:
            mask = mask.view(N, H, L, S)
        q_NLE, k_NSE, v_NSE = self._project(query, key, value)
        if self.bias_k is not None:  # one more key and value, which every query sees
            k_NSE = cat([k_NSE, self.bias_k.expand(N, 1, self.embed_dim)], 1)
            v_NSE = cat([v_NSE, self.bias_v.expand(N, 1, self.embed_dim)], 1)
            mask, key_padding_mask = _pad_key(mask), _pad_key(key_padding_mask)
        q_NHLK = q_NLE.view(N, L, H, K).transpose(1, 2)
        k_NHSK = k_NSE.reshape(N, -1, H, K).transpose(1, 2)
        v_NHSK = v_NSE.reshape(N, -1, H, K).transpose(1, 2)
        if self.add_zero_attn:  # a key and value of zeros
            z = zeros(N, H, 1, K, dtype=dt, device=query.device)
            k_NHSK, v_NHSK = cat([k_NHSK, z], 2), cat([v_NHSK, z], 2)
            mask, key_padding_mask = _pad_key(mask), _pad_key(key_padding_mask)
        if key_padding_mask is not None:  # (N, S) -> (N, 1, 1, S), added to the mask
            pad = _float_mask(key_padding_mask, dt).view(N, 1, 1, -1)
            mask = pad if mask is None else mask + pad
        p = self.dropout if self.training else 0.0
        if need_weights:
            s_NHLS = (q_NHLK * (1.0 / math.sqrt(K))) @ k_NHSK.mT
            if mask is not None:
                s_NHLS = s_NHLS + mask
            w_NHLS = F.dropout(s_NHLS.softmax(-1), p) if p > 0 else s_NHLS.softmax(-1)
            o_NHLK = w_NHLS @ v_NHSK
        else:
            o_NHLK = F.scaled_dot_product_attention(
                q_NHLK, k_NHSK, v_NHSK, mask, dropout_p=p, is_causal=use_causal
            )
            w_NHLS = None
        out = self.out_proj(o_NHLK.transpose(1, 2).reshape(N, L, self.embed_dim))
        if w_NHLS is not None and average_attn_weights:
            w_NHLS = w_NHLS.mean(1)
        if not batched:
            out = out.squeeze(0)
            w_NHLS = None if w_NHLS is None else w_NHLS.squeeze(0)
        elif not self.batch_first:
            out = out.transpose(0, 1)
        return out, w_NHLS


# --8<-- [end:multihead_attention]
