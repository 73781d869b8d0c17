"""Reinforcement learning with verifiable rewards (chapter 8.3): GRPO.

One step of Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath):

1. for each prompt, sample a group of G replies through the KV-cache
   :class:`~sitp.models.engine.Engine` at a temperature T > 0;
2. reward each reply (here: 1 when the task's checker accepts it, else 0);
3. the advantage of reply i of a group is ``(r_i - mean(r)) / (std(r) + eps)``, with
   the group's population standard deviation (ddof 0): better than its siblings is
   positive, worse is negative; a group whose rewards are all equal teaches nothing
   (every advantage is 0);
4. minimise, over every reply token t (by default the token-level mean over all the
   completion tokens of the batch; ``norm="sequence"`` takes a mean per reply, then over
   the replies, as the GRPO paper writes it),

   ``-min(ρ_t A, clip(ρ_t, 1 - ε, 1 + ε) A) + β k3_t``,

   where ``ρ_t = π(y_t) / π_old(y_t)`` is the ratio of the policy being updated to
   the policy that sampled (PPO's clip: one reply cannot move the policy far), and
   ``k3_t = exp(q_t) - q_t - 1`` with ``q_t = log π_ref(y_t) - log π(y_t)`` is Schulman's
   k3 estimator of KL(π ‖ π_ref) to a frozen reference model (the SFT model): non-negative,
   unbiased for tokens drawn from π.

The policy's probabilities are those of the sampling distribution: logits divided by
the temperature. The model is kept in eval mode (no dropout), so that the log-probs of
the first update equal the sampler's and the ratio starts at exactly 1. With
``epochs > 1`` the same samples are reused for more updates and the clip matters; with
``epochs=1`` and ``kl_coef=0`` neither the clip nor the penalty acts, and the step is
REINFORCE with a group baseline.

Example:
    >>> group_advantages([1.0, 0.0, 0.0, 1.0]).round(4).tolist()
    [1.0, -1.0, -1.0, 1.0]
    >>> group_advantages([1.0, 1.0, 1.0]).tolist()   # all equal: nothing to learn
    [0.0, 0.0, 0.0]
"""

from __future__ import annotations

import numpy as np

from sitp._tensor.creation import tensor
from sitp.autograd.grad_mode import no_grad
from sitp.dtypes import int64
from sitp.functional import minimum
from sitp.models.engine import Engine
from sitp.nn import functional as F


def group_advantages(rewards, eps: float = 1e-6) -> np.ndarray:
    """``(r - mean(r)) / (std(r) + eps)`` over one group's rewards (population std)."""
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"rewards must be a non-empty 1-D sequence, got shape {r.shape}")
    return (r - r.mean()) / (r.std() + eps)


def sample_group(model, prompt, group_size, max_new_tokens, temperature=1.0, top_k=None,
                 stop_ids=(), generator=None, tool=None):  # fmt: skip
    """``group_size`` replies to ``prompt`` (a list of ids), each cut after its first
    stop token (which it keeps). At most ``block_size - len(prompt) + 1`` new tokens;
    ``temperature=0`` is greedy decoding (every reply the same). ``tool``: the engine's
    tool hook (:class:`~sitp.posttrain.tools.Calculator`), whose tokens the replies hold."""
    n = min(max_new_tokens, model.block_size - len(prompt) + 1)
    if n < 1:
        raise ValueError(
            f"a prompt of {len(prompt)} tokens leaves no room in block_size {model.block_size}"
        )
    prompt_BT = tensor([list(prompt)] * group_size, dtype=int64)
    steps = [next_B1.reshape(-1).tolist() for next_B1, _ in
             Engine(model).stream(prompt_BT, n, temperature, top_k, generator,
                                  tool=tool)]  # fmt: skip
    stops, replies = set(stop_ids), []
    for g in range(group_size):
        reply = []
        for tokens in steps:
            reply.append(int(tokens[g]))
            if reply[-1] in stops:
                break
        replies.append(reply)
    return replies


def sample_replies(model, prompts, max_new_tokens, temperature=1.0, top_k=None, stop_ids=(),
                   generator=None, batch_size=64, tool=None):  # fmt: skip
    """One reply to each prompt (lists of ids), each cut after its first stop token.

    The prompts of one length are decoded together, up to ``batch_size`` rows at once,
    and a batch stops as soon as every row has written a stop token: a group of G
    replies to a prompt is that prompt repeated G times. ``temperature=0`` is greedy
    decoding; otherwise each row draws from softmax(logits / temperature) with
    ``generator``. ``tool``: as :func:`sample_group`'s.
    """
    replies = [None] * len(prompts)
    by_length = {}
    for i, prompt in enumerate(prompts):
        by_length.setdefault(len(prompt), []).append(i)
    stops = set(stop_ids)
    for length, rows in sorted(by_length.items()):
        n = min(max_new_tokens, model.block_size - length + 1)
        if n < 1:
            raise ValueError(
                f"a prompt of {length} tokens leaves no room in block_size {model.block_size}"
            )
        for lo in range(0, len(rows), batch_size):
            chunk = rows[lo : lo + batch_size]
            out = {i: [] for i in chunk}
            open_rows = set(chunk)
            prompt_BT = tensor([list(prompts[i]) for i in chunk], dtype=int64)
            stream = Engine(model).stream(prompt_BT, n, temperature, top_k, generator, tool=tool)
            for next_B1, _ in stream:
                for i, token in zip(chunk, next_B1.reshape(-1).tolist(), strict=True):
                    if i in open_rows:
                        out[i].append(int(token))
                        if token in stops:
                            open_rows.discard(i)
                if not open_rows:
                    break
            for i in chunk:
                replies[i] = out[i]
    return replies


def greedy_replies(model, prompts, max_new_tokens, stop_ids=(), batch_size=64, tool=None):
    """The greedy reply to each prompt (lists of ids), each cut after its first stop token.

    The same replies as ``sample_group(model, prompt, 1, ..., temperature=0)`` one prompt
    at a time, decoded in batches (:func:`sample_replies` at temperature 0).
    """
    return sample_replies(
        model, prompts, max_new_tokens, 0.0, None, stop_ids, None, batch_size, tool
    )


def completion_logprobs(model, prompts, replies, temperature=1.0, entropy=False):
    """The log-probs (B, T) of each reply's tokens after its prompt, and their mask.

    Row b is ``prompts[b] + replies[b]`` (right-padded); position t holds
    log π(token t + 1 | tokens ≤ t) with π the softmax of logits / temperature, and the
    mask is 1 exactly where token t + 1 belongs to the reply. With ``entropy=True`` a
    third tensor (B, T) holds the entropy of π at each position, in nats.
    """
    seqs = [list(p) + list(r) for p, r in zip(prompts, replies, strict=True)]
    T = max(len(s) for s in seqs) - 1
    if T > model.block_size:
        raise ValueError(f"a prompt and its reply need {T} positions > block_size")
    idx = [s[:-1] + [0] * (T - len(s) + 1) for s in seqs]
    nxt = [s[1:] + [0] * (T - len(s) + 1) for s in seqs]
    mask = np.zeros((len(seqs), T), dtype=np.float32)
    for b, (p, r) in enumerate(zip(prompts, replies, strict=True)):
        mask[b, len(p) - 1 : len(p) - 1 + len(r)] = 1.0
    logits_BTV, _ = model(tensor(idx, dtype=int64))
    logp_BTV = F.log_softmax(logits_BTV / temperature, dim=-1)
    logp_BT = logp_BTV.gather(-1, tensor(nxt, dtype=int64).unsqueeze(-1)).squeeze(-1)
    if entropy:
        return logp_BT, tensor(mask), -(logp_BTV.exp() * logp_BTV).sum(-1)
    return logp_BT, tensor(mask)


#: How :func:`grpo_loss` averages the per-token terms.
NORMS = ("token", "sequence")


def grpo_loss(logp_BT, old_logp_BT, adv_B, mask_BT, clip_eps=0.2, ref_logp_BT=None,
              kl_coef=0.0, norm="token"):  # fmt: skip
    """The GRPO objective (to minimise) and its statistics.

    Returns ``(loss, stats)``: the mean over ``mask_BT`` of the clipped policy-gradient
    term plus ``kl_coef`` times k3. ``norm="token"`` takes the mean over all the reply
    tokens of the batch (a long reply weighs as many tokens as it has);
    ``norm="sequence"`` takes each reply's mean over its tokens, then the mean over the
    replies (every reply weighs the same, as in the GRPO paper). stats holds ``kl`` (the
    mean k3 per token, 0 without a reference) and ``clip_frac`` (the share of reply tokens
    whose ratio is outside [1 - ε, 1 + ε]).
    """
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    count = mask_BT.sum()
    if float(count.item()) == 0:
        raise ValueError("grpo_loss: the mask selects no reply token")
    adv_B1 = adv_B.reshape(-1, 1)
    ratio_BT = (logp_BT - old_logp_BT).exp()
    clipped_BT = ratio_BT.clamp(1.0 - clip_eps, 1.0 + clip_eps)
    per_token = -minimum(ratio_BT * adv_B1, clipped_BT * adv_B1)
    kl = 0.0
    if ref_logp_BT is not None:
        q_BT = ref_logp_BT - logp_BT
        k3_BT = q_BT.exp() - q_BT - 1.0
        kl = float(((k3_BT * mask_BT).sum() / count).item())
        if kl_coef:
            per_token = per_token + kl_coef * k3_BT
    if norm == "token":
        loss = (per_token * mask_BT).sum() / count
    else:
        lengths_B = mask_BT.sum(-1)
        if float(lengths_B.min().item()) == 0:
            raise ValueError("grpo_loss: norm='sequence' needs every reply to have a token")
        loss = ((per_token * mask_BT).sum(-1) / lengths_B).mean()
    outside = ((ratio_BT - 1.0).abs() > clip_eps).float()
    clip_frac = float(((outside * mask_BT).sum() / count).item())
    return loss, {"kl": kl, "clip_frac": clip_frac}


def grpo_step(model, optimizer, prompts, reward_fn=None, group_size=8, max_new_tokens=16,
              temperature=1.0, top_k=None, clip_eps=0.2, kl_coef=0.0, ref_model=None,
              epochs=1, stop_ids=(), generator=None, eps=1e-6, norm="token",
              reward_batch=None):  # fmt: skip
    """One GRPO step over ``prompts`` (lists of ids); returns its statistics.

    ``reward_fn(i, reply_ids) -> float`` rewards a reply to ``prompts[i]``; or
    ``reward_batch(indices, replies) -> floats`` rewards all the replies of the step at
    once (``indices[j]`` is the prompt of ``replies[j]``: a reward model scores them in
    one forward pass). All the groups are sampled together (:func:`sample_replies`). With
    ``ref_model`` the KL to it is measured (and penalised when ``kl_coef > 0``). The
    optimizer steps ``epochs`` times on the same samples; ``norm`` is :func:`grpo_loss`'s.

    Returns:
        dict with ``reward`` (the mean reward), ``kl`` and ``clip_frac`` (of the last
        epoch: the first epoch's ratios are all 1), ``loss`` (of the last epoch),
        ``entropy`` (the sampling distribution's mean entropy per reply token, in nats),
        ``tokens`` (reply tokens) and ``zero_groups`` (groups with equal rewards).
    """
    if temperature <= 0:
        raise ValueError(f"GRPO samples at a temperature > 0, got {temperature}")
    if group_size < 2:
        raise ValueError(f"a group needs at least 2 replies to compare, got {group_size}")
    if (reward_fn is None) == (reward_batch is None):
        raise ValueError("give exactly one of reward_fn and reward_batch")
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    model.eval()
    rows_i = [i for i in range(len(prompts)) for _ in range(group_size)]
    rows_p = [prompts[i] for i in rows_i]
    rows_r = sample_replies(model, rows_p, max_new_tokens, temperature, top_k, stop_ids,
                            generator, batch_size=len(rows_p))  # fmt: skip
    if reward_batch is not None:
        rewards = [float(r) for r in reward_batch(rows_i, rows_r)]
        if len(rewards) != len(rows_r):
            raise ValueError(f"reward_batch gave {len(rewards)} rewards for {len(rows_r)} replies")
    else:
        rewards = [float(reward_fn(i, reply)) for i, reply in zip(rows_i, rows_r, strict=True)]
    advantages, zero = [], 0
    for lo in range(0, len(rewards), group_size):
        adv = group_advantages(rewards[lo : lo + group_size], eps)
        zero += int(np.all(adv == 0))
        advantages += adv.tolist()
    adv_B = tensor(np.asarray(advantages, dtype=np.float32))
    with no_grad():
        old_logp_BT, mask_BT, entropy_BT = completion_logprobs(model, rows_p, rows_r,
                                                               temperature, entropy=True)  # fmt: skip
        ref_logp_BT = None
        if ref_model is not None:
            ref_model.eval()
            ref_logp_BT, _ = completion_logprobs(ref_model, rows_p, rows_r, temperature)
    count = mask_BT.sum()
    stats = {}
    for _ in range(epochs):
        logp_BT, _ = completion_logprobs(model, rows_p, rows_r, temperature)
        loss, stats = grpo_loss(logp_BT, old_logp_BT.detach(), adv_B, mask_BT, clip_eps,
                                ref_logp_BT, kl_coef, norm)  # fmt: skip
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        stats["loss"] = float(loss.item())
    stats.update(reward=float(np.mean(rewards)), tokens=int(count.item()), zero_groups=zero,
                 entropy=float(((entropy_BT * mask_BT).sum() / count).item()))  # fmt: skip
    return stats


__all__ = [
    "NORMS",
    "completion_logprobs",
    "greedy_replies",
    "group_advantages",
    "grpo_loss",
    "grpo_step",
    "sample_group",
    "sample_replies",
]
