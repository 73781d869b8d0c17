"""Direct preference optimisation (chapter 8.4): the policy fitted to the pairs themselves.

RL against a reward model maximises ``E[r(x, y)] - β KL(π ‖ π_ref)``. That objective's
optimum is known in closed form, ``π*(y|x) ∝ π_ref(y|x) exp(r(x, y) / β)``, so a reward
can be written through the policy that it makes optimal:
``r(x, y) = β log(π(y|x) / π_ref(y|x)) + β log Z(x)``. Put that into the Bradley–Terry
likelihood of a pair and ``Z(x)`` cancels (Rafailov et al. 2023):

    L = -mean(log sigmoid(β [(log π(y_w) - log π_ref(y_w)) - (log π(y_l) - log π_ref(y_l))]))

with ``y_w`` the chosen reply, ``y_l`` the rejected one, and log π of a reply the sum of
its tokens' log-probs. No reward model, no sampling: a classification loss on the pairs,
with the frozen SFT model as ``π_ref``.

Example:
    >>> import sitp
    >>> zero = sitp.zeros(3)
    >>> round(dpo_loss(zero, zero, zero, zero, beta=0.1)[0].item(), 4)   # log 2: no margin yet
    0.6931
"""

from __future__ import annotations

import random

import numpy as np

from sitp._tensor.creation import tensor
from sitp.autograd.grad_mode import no_grad
from sitp.nn import functional as F
from sitp.optim import AdamW
from sitp.posttrain.rl import completion_logprobs


def sequence_logprobs(model, prompts, replies):
    """log π(reply | prompt) for each row (B,): the sum of the reply's token log-probs."""
    logp_BT, mask_BT = completion_logprobs(model, prompts, replies, 1.0)
    return (logp_BT * mask_BT).sum(-1)


def dpo_loss(pi_chosen_B, pi_rejected_B, ref_chosen_B, ref_rejected_B, beta=0.1):
    """The DPO loss and its statistics from the sequence log-probs of both models.

    Returns ``(loss, stats)``; stats holds ``accuracy`` (the share of pairs whose implicit
    reward ``β (log π - log π_ref)`` ranks the chosen reply first) and ``margin`` (the
    mean difference of the implicit rewards, chosen minus rejected).
    """
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    chosen_B = beta * (pi_chosen_B - ref_chosen_B)  # the implicit rewards
    rejected_B = beta * (pi_rejected_B - ref_rejected_B)
    margin_B = chosen_B - rejected_B
    loss = F.softplus(-margin_B).mean()  # -log sigmoid, with the right gradient at 0
    stats = {"accuracy": float((margin_B > 0).float().mean().item()),
             "margin": float(margin_B.mean().item())}  # fmt: skip
    return loss, stats


def pair_logprobs(model, pairs):
    """Sequence log-probs of the chosen and the rejected replies of ``pairs`` (prompt,
    chosen, rejected), in one forward pass: two tensors (B,)."""
    n = len(pairs)
    prompts = [p for p, _, _ in pairs] * 2
    replies = [c for _, c, _ in pairs] + [r for _, _, r in pairs]
    logp_2B = sequence_logprobs(model, prompts, replies)
    return logp_2B[:n], logp_2B[n:]


def train_dpo(model, ref_model, pairs, steps, batch_size=32, beta=0.1, lr=1e-4, seed=0,
              optimizer=None, rng=None):  # fmt: skip
    """Fits ``model`` to ``pairs`` by the DPO loss against the frozen ``ref_model``;
    returns each step's statistics (``loss``, ``accuracy``, ``margin``).

    The reference's log-probs of every pair are computed once, before the first step.
    Batches are drawn with a seeded :class:`random.Random` (or ``rng``, to resume).
    """
    if not pairs:
        raise ValueError("train_dpo needs at least one pair")
    if steps < 0 or batch_size < 1:
        raise ValueError(f"steps must be >= 0 and batch_size >= 1, got {steps}, {batch_size}")
    ref_model.eval()
    ref = []
    with no_grad():
        for lo in range(0, len(pairs), 128):
            c, r = pair_logprobs(ref_model, pairs[lo : lo + 128])
            ref += list(zip(c.tolist(), r.tolist(), strict=True))
    if optimizer is None:
        optimizer = AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    rng = random.Random(seed) if rng is None else rng
    model.eval()  # no dropout: π and π_ref read the pairs alike
    history = []
    for _ in range(steps):
        picks = [rng.randrange(len(pairs)) for _ in range(batch_size)]
        pi_c, pi_r = pair_logprobs(model, [pairs[i] for i in picks])
        ref_c = tensor(np.asarray([ref[i][0] for i in picks], dtype=np.float32))
        ref_r = tensor(np.asarray([ref[i][1] for i in picks], dtype=np.float32))
        loss, stats = dpo_loss(pi_c, pi_r, ref_c, ref_r, beta)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append({"loss": float(loss.item()), **stats})
    return history


__all__ = ["dpo_loss", "pair_logprobs", "sequence_logprobs", "train_dpo"]
