"""The attention of a GPT block split by heads across ranks (chapter 7.5): Megatron's
tensor parallelism for an attention whose query, key and value projections are one
matrix (``c_attn``, as the book's GPT and GPT-2 have it).

``ColwiseParallel`` cuts a weight's rows in ``p`` contiguous pieces, which for ``c_attn``
would give rank 0 all the queries and none of the values. Split by heads instead: rank
``r`` takes the rows of heads ``r H/p .. (r + 1) H/p`` from each of the three (q, k, v)
and the same columns of ``c_proj``. Megatron's ``f`` and ``g``
(``sitp.distributed.tensor.parallel``) surround it: one all-reduce forward, one backward.
"""

from __future__ import annotations

import sitp
import sitp.distributed as dist
import sitp.nn.functional as F
from sitp.distributed.tensor.parallel import (
    copy_to_parallel,
    gather_from_sequence_parallel,
    reduce_from_parallel,
    reduce_scatter_to_sequence_parallel,
)


# --8<-- [start:attention]
class HeadParallelAttention(sitp.nn.Module):
    """The heads ``r H/p .. (r + 1) H/p`` of ``attn`` (a ``CausalSelfAttention``) on rank
    ``r``: their q, k and v rows of ``c_attn`` (column-parallel) and their columns of
    ``c_proj`` (row-parallel, its bias whole on every rank). With ``sequence_parallel``
    its input and output are this rank's positions, ``(B, T/p, C)``: the input is
    all-gathered along the sequence and the output reduce-scattered along it, instead of
    ``f`` and ``g``."""

    def __init__(self, attn, group=None, sequence_parallel=False):
        super().__init__()
        self.sequence_parallel = sequence_parallel
        p, r = dist.get_world_size(group), dist.get_rank(group)
        C, H = attn.n_embd, attn.n_head
        if H % p:
            raise ValueError(f"{H} heads cannot be split evenly over {p} ranks")
        self.group, self.heads, self.hs = group, H // p, C // H
        mine = slice(r * C // p, (r + 1) * C // p)  # this rank's heads, side by side
        w, b = attn.c_attn.weight.detach(), attn.c_attn.bias.detach()  # (3C, C): q, k, v
        self.c_attn = sitp.nn.Linear(C, 3 * C // p).to(w.dtype)
        self.c_proj = sitp.nn.Linear(C // p, C).to(w.dtype)
        with sitp.no_grad():
            self.c_attn.weight.copy_(sitp.cat([w[i * C : (i + 1) * C][mine] for i in range(3)]))
            self.c_attn.bias.copy_(sitp.cat([b[i * C : (i + 1) * C][mine] for i in range(3)]))
            self.c_proj.weight.copy_(attn.c_proj.weight.detach()[:, mine])
            self.c_proj.bias.copy_(attn.c_proj.bias.detach())

    def forward(self, x_BTC, rope=None, kv_cache=None, mask=None):  # a Block's call
        if self.sequence_parallel:  # (B, T/p, C) -> (B, T, C)
            x_BTC = gather_from_sequence_parallel(x_BTC, self.group)
        else:
            x_BTC = copy_to_parallel(x_BTC, self.group)  # f: the input's gradient summed
        B, T, _ = x_BTC.shape
        qkv = self.c_attn(x_BTC)  # (B, T, 3 C/p): this rank's heads only
        q, k, v = (
            t.view(B, T, self.heads, self.hs).transpose(1, 2)  # (B, H/p, T, D)
            for t in qkv.split(self.heads * self.hs, dim=2)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y_BTc = y.transpose(1, 2).contiguous().view(B, T, self.heads * self.hs)
        partial = y_BTc @ self.c_proj.weight.t()  # these heads' share of the output
        if self.sequence_parallel:  # this rank's positions of the sum, (B, T/p, C)
            y = reduce_scatter_to_sequence_parallel(partial, self.group)
            return y + copy_to_parallel(self.c_proj.bias, self.group)  # its gradient summed
        return reduce_from_parallel(partial, self.group) + self.c_proj.bias  # g


# --8<-- [end:attention]
