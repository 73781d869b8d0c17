"""The chapter's GPT trained on several ranks, split three ways (chapter 7.5 and 7.6).

* **Tensor parallelism** (:func:`tensor_parallel_gpt`): in every block the attention is
  split by heads (:class:`~sitp.examples.tensor_parallel.HeadParallelAttention`) and the
  MLP by columns, then rows (``ColwiseParallel``, ``RowwiseParallel``); the embeddings,
  the layer norms and the head stay whole on every rank. The model's own ``forward``
  runs unchanged: every rank computes the same loss.
* **Sequence parallelism** (``sequence_parallel=True``): the same split, and what runs on
  each position alone (the embeddings, the layer norms, the head) runs on this rank's
  ``T/p`` positions, their weights read through Megatron's ``f`` so that their gradients
  are summed over the ranks. :func:`sequence_parallel_loss` is the model's forward for
  it: this rank's share of the batch's mean loss.
* **Pipeline parallelism** (:func:`pipeline_stage`): rank ``r`` of ``p`` keeps the
  ``r``-th run of ``n_layer/p`` blocks, the first stage the embeddings too and the last
  the final layer norm and the head, for ``ScheduleGPipe`` or ``Schedule1F1B``. A GPT
  whose head and token embedding share one matrix (``tie_weights``) holds a copy on the
  first and on the last stage; :func:`sum_tied_grads` adds the two copies' gradients
  (Megatron's embedding all-reduce), so that the same update keeps them equal.

Each way trains to one process's losses and weights (``tests/test_parallel_gpt.py``, on 2
ranks, float64). The layers are split for the model as chapter 3 builds it: GELU or ReLU²
MLP, layer or RMS norm, learned positions; rotary positions, QK-norm, grouped-query
attention and dropout are refused by name.
"""

from __future__ import annotations

import sitp
import sitp.distributed as dist
import sitp.nn.functional as F
from sitp.distributed.tensor import Shard
from sitp.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from sitp.examples.tensor_parallel import HeadParallelAttention

__all__ = [
    "pipeline_loss",
    "pipeline_stage",
    "sequence_parallel_loss",
    "sum_tied_grads",
    "tensor_parallel_gpt",
]


def _check(model, way: str) -> None:
    c = model.config
    refused = {
        "rope=True": c.rope,
        "qk_norm=True": c.qk_norm,
        f"n_kv_head={c.n_kv_head}": c.n_kv_head not in (0, c.n_head),
        f"dropout={c.dropout}": c.dropout > 0,
    }
    found = [name for name, on in refused.items() if on]
    if found:
        raise ValueError(
            f"{way}: sitp splits the GPT of chapter 3 (learned positions, multi-head "
            f"attention, no dropout); this one has {', '.join(found)}"
        )


def _mlp_plan(block, sequence_parallel: bool) -> dict:
    shard = Shard(1) if sequence_parallel else None
    if not hasattr(block.mlp, "c_fc") or block.mlp.c_fc.bias is None:
        raise ValueError("tensor_parallel_gpt: the MLP must be c_fc -> c_proj with biases")
    return {
        "mlp.c_fc": ColwiseParallel(input_layouts=shard),
        "mlp.c_proj": RowwiseParallel(output_layouts=shard),
    }


# --8<-- [start:tensor]
def _logits(config, ln_f, lm_head, x_BTC):
    """The GPT's end: final norm, head and (when the config has one) the soft-cap."""
    logits = lm_head(ln_f(x_BTC))
    if config.logit_softcap:
        logits = config.logit_softcap * sitp.tanh(logits / config.logit_softcap)
    return logits


def _cross_entropy(logits_BTV, targets_BT, reduction="mean"):
    """The GPT's loss over every position, ``-1`` targets left out."""
    V = logits_BTV.shape[-1]
    return F.cross_entropy(
        logits_BTV.reshape(-1, V), targets_BT.reshape(-1), ignore_index=-1, reduction=reduction
    )


def tensor_parallel_gpt(model, group=None, sequence_parallel: bool = False):
    """Split every block of ``model`` (a :class:`~sitp.models.gpt.GPT`, the same one on
    every rank) across the ranks of ``group``, in place; returns it. With
    ``sequence_parallel`` the layers outside attention and the MLP work on this rank's
    positions only: call :func:`sequence_parallel_loss`, not the model."""
    _check(model, "tensor_parallel_gpt")
    if sequence_parallel:  # first: parallelize_module broadcasts rank 0's whole model
        per_position = ["transformer.wte", "transformer.wpe", "transformer.ln_f", "lm_head"]
        parallelize_module(model, group, {name: SequenceParallel() for name in per_position})
    for block in model.transformer.h:
        plan = _mlp_plan(block, sequence_parallel)
        if sequence_parallel:
            plan.update({"ln_1": SequenceParallel(), "ln_2": SequenceParallel()})
        parallelize_module(block, group, plan)
        block.attn = HeadParallelAttention(block.attn, group, sequence_parallel)
    return model


def sequence_parallel_loss(model, idx_BT, targets_BT, group=None):
    """This rank's share of the mean cross-entropy of ``model`` (split by
    :func:`tensor_parallel_gpt` with ``sequence_parallel=True``) on the batch: the sum
    of its positions' losses over the batch's count of targets (``-1``: none). The
    shares of the ranks add up to the loss of the whole batch."""
    p, r = dist.get_world_size(group), dist.get_rank(group)
    B, T = idx_BT.shape
    if T % p:
        raise ValueError(f"a sequence of {T} positions cannot be split over {p} ranks")
    lo, hi = r * T // p, (r + 1) * T // p  # this rank's positions
    tr = model.transformer
    x_BtC = tr.wte(idx_BT[:, lo:hi]) + tr.wpe(sitp.arange(lo, hi))
    for block in tr.h:
        x_BtC = block(x_BtC)
    logits = _logits(model.config, tr.ln_f, model.lm_head, x_BtC)
    total = _cross_entropy(logits, targets_BT[:, lo:hi], reduction="sum")
    return total / max(int((targets_BT != -1).sum()), 1)


# --8<-- [end:tensor]


# --8<-- [start:pipeline]
class _Stage(sitp.nn.Module):
    """A run of a GPT's blocks, with the embeddings before them on the first stage and
    the final norm and the head after them on the last."""

    def __init__(self, model, blocks, first: bool, last: bool):
        super().__init__()
        self.first, self.last, self.config = first, last, model.config
        if first:
            self.wte, self.wpe = model.transformer.wte, model.transformer.wpe
        self.h = sitp.nn.ModuleList(blocks)
        if last:
            self.ln_f, self.lm_head = model.transformer.ln_f, model.lm_head

    def forward(self, x):
        if self.first:  # token ids (B, T) -> (B, T, C)
            x = self.wte(x) + self.wpe(sitp.arange(x.shape[1]))
        for block in self.h:
            x = block(x)
        if self.last:
            x = _logits(self.config, self.ln_f, self.lm_head, x)
        return x


def pipeline_stage(model, rank: int, num_stages: int):
    """Stage ``rank`` of ``num_stages`` of ``model`` (a GPT whose ``n_layer`` they
    divide): its blocks, and the embeddings (first) or the final norm and the head
    (last). Its parameters are the model's own tensors."""
    _check(model, "pipeline_stage")
    n = model.config.n_layer
    if n % num_stages:
        raise ValueError(f"{n} blocks cannot be split evenly over {num_stages} stages")
    if not 0 <= rank < num_stages:
        raise ValueError(f"stage {rank} of {num_stages} does not exist")
    k = n // num_stages
    blocks = list(model.transformer.h)[rank * k : (rank + 1) * k]
    return _Stage(model, blocks, rank == 0, rank == num_stages - 1)


def pipeline_loss(logits_BTV, targets_BT):
    """The last stage's loss of one micro-batch: the GPT's mean cross-entropy."""
    return _cross_entropy(logits_BTV, targets_BT)


def sum_tied_grads(stage, group=None) -> None:
    """Add the gradients of the two copies of a tied matrix (the token embedding on the
    first stage, the head on the last) so that both hold their sum; call it after a
    schedule's step, before the optimizer's. Nothing to do for an untied GPT or one
    stage."""
    p = dist.get_world_size(group)
    if not stage.config.tie_weights or p == 1:
        return
    V, C = stage.config.vocab_size, stage.config.n_embd
    w = stage.wte.weight if stage.first else stage.lm_head.weight if stage.last else None
    if w is None:  # a middle stage adds nothing
        grad = sitp.zeros(V, C, dtype=next(stage.parameters()).dtype)
    else:
        if w.grad is None:
            w.grad = sitp.zeros_like(w)
        grad = w.grad
    dist.all_reduce(grad, group=group)


# --8<-- [end:pipeline]
