"""Inference with a KV cache (chapter 5.4): prefill a prompt, then decode token by token.

A GPT's forward pass over T positions costs T positions' work in every layer.
Sampling N tokens by rerunning the model on the whole sequence each time
(:func:`sitp.models.sampling.generate`) therefore reads the prompt N times over.
The keys and values of a position never change once it is read (attention is
causal), so :class:`Engine` keeps them in the model's :class:`~sitp.models.gpt.KVCache`:
one forward pass over the prompt fills it (the *prefill*), and every later step
feeds only the token just drawn (the *decode*).

On top of that loop, what a serving engine adds: prompts of different lengths in one
batch (left-padded, each sequence with positions of its own), many samples from one
prefill (the cache copied), top-p and min-p sampling, speculative decoding with a
small draft model whose proposals the model checks in one pass, and tool calls: a row
that writes a tool's closing token is fed the tool's answer as its next tokens
(``stream(..., tool=...)``, chapter 8.2).

The model must be in eval mode (no dropout) and offer ``make_kv_cache(batch_size,
padding=None)`` and ``forward(idx, kv_cache=...)``, as :class:`sitp.models.gpt.GPT` does.
The cache never grows past ``block_size``: the engine refuses a prompt and a token count
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
def sampling_probs(logits_BV, temperature=1.0, top_k=None, top_p=None, min_p=None):
    """The distribution a token is drawn from, (B, V): the logits' softmax, filtered.

    ``temperature`` divides the logits (0: all the mass on the most likely token);
    then ``top_k`` keeps the k most likely tokens (and any tied with the k-th),
    ``top_p`` the fewest most likely ones whose probabilities reach p (the *nucleus*;
    tokens tied with the last one it needs are kept too), ``min_p`` those at least
    ``min_p`` times as likely as the most likely one. What is kept is renormalised.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0: greedy), got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if min_p is not None and not 0.0 <= min_p <= 1.0:
        raise ValueError(f"min_p must be in [0, 1], got {min_p}")
    V = logits_BV.size(-1)
    if temperature == 0:
        return F.one_hot(logits_BV.argmax(dim=-1), V).to(logits_BV.dtype)
    if temperature != 1.0:
        logits_BV = logits_BV / temperature
    if top_k is not None and top_k < V:  # the k largest; the k-th is the threshold
        v_BK, _ = torch.topk(logits_BV, top_k)
        logits_BV = logits_BV.masked_fill(logits_BV < v_BK[:, -1:], float("-inf"))
    probs_BV = F.softmax(logits_BV, dim=-1)
    if top_p is not None and top_p < 1.0:  # the tokens at or above the nucleus's floor
        probs_BV = probs_BV.masked_fill(probs_BV < nucleus_floor(probs_BV, top_p), 0.0)
    if min_p is not None and min_p > 0.0:
        p_max_B1 = probs_BV.amax(dim=-1, keepdim=True)
        probs_BV = probs_BV.masked_fill(probs_BV < min_p * p_max_B1, 0.0)
    if top_p is not None or min_p is not None:
        probs_BV = probs_BV / probs_BV.sum(dim=-1, keepdim=True)
    return probs_BV


def nucleus_floor(p_BV, top_p):
    """For each row, the least probability that top-p keeps: (B, 1).

    Sorted from the most likely down, a token is in the nucleus when the tokens before it
    add up to less than ``top_p`` (the most likely always is). The floor is the last such
    token's probability; keeping every token at or above it also keeps the tokens tied
    with it.
    """
    p_sorted_BV, _ = torch.sort(p_BV, dim=-1, descending=True)
    before_BV = torch.cumsum(p_sorted_BV, dim=-1) - p_sorted_BV  # the mass before each
    n_keep_B1 = (before_BV < top_p).sum(dim=-1, keepdim=True)  # at least 1: before is 0
    return p_sorted_BV.gather(-1, n_keep_B1 - 1)


def sample_next(logits_BV, temperature=1.0, top_k=None, generator=None, top_p=None, min_p=None):
    """Draws one token per row from logits of shape (B, V); returns (B, 1) int64.

    The filters are :func:`sampling_probs`'s; temperature 0 takes the most likely
    token without a draw.
    """
    probs_BV = sampling_probs(logits_BV, temperature, top_k, top_p, min_p)
    if temperature == 0:
        return logits_BV.argmax(dim=-1, keepdim=True)
    return torch.multinomial(probs_BV, num_samples=1, generator=generator)


# --8<-- [end:sample]


def left_pad(prompts):
    """Prompts of different lengths (lists of ints) as one (B, T) tensor, padded at the left.

    Returns the tensor and each row's number of pad slots. The pads are token 0; the
    cache's padding hides them from every query.
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    T = max(len(p) for p in prompts)
    pad = [T - len(p) for p in prompts]
    return torch.tensor([[0] * n + list(p) for n, p in zip(pad, prompts)]), pad


def transpose_weights(model):
    """Stores every Linear's weight transposed: the same (out, in) values, column-major.

    A decode step multiplies one row x by W^T for each weight W. Stored as trained, row
    by row, W^T is read down its columns, a stride of ``in`` floats from one number to
    the next; stored transposed, the product reads W^T row by row, in the order memory
    holds it. Values, shapes and the Parameter objects stay the same (an optimizer that
    holds them still works), so this is for a model that will serve rather than train:
    a training step's products prefer the layout they were given. Returns the model.
    """
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.data = module.weight.data.t().contiguous().t()
    return model


# --8<-- [start:engine]
class Engine:
    """Prefill once, then decode one token per step with the model's KV cache."""

    def __init__(self, model):
        self.model = model

    def stream(
        self,
        idx_BT,
        max_new_tokens,
        temperature=1.0,
        top_k=None,
        generator=None,
        use_cache=True,
        top_p=None,
        min_p=None,
        num_samples=1,
        tool=None,
    ):
        """Yields ``(next_B1, logits_BV)`` for each new token, and the logits it came from.

        ``idx_BT`` is a (B, T) tensor, or a list of B prompts of different lengths
        (lists of token ids), which are left-padded into one batch. ``num_samples``
        draws that many continuations of each prompt from one prefill: the cache is
        copied, and rows ``b * num_samples ... (b + 1) * num_samples - 1`` continue
        prompt ``b``. With ``use_cache=False`` every step reruns the model on the
        whole sequence (the reference the cache must agree with, and the baseline of
        the benchmark).

        ``tool``, if given, has an ``end_id`` and is called as ``tool(ids)`` with a row's
        new tokens so far when the last of them is ``end_id`` (the close of a call); the
        ids it returns are that row's next tokens, fed one a step in place of the model's
        draws, while the other rows decode on (:meth:`use_tool`). They count among the
        ``max_new_tokens``, and a row whose last token was forced yields the logits the
        model had there, not those of the forced token.
        """
        pad = None
        if not torch.is_tensor(idx_BT):
            idx_BT, pad = left_pad(idx_BT)
        B, T = idx_BT.size()
        need = T + max_new_tokens - 1  # positions read: the last token is never fed back
        if need > self.model.block_size:
            raise ValueError(
                f"a prompt of {T} tokens and {max_new_tokens} new ones need {need} positions, "
                f"more than block_size {self.model.block_size}"
            )
        if not use_cache and (num_samples != 1 or (pad is not None and any(pad))):
            raise ValueError("use_cache=False takes prompts of one length and num_samples=1")
        draw = dict(temperature=temperature, top_k=top_k, generator=generator, top_p=top_p,
                    min_p=min_p)  # fmt: skip
        with torch.no_grad():
            cache = self.model.make_kv_cache(B, padding=pad) if use_cache else None
            logits_BV = self.model(idx_BT, kv_cache=cache)[0][:, -1, :]  # the prefill
            if num_samples > 1:  # one prefill, its keys and values copied for each sample
                cache = cache.repeat_interleave(num_samples)
                logits_BV = logits_BV[[b for b in range(B) for _ in range(num_samples)]]
        rows = B * num_samples
        made, queued = [[] for _ in range(rows)], [[] for _ in range(rows)]  # for the tool
        for step in range(max_new_tokens):
            with torch.no_grad():
                next_B1 = sample_next(logits_BV, **draw)
            if tool is not None:
                next_B1 = self.use_tool(tool, next_B1, made, queued)
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
        """``idx_BT`` (B, T) extended by ``max_new_tokens`` tokens: (B * num_samples, T + N).

        For a list of prompts, a list of B * num_samples lists: each prompt and its
        continuation, without pads.
        """
        new_BN = torch.cat([n for n, _ in self.stream(idx_BT, max_new_tokens, **kwargs)], dim=1)
        n = kwargs.get("num_samples", 1)
        if torch.is_tensor(idx_BT):
            rows = [b for b in range(idx_BT.size(0)) for _ in range(n)]
            return torch.cat([idx_BT[rows], new_BN], dim=1)
        return [list(idx_BT[i // n]) + new for i, new in enumerate(new_BN.tolist())]

    # --8<-- [end:engine]

    # --8<-- [start:tool]
    @staticmethod
    def use_tool(tool, next_B1, made, queued):
        """The tokens each row takes this step: its queued tool output first, else its draw.

        ``made[b]`` holds row b's new tokens so far and ``queued[b]`` what the tool has
        still to feed it; a drawn ``tool.end_id`` runs the tool on ``made[b]``. The rows
        stay in one batch: every row takes exactly one token a step, so the KV cache
        needs nothing new; a forced token goes through the model like a drawn one.
        """
        tokens = next_B1.view(-1).tolist()
        for b, drawn in enumerate(tokens):
            if queued[b]:
                tokens[b] = queued[b].pop(0)  # the tool's, not the model's
                made[b].append(tokens[b])
                continue
            made[b].append(drawn)
            if drawn == tool.end_id:
                queued[b] = [int(i) for i in tool(made[b])]
        return torch.tensor(tokens, dtype=torch.int64).view(-1, 1)

    # --8<-- [end:tool]

    # --8<-- [start:speculative]
    def speculative(self, idx_1T, max_new_tokens, draft, k=4, temperature=1.0, top_k=None,
                    top_p=None, min_p=None, generator=None):  # fmt: skip
        """Speculative decoding: ``draft`` proposes ``k`` tokens, the model checks them at once.

        Each round the draft model decodes k tokens x_1..x_k from its distributions
        q_1..q_k; the model reads them in one pass over k + 1 positions, which gives its
        own distributions p_1..p_{k+1}. Token x_i is kept with probability
        min(1, p_i(x_i) / q_i(x_i)); at the first one refused, a token is drawn from
        max(0, p_i - q_i), renormalised, and the round ends; if all k are kept, one more
        comes from p_{k+1}. The tokens come out distributed exactly as the model's own
        samples (Leviathan et al. 2023; Chen et al. 2023), whatever the draft. Both
        caches are then set back to the last token kept.

        Args:
            idx_1T: (1, T) the prompt (one sequence).
            draft: a smaller model with the same vocabulary and the same interface.
            k: tokens proposed per round.

        Returns:
            ``(idx_1N, rounds)``: the prompt extended by ``max_new_tokens`` tokens, and
            for each round the pair (tokens proposed, tokens kept); the last rounds may
            propose fewer than k, not to pass ``max_new_tokens``.
        """
        B, T = idx_1T.size()
        if B != 1:
            raise ValueError(f"speculative decoding takes one sequence, got a batch of {B}")
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        room = min(self.model.block_size, draft.block_size)
        if T + max_new_tokens - 1 > room:
            raise ValueError(
                f"a prompt of {T} tokens and {max_new_tokens} new ones need "
                f"{T + max_new_tokens - 1} positions, more than block_size {room}"
            )
        probs = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
        cache, draft_cache = self.model.make_kv_cache(1), draft.make_kv_cache(1)
        out, rounds = [idx_1T], []
        with torch.no_grad():
            if T > 1:  # both caches hold the prompt but its last token, which each round feeds
                self.model(idx_1T[:, :-1], kv_cache=cache)
                draft(idx_1T[:, :-1], kv_cache=draft_cache)
            last_11, draft_in = idx_1T[:, -1:], idx_1T[:, -1:]
            left = max_new_tokens
            while left:
                n = min(k, left - 1)  # proposals this round: never more than are wanted
                x, q = [], []  # the draft's tokens (1, 1) and distributions (1, V)
                for _ in range(n):
                    q_1V = sampling_probs(draft(draft_in, kv_cache=draft_cache)[0][:, -1], **probs)
                    draft_in = torch.multinomial(q_1V, 1, generator=generator)
                    x.append(draft_in)
                    q.append(q_1V)
                p0 = cache.pos  # the model reads last and the n proposals: n + 1 positions
                logits_1NV = self.model(torch.cat([last_11] + x, dim=1), kv_cache=cache)[0]
                p_NV = sampling_probs(logits_1NV[0], **probs)  # (n + 1, V)
                j = n  # the number kept
                if n:
                    x_N1 = torch.cat(x, dim=1).view(n, 1)
                    q_NV = torch.cat(q, dim=0)
                    ratio_N = (p_NV[:n].gather(1, x_N1) / q_NV.gather(1, x_N1)).view(n)
                    u_N = torch.rand(n, generator=generator)
                    refused = (u_N >= ratio_N).tolist()
                    j = refused.index(True) if True in refused else n
                if j < n:  # the first refusal: draw from what p has beyond q
                    rest_1V = (p_NV[j] - q_NV[j]).clamp(min=0.0)[None]
                    t_11 = torch.multinomial(rest_1V / rest_1V.sum(), 1, generator=generator)
                else:  # all kept: one more from the model's last distribution
                    t_11 = torch.multinomial(p_NV[n][None], 1, generator=generator)
                out += x[:j] + [t_11]
                rounds.append((n, j))
                left -= j + 1
                cache.pos = p0 + 1 + j  # keep last and the j proposals kept
                if j < n:  # the draft read last and x_1..x_{n-1}: forget those refused
                    draft_cache.pos, draft_in = p0 + 1 + j, t_11
                else:  # it never read its last proposal (or, with n = 0, its input)
                    draft_in = torch.cat((x[-1:] if n else [draft_in]) + [t_11], dim=1)
                last_11 = t_11
        return torch.cat(out, dim=1), rounds

    # --8<-- [end:speculative]
