"""torch's Transformer modules (chapter 3.5): ``TransformerEncoderLayer``,
``TransformerEncoder``, ``TransformerDecoderLayer``, ``TransformerDecoder`` and
``Transformer``, the encoder-decoder of Vaswani et al. (2017).

Each layer is attention and a two-layer feed-forward block, each wrapped in a residual
connection and a LayerNorm: after the sum (``norm_first=False``, the paper's "post-norm")
or on the block's input (``norm_first=True``, "pre-norm", which trains deep stacks more
stably). Parameter names are torch's, so state dicts load both ways.

torch's CPU encoder has a fast path (fused kernels, and nested tensors for padded
batches under ``enable_nested_tensor``) that it takes in inference; it is an
optimisation of the same function, and sitp always runs the composed modules. One
visible difference: with a ``src_key_padding_mask`` under ``no_grad`` in eval mode,
torch's nested tensors return zeros at the padded positions, where sitp returns what the
layers compute there.
"""

from __future__ import annotations

import copy

from sitp._tensor.creation import full, zeros
from sitp.dtypes import bool_, float32
from sitp.nn import functional as F
from sitp.nn import init
from sitp.nn.modules.activation import MultiheadAttention
from sitp.nn.modules.container import ModuleList
from sitp.nn.modules.dropout import Dropout
from sitp.nn.modules.linear import Linear
from sitp.nn.modules.module import Module
from sitp.nn.modules.normalization import LayerNorm


def _activation(activation):
    """Activation ``"relu"`` or ``"gelu"`` by name, or any callable."""
    if isinstance(activation, str):
        if activation == "relu":
            return F.relu
        if activation == "gelu":
            return F.gelu
        raise RuntimeError(f"activation should be relu/gelu, not {activation}")
    return activation


def _clones(module, n):
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


def _generate_square_subsequent_mask(sz: int, device=None, dtype=None):
    """(sz, sz): 0 on and below the diagonal, -inf above (True above, for bool)."""
    dtype = float32 if dtype is None else dtype  # sitp's default dtype
    above = full((sz, sz), True, dtype=bool_, device=device).triu(1)
    if dtype is bool_:
        return above
    return zeros(sz, sz, dtype=dtype, device=device).masked_fill(above, float("-inf"))


def _detect_is_causal_mask(mask, is_causal=None, size=None) -> bool:
    """``is_causal`` when given; otherwise whether ``mask`` is the causal mask."""
    if is_causal is not None or mask is None:
        return bool(is_causal)
    sz = size if size is not None else mask.shape[-2]
    if tuple(mask.shape[-2:]) != (sz, sz):
        return False
    causal = _generate_square_subsequent_mask(sz, device=mask.device, dtype=mask.dtype)
    return bool((mask == causal).all().item())


# --8<-- [start:encoder_layer]
class TransformerEncoderLayer(Module):
    """Self-attention, then the feed-forward block, each with a residual and a LayerNorm:

    post-norm: x = norm1(x + sa(x)); x = norm2(x + ff(x))
    pre-norm:  x = x + sa(norm1(x)); x = x + ff(norm2(x))

    with ff(x) = linear2(dropout(activation(linear1(x)))).
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kw
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _activation(activation)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(
            x,
            x,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            need_weights=False,
            is_causal=is_causal,
        )[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


# --8<-- [end:encoder_layer]


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` (deep copies: each its own weights), then
    ``norm`` if given. ``enable_nested_tensor`` and ``mask_check`` are accepted and ignored
    (they steer torch's inference fast path, see the module's docstring)."""

    def __init__(
        self,
        encoder_layer,
        num_layers: int,
        norm=None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ):
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        seq_len = None
        if src.ndim == 3:
            first = self.layers[0].self_attn.batch_first if len(self.layers) else False
            seq_len = src.shape[1 if first else 0]
        elif src.ndim == 2:
            seq_len = src.shape[0]
        is_causal = _detect_is_causal_mask(mask, is_causal, seq_len)
        out = src
        for layer in self.layers:
            out = layer(
                out, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=is_causal
            )
        return out if self.norm is None else self.norm(out)


class TransformerDecoderLayer(Module):
    """Self-attention on the target, attention to the encoder's output (``memory``), and
    the feed-forward block, each with a residual and a LayerNorm (post- or pre-norm)."""

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kw
        )
        self.multihead_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kw
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation(activation)

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ):
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(
                self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal
            )
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(
                x
                + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            )
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(
            x,
            x,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=False,
        )[0]
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(
            x,
            mem,
            mem,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=False,
        )[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer``, then ``norm`` if given."""

    def __init__(self, decoder_layer, num_layers: int, norm=None):
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=None,
        memory_is_causal: bool = False,
    ):
        seq_len = None
        if tgt.ndim == 3:
            first = self.layers[0].self_attn.batch_first if len(self.layers) else False
            seq_len = tgt.shape[1 if first else 0]
        elif tgt.ndim == 2:
            seq_len = tgt.shape[0]
        tgt_is_causal = _detect_is_causal_mask(tgt_mask, tgt_is_causal, seq_len)
        out = tgt
        for layer in self.layers:
            out = layer(
                out,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=tgt_is_causal,
                memory_is_causal=memory_is_causal,
            )
        return out if self.norm is None else self.norm(out)


class Transformer(Module):
    """The encoder-decoder: ``encoder`` (a :class:`TransformerEncoder` with a final
    LayerNorm, or ``custom_encoder``) maps ``src`` to a memory, which ``decoder`` attends
    while it transforms ``tgt``. Every weight matrix is re-drawn Xavier-uniform, as in
    torch. Subclasses may replace ``encoder`` or ``decoder`` with modules of their own.
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        custom_encoder=None,
        custom_decoder=None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps)
        layer_kw = dict(batch_first=batch_first, norm_first=norm_first, bias=bias, **kw)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(
                TransformerEncoderLayer(*layer_args, **layer_kw),
                num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw),
            )
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(*layer_args, **layer_kw),
                num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw),
            )
        self._reset_parameters()
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(
        self,
        src,
        tgt,
        src_mask=None,
        tgt_mask=None,
        memory_mask=None,
        src_key_padding_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        src_is_causal=None,
        tgt_is_causal=None,
        memory_is_causal: bool = False,
    ):
        b = 0 if self.batch_first else 1
        if src.ndim == 3 and (tgt.ndim != 3 or src.shape[b] != tgt.shape[b]):
            raise RuntimeError(
                f"the batch number of src and tgt must be equal (src of shape "
                f"{tuple(src.shape)}, tgt of shape {tuple(tgt.shape)}, "
                f"batch_first={self.batch_first})"
            )
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError(
                f"the feature number of src and tgt must be equal to d_model={self.d_model} "
                f"(src of shape {tuple(src.shape)}, tgt of shape {tuple(tgt.shape)})"
            )
        memory = self.encoder(
            src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal
        )
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None):
        """The causal mask (sz, sz): -inf above the diagonal, 0 on and below it."""
        return _generate_square_subsequent_mask(sz, device=device, dtype=dtype)
