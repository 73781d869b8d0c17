"""Supervised fine-tuning (chapter 8.3): next-token loss on the assistant's tokens only.

A rendered conversation ``ids`` of length N gives N - 1 training positions: input
``ids[t]``, target ``ids[t + 1]``. The target counts when its mask is 1 (the
assistant wrote it); every other target becomes :data:`IGNORE` (-1), which the
GPT's cross-entropy skips (``ignore_index=-1``), so the loss is the mean over the
assistant's tokens of the batch. Shorter conversations are padded to the longest
of the batch with the ``<|bos|>`` id as input and :data:`IGNORE` as target.

Example:
    >>> from sitp.data.tokens import ByteTokenizer
    >>> from sitp.posttrain.chat import ChatTokenizer, render
    >>> tok = ChatTokenizer(ByteTokenizer())
    >>> convo = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    >>> idx_BT, targets_BT = collate([render(convo, tok)], pad_id=tok.bos, block_size=16)
    >>> targets_BT.tolist()
    [[-1, -1, -1, -1, -1, 111, 107, 260]]
"""

from __future__ import annotations

import random

from sitp._tensor.creation import tensor
from sitp.dtypes import int64
from sitp.nn import functional as F
from sitp.optim import AdamW
from sitp.posttrain.chat import render

IGNORE = -1


def collate(rendered, pad_id: int, block_size: int):
    """(inputs, targets), both (B, T) int64, from ``(ids, mask)`` pairs.

    T is the longest conversation's length less one. Raises ValueError when a
    conversation is longer than ``block_size + 1`` tokens (the model could not read it)
    or has no assistant token to learn.
    """
    if not rendered:
        raise ValueError("collate needs at least one conversation")
    rows = []
    for n, (ids, mask) in enumerate(rendered):
        if len(ids) != len(mask):
            raise ValueError(f"conversation {n}: {len(ids)} ids but {len(mask)} mask entries")
        if len(ids) - 1 > block_size:
            raise ValueError(
                f"conversation {n} has {len(ids)} tokens, more than block_size {block_size} + 1"
            )
        if not any(mask[1:]):
            raise ValueError(f"conversation {n} has no assistant token to train on")
        inputs = list(ids[:-1])
        targets = [t if m else IGNORE for t, m in zip(ids[1:], mask[1:])]
        rows.append((inputs, targets))
    T = max(len(inputs) for inputs, _ in rows)
    idx = [inputs + [pad_id] * (T - len(inputs)) for inputs, _ in rows]
    tgt = [targets + [IGNORE] * (T - len(targets)) for _, targets in rows]
    return tensor(idx, dtype=int64), tensor(tgt, dtype=int64)


def masked_loss(logits_BTV, targets_BT):
    """The mean cross-entropy over the targets that are not :data:`IGNORE`."""
    V = logits_BTV.size(-1)
    return F.cross_entropy(logits_BTV.reshape(-1, V), targets_BT.reshape(-1), ignore_index=IGNORE)


def sft(
    model,
    conversations,
    tokenizer,
    steps: int,
    lr: float = 1e-3,
    batch_size: int = 8,
    weight_decay: float = 0.0,
    seed: int = 0,
    optimizer=None,
    on_step=None,
    rng: random.Random | None = None,
):
    """Fine-tunes ``model`` on ``conversations`` for ``steps`` AdamW steps; returns the losses.

    Each step draws ``batch_size`` conversations at random (a seeded
    :class:`random.Random`); ``on_step(step, loss)``, if given, is called after each.
    ``optimizer`` defaults to AdamW over all the parameters; pass it, and ``rng`` (the
    :class:`random.Random` that draws the batches, used instead of ``seed``), to resume.
    """
    if steps < 0 or batch_size < 1:
        raise ValueError(f"steps must be >= 0 and batch_size >= 1, got {steps}, {batch_size}")
    rendered = [render(c, tokenizer) for c in conversations]
    if not rendered:
        raise ValueError("sft needs at least one conversation")
    too_long = [n for n, (ids, _) in enumerate(rendered) if len(ids) - 1 > model.block_size]
    if too_long:
        raise ValueError(
            f"{len(too_long)} conversations (the first: {too_long[0]}) are longer than the "
            f"model's block_size {model.block_size} + 1 tokens"
        )
    if optimizer is None:
        optimizer = AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    rng = random.Random(seed) if rng is None else rng
    model.train()
    losses = []
    for step in range(steps):
        batch = [rendered[rng.randrange(len(rendered))] for _ in range(batch_size)]
        idx_BT, targets_BT = collate(batch, tokenizer.bos, model.block_size)
        logits_BTV, _ = model(idx_BT)
        loss = masked_loss(logits_BTV, targets_BT)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.item()))
        if on_step is not None:
            on_step(step, losses[-1])
    model.eval()
    return losses


__all__ = ["IGNORE", "collate", "masked_loss", "sft"]
