"""A reward model learned from preferences (chapter 8.4): Bradley–Terry on pairs.

The Bradley–Terry model says that a reply with score ``r_a`` is preferred to one with
``r_b`` with probability ``sigmoid(r_a - r_b)``: only differences of scores matter. A
reward model is a network that gives the score; fitted by maximum likelihood on
pairs (chosen, rejected), its loss is

    L = -mean(log sigmoid(r(x, y_chosen) - r(x, y_rejected))).

:class:`RewardModel` is the fine-tuned GPT with its language-model head set aside and a
scalar head read at the last token of prompt + reply (the reply's end token, which has
read the whole conversation), as InstructGPT built its reward model from the SFT model.

Example:
    >>> import sitp
    >>> bradley_terry_loss(sitp.tensor([2.0, 0.0]), sitp.tensor([0.0, 0.0])).item() > 0
    True
"""

from __future__ import annotations

import random

import numpy as np

import sitp.nn as nn
from sitp._tensor.creation import tensor
from sitp.autograd.grad_mode import no_grad
from sitp.dtypes import int64
from sitp.nn import functional as F
from sitp.optim import AdamW


class RewardModel(nn.Module):
    """A GPT's body and a scalar head: ``forward(idx_BT, last_B) -> rewards_B``.

    Args:
        gpt: a :class:`~sitp.models.gpt.GPT` (its weights are trained with the head; pass
            a copy to keep the original).
    """

    def __init__(self, gpt):
        super().__init__()
        self.gpt = gpt
        self.head = nn.Linear(gpt.config.n_embd, 1)
        nn.init.zeros_(self.head.weight)  # every reply starts at the same score, 0
        nn.init.zeros_(self.head.bias)

    def hidden(self, idx_BT):
        """The GPT's last hidden states (B, T, C): its forward pass up to ``ln_f``."""
        g = self.gpt
        T = idx_BT.size(1)
        x_BTC = g.transformer.wte(idx_BT)
        rope = None
        if g.config.rope:
            rope = g.rope_cos[:T], g.rope_sin[:T]
        else:
            x_BTC = x_BTC + g.transformer.wpe(tensor(list(range(T)), dtype=int64))
        for block in g.transformer.h:
            x_BTC = block(x_BTC, rope)
        return g.transformer.ln_f(x_BTC)

    def forward(self, idx_BT, last_B):
        """The score of each row read at its position ``last_B[b]``."""
        B, T = idx_BT.size()
        pick = np.zeros((B, T, 1), dtype=np.float32)
        pick[np.arange(B), np.asarray(last_B), 0] = 1.0
        x_BC = (self.hidden(idx_BT) * tensor(pick)).sum(1)  # the row's last hidden state
        return self.head(x_BC).squeeze(-1)


def score(rm, prompts, replies):
    """The reward model's scores (B,) of ``prompts[b] + replies[b]`` (lists of ids),
    right-padded into one batch. A reply that the sampler cut at the block's end
    (``block_size + 1`` tokens with its prompt) is read without its last token."""
    block = rm.gpt.block_size
    seqs = [list(p) + list(r) for p, r in zip(prompts, replies, strict=True)]
    if any(len(s) > block + 1 for s in seqs):
        raise ValueError(f"a prompt and its reply are longer than block_size {block} + 1")
    seqs = [s[:block] for s in seqs]
    T = max(len(s) for s in seqs)
    idx = [s + [0] * (T - len(s)) for s in seqs]
    return rm(tensor(idx, dtype=int64), [len(s) - 1 for s in seqs])


def bradley_terry_loss(r_chosen_B, r_rejected_B):
    """``-mean(log sigmoid(r_chosen - r_rejected))``: the pairs' negative log-likelihood.

    Written as ``softplus(-(r_chosen - r_rejected))``, which is ``-logsigmoid`` of the
    margin: at a tie the gradient is -1/2 for the chosen score."""
    return F.softplus(r_rejected_B - r_chosen_B).mean()


def pair_scores(rm, pairs):
    """The scores of the chosen and of the rejected replies of ``pairs`` (prompt, chosen,
    rejected), in one forward pass: two tensors (B,)."""
    n = len(pairs)
    prompts = [p for p, _, _ in pairs] * 2
    replies = [c for _, c, _ in pairs] + [r for _, _, r in pairs]
    r_2B = score(rm, prompts, replies)
    return r_2B[:n], r_2B[n:]


def train_reward_model(rm, pairs, steps, batch_size=32, lr=1e-3, seed=0, optimizer=None,
                       rng=None):  # fmt: skip
    """Fits ``rm`` to ``pairs`` by the Bradley–Terry loss; returns the losses and
    accuracies (the share of the batch's pairs ranked right) of each step.

    Each step draws ``batch_size`` pairs with a seeded :class:`random.Random` (or ``rng``,
    to resume), as :func:`~sitp.posttrain.sft.sft` draws its batches.
    """
    if not pairs:
        raise ValueError("train_reward_model needs at least one pair")
    if steps < 0 or batch_size < 1:
        raise ValueError(f"steps must be >= 0 and batch_size >= 1, got {steps}, {batch_size}")
    if optimizer is None:
        optimizer = AdamW(rm.parameters(), lr=lr, weight_decay=0.0)
    rng = random.Random(seed) if rng is None else rng
    rm.eval()  # no dropout: the scores of a pair are those the RL step will read
    losses, accs = [], []
    for _ in range(steps):
        batch = [pairs[rng.randrange(len(pairs))] for _ in range(batch_size)]
        r_c, r_r = pair_scores(rm, batch)
        loss = bradley_terry_loss(r_c, r_r)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.item()))
        accs.append(float(((r_c - r_r) > 0).float().mean().item()))
    return losses, accs


def pair_accuracy(rm, pairs, batch_size=128) -> float:
    """The share of ``pairs`` whose chosen reply the reward model scores higher."""
    right = 0
    with no_grad():
        for lo in range(0, len(pairs), batch_size):
            r_c, r_r = pair_scores(rm, pairs[lo : lo + batch_size])
            right += int(((r_c - r_r) > 0).float().sum().item())
    return right / len(pairs)


def batch_scores(rm, prompts, replies, batch_size=128) -> list[float]:
    """The reward model's scores of many (prompt, reply) pairs, without gradients."""
    out = []
    with no_grad():
        for lo in range(0, len(prompts), batch_size):
            out += score(rm, prompts[lo : lo + batch_size], replies[lo : lo + batch_size]).tolist()
    return out


__all__ = [
    "RewardModel",
    "batch_scores",
    "bradley_terry_loss",
    "pair_accuracy",
    "pair_scores",
    "score",
    "train_reward_model",
]
