"""Inference with a KV cache (chapter 5.4): prefill a prompt, then decode token by token.

A GPT's forward pass over T positions costs T positions' work in every layer.
Sampling N tokens by rerunning the model on the whole sequence each time
(:func:`sitp.models.sampling.generate`) therefore reads the prompt N times over.
The keys and values of a position never change once it is read (attention is
causal), so :class:`Engine` keeps them in the model's :class:`~sitp.models.gpt.KVCache`:
one forward pass over the prompt fills it (the *prefill*), and every later step
feeds only the token just drawn (the *decode*).

The model must be in eval mode (no dropout) and offer ``make_kv_cache(batch_size)``
and ``forward(idx, kv_cache=...)``, as :class:`sitp.models.gpt.GPT` does. The cache
never grows past ``block_size``: the engine refuses a prompt and a token count
that would need more, rather than crop (cropping would shift every position and
need a new prefill).

This file is PyTorch code with ``sitp`` in its import lines (see :mod:`sitp.models.port`).

Example:
    >>> import sitp
    >>> from sitp.models.gpt import GPT, GPTConfig
    >>> from sitp.models.engine import Engine
    >>> _ = sitp.manual_seed(0)
    >>> model = GPT(GPTConfig(vocab_size=27, n_layer=2, n_embd=32, rope=True)).eval()
    >>> prompt_BT = sitp.tensor([[0, 5, 13]])
    >>> cached = Engine(model).generate(prompt_BT, 6, temperature=0.0)
    >>> full = Engine(model).generate(prompt_BT, 6, temperature=0.0, use_cache=False)
    >>> tuple(cached.shape), cached.tolist() == full.tolist()
    ((1, 9), True)
"""

import sitp as torch
from sitp.nn import functional as F


# --8<-- [start:sample]
def sample_next(logits_BV, temperature=1.0, top_k=None, generator=None):
    """Draws one token per row from logits of shape (B, V); returns (B, 1) int64.

    ``temperature`` divides the logits (0: the most likely token, no draw);
    ``top_k`` keeps only the k largest before the softmax.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0: greedy), got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    if temperature == 0:
        return logits_BV.argmax(dim=-1, keepdim=True)
    logits_BV = logits_BV / temperature
    if top_k is not None:
        v_BK, _ = torch.topk(logits_BV, min(top_k, logits_BV.size(-1)))
        logits_BV = logits_BV.masked_fill(logits_BV < v_BK[:, -1:], float("-inf"))
    probs_BV = F.softmax(logits_BV, dim=-1)
    return torch.multinomial(probs_BV, num_samples=1, generator=generator)


# --8<-- [end:sample]


# --8<-- [start:engine]
class Engine:
    """Prefill once, then decode one token per step with the model's KV cache."""

    def __init__(self, model):
        self.model = model

    def stream(
        self, idx_BT, max_new_tokens, temperature=1.0, top_k=None, generator=None, use_cache=True
    ):
        """Yields ``(next_B1, logits_BV)`` for each new token, and the logits it came from.

        With ``use_cache=False`` every step reruns the model on the whole sequence
        (the reference the cache must agree with, and the baseline of the benchmark).
        """
        B, T = idx_BT.size()
        need = T + max_new_tokens - 1  # positions read: the last token is never fed back
        if need > self.model.block_size:
            raise ValueError(
                f"a prompt of {T} tokens and {max_new_tokens} new ones need {need} positions, "
                f"more than block_size {self.model.block_size}"
            )
        cache = self.model.make_kv_cache(B) if use_cache else None
        with torch.no_grad():
            logits_BV = self.model(idx_BT, kv_cache=cache)[0][:, -1, :]  # the prefill
        for step in range(max_new_tokens):
            with torch.no_grad():
                next_B1 = sample_next(logits_BV, temperature, top_k, generator)
            yield next_B1, logits_BV
            if step == max_new_tokens - 1:
                break
            with torch.no_grad():
                if use_cache:  # one position: its q attends to the cached k, v
                    logits_BV = self.model(next_B1, kv_cache=cache)[0][:, -1, :]
                else:  # the whole sequence again
                    idx_BT = torch.cat((idx_BT, next_B1), dim=1)
                    logits_BV = self.model(idx_BT)[0][:, -1, :]

    def generate(self, idx_BT, max_new_tokens, **kwargs):
        """``idx_BT`` (B, T) extended by ``max_new_tokens`` tokens: (B, T + max_new_tokens)."""
        new = [next_B1 for next_B1, _ in self.stream(idx_BT, max_new_tokens, **kwargs)]
        return torch.cat([idx_BT] + new, dim=1)


# --8<-- [end:engine]
