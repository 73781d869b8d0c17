"""Sampling from a trained model: temperature, top-k, and whole names.

Works for every model of the ladder: a context-window model (bigram, MLP,
WaveNet) returns logits of shape (B, V) for its last ``block_size``
characters; a sequence model (RNN, GRU, GPT) returns (B, T, V), and the last
position's row is the next character's distribution.

This file is PyTorch code with ``sitp`` in its import lines (see
:mod:`sitp.models.port`).
"""

import sitp as torch
from sitp.nn import functional as F


# --8<-- [start:generate]
@torch.no_grad()
def generate(
    model, idx_BT, max_new_tokens, temperature=1.0, top_k=None, generator=None, fixed_context=False
):
    """Extends each row of ``idx_BT`` by ``max_new_tokens`` sampled tokens.

    Args:
        model: returns ``(logits, loss)`` from ``model(idx)``; has ``block_size``.
        idx_BT: (B, T) int64, the prompts.
        max_new_tokens: how many tokens to append.
        temperature: logits are divided by it; below 1 sharpens, above 1 flattens.
        top_k: keep only the k most likely tokens (None: all).
        generator: a Generator for reproducible draws.
        fixed_context: the model needs exactly ``block_size`` tokens (bigram, MLP,
            WaveNet); shorter prompts are left-padded with '.' (index 0), as the
            training windows are.

    Returns:
        (B, T + max_new_tokens) int64.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    block_size = model.block_size
    for _ in range(max_new_tokens):
        idx_cond = idx_BT if idx_BT.size(1) <= block_size else idx_BT[:, -block_size:]
        if fixed_context and idx_cond.size(1) < block_size:
            pad = torch.zeros((idx_cond.size(0), block_size - idx_cond.size(1)), dtype=torch.long)
            idx_cond = torch.cat([pad, idx_cond], dim=1)
        logits, _ = model(idx_cond)
        logits_BV = (logits[:, -1, :] if logits.ndim == 3 else logits) / temperature
        if top_k is not None:
            v_BK, _ = torch.topk(logits_BV, min(top_k, logits_BV.size(-1)))
            logits_BV = logits_BV.masked_fill(logits_BV < v_BK[:, -1:], float("-inf"))
        probs_BV = F.softmax(logits_BV, dim=-1)
        idx_next_B1 = torch.multinomial(probs_BV, num_samples=1, generator=generator)
        idx_BT = torch.cat((idx_BT, idx_next_B1), dim=1)
    return idx_BT


# --8<-- [end:generate]


def sample_names(
    model, itos, num, max_len=30, temperature=1.0, top_k=None, generator=None, fixed_context=False
):
    """Draws ``num`` names: start from '.', stop at the next '.' (or after ``max_len``).

    Args:
        model: a trained model (put in eval mode by the caller).
        itos: the vocabulary's list of characters, '.' at index 0.

    Returns:
        A list of ``num`` strings.
    """
    start_B1 = torch.zeros((num, 1), dtype=torch.long)
    idx = generate(model, start_B1, max_len + 1, temperature, top_k, generator, fixed_context)
    names = []
    for row in idx[:, 1:].tolist():
        row = row[: row.index(0)] if 0 in row else row[:max_len]
        names.append("".join(itos[i] for i in row))
    return names
