"""Evaluation on held-out problems (chapter 8.5): pass@1, pass@k and their intervals.

pass@k is the chance that at least one of k replies to a problem is correct. Drawing
exactly k replies per problem measures it with much noise; Chen et al. (2021, the
Codex paper) draw n ≥ k, count the c correct ones, and use the unbiased estimator

    pass@k = 1 - C(n - c, k) / C(n, k)

(the chance that a random k-subset of the n replies holds a correct one), averaged
over problems. :func:`pass_at_k` computes it as a product, free of huge binomials.

Intervals (95 % by default):

* one reply per problem (greedy, or n = 1): pass@1 is a binomial proportion over the
  problems, and the interval is Wilson's score interval (:func:`wilson_interval`),
  which stays inside [0, 1] and behaves at 0 and 1 correct;
* n replies per problem: the per-problem estimates are resampled over problems
  (a seeded percentile bootstrap, :func:`bootstrap_interval`).

Example:
    >>> pass_at_k(10, 3, 1), round(pass_at_k(10, 3, 5), 4), pass_at_k(10, 0, 5)
    (0.3, 0.9167, 0.0)
    >>> [round(x, 4) for x in wilson_interval(8, 10)]
    [0.4902, 0.9433]
"""

from __future__ import annotations

import math

import numpy as np

from sitp.posttrain.chat import completion_text, render_prompt
from sitp.posttrain.rl import greedy_replies, sample_group


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one problem from n replies of which c are correct."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def wilson_interval(successes: int, trials: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson's score interval for a binomial proportion (z = 1.96: 95 %)."""
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {successes}/{trials}")
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap_interval(values, level: float = 0.95, n_boot: int = 2000, seed: int = 0):
    """The percentile bootstrap interval of the mean of ``values`` (resampled with a
    seeded numpy generator)."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError("bootstrap_interval needs a non-empty 1-D sequence")
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, size=(n_boot, v.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def paired_test(before, after) -> dict:
    """McNemar's exact test of two models on the same problems (``before[i]``,
    ``after[i]``: whether each solved problem i).

    Only the problems on which they disagree carry evidence: ``gained`` (solved after,
    not before) and ``lost``. If neither model were better, each disagreement would go
    either way with probability 1/2, and ``p_value`` is the two-sided binomial tail of
    the split seen. It is sharper than comparing two intervals, which ignores that both
    models met the same problems.
    """
    if len(before) != len(after):
        raise ValueError(f"the two runs have {len(before)} and {len(after)} problems")
    gained = sum(1 for b, a in zip(before, after) if a and not b)
    lost = sum(1 for b, a in zip(before, after) if b and not a)
    n = gained + lost
    tail = sum(math.comb(n, k) for k in range(min(gained, lost) + 1)) / 2**n if n else 0.5
    return {"gained": gained, "lost": lost, "p_value": min(1.0, 2 * tail)}


def evaluate(model, tokenizer, task, problems, n_samples=1, ks=(1,), temperature=0.0,
             top_k=None, max_new_tokens=32, generator=None, seed=0, tool=None):  # fmt: skip
    """pass@k on ``problems`` of ``task`` with ``n_samples`` replies each.

    ``temperature=0`` is greedy (then ``n_samples`` must be 1; the problems are decoded
    in batches, :func:`~sitp.posttrain.rl.greedy_replies`). Returns a dict:
    ``problems``, ``samples``, ``correct`` (per problem), and for each k ``pass@k``
    with ``pass@k_ci`` (Wilson when ``n_samples == 1``, else the bootstrap).
    ``tool`` (a :class:`~sitp.posttrain.tools.Calculator`) lets the engine run the
    model's calls; the checker reads the reply's own text, calls and results left out.
    """
    if temperature == 0 and n_samples != 1:
        raise ValueError("greedy decoding gives one reply: use n_samples=1 or temperature > 0")
    if any(not 1 <= k <= n_samples for k in ks):
        raise ValueError(f"every k must be in 1..n_samples={n_samples}, got {list(ks)}")
    if not problems:
        raise ValueError("evaluate needs at least one problem")
    model.eval()
    correct, transcripts = [], []
    prompts = [render_prompt([{"role": "user", "content": task.prompt(p)}], tokenizer)
               for p in problems]  # fmt: skip
    stop = (tokenizer.assistant_end,)
    greedy = (greedy_replies(model, prompts, max_new_tokens, stop, tool=tool)
              if temperature == 0 else None)  # fmt: skip
    for n, (problem, prompt) in enumerate(zip(problems, prompts, strict=True)):
        if greedy is not None:
            replies = [greedy[n]]
        else:
            replies = sample_group(model, prompt, n_samples, max_new_tokens, temperature, top_k,
                                   stop, generator, tool)  # fmt: skip
        texts = [completion_text(r, tokenizer) for r in replies]
        correct.append(sum(task.check(problem, t) for t in texts))
        transcripts.append(texts[0])
    out = {"task": task.name, "problems": len(problems), "samples": n_samples,
           "correct": correct, "first_replies": transcripts}  # fmt: skip
    for k in ks:
        per_problem = [pass_at_k(n_samples, c, k) for c in correct]
        out[f"pass@{k}"] = float(np.mean(per_problem))
        if n_samples == 1:
            out[f"pass@{k}_ci"] = wilson_interval(sum(correct), len(correct))
        else:
            out[f"pass@{k}_ci"] = bootstrap_interval(per_problem, seed=seed)
    return out


__all__ = ["bootstrap_interval", "evaluate", "paired_test", "pass_at_k", "wilson_interval"]
