"""Preference data (chapter 8.4): replies in several styles, a hidden judge, and pairs.

A checker says whether an answer is right. Whether a reply is *good* (polite, but not
wordy; right, and said plainly) is a judgement that people make by comparing replies,
not a rule they write down. This module stages that situation on the generated tasks:

* :func:`styled` wraps a task's reference reply in one of :data:`PREFIXES` and one of
  :data:`SUFFIXES` ("Sure! ", " Thanks!", " :)", ...), drawn at random, so that a model
  fine-tuned on :func:`styled_conversations` writes every style;
* :func:`gold_utility` is the hidden judge, a number per reply: 4 for a right answer
  (the task's strict checker), 1 for politeness (a "Sure" or a "Thanks", counted once),
  and minus 0.05 per character. A right reply beats every wrong one; among right ones
  it prefers "Sure! 12" to "12", and "12" to "Sure! 12 Thanks!"'s extra words. The
  learners never read it: they see only which of two replies was preferred;
* :func:`label_pairs` plays the annotator: reply a is preferred to b with probability
  ``sigmoid((u_a - u_b) / temperature)``, the Bradley–Terry model of the judge, so close
  calls are noisy and clear ones are not;
* :func:`win_rate` compares two policies on held-out prompts by the judge: one sampled
  reply each, the share of prompts where the first is preferred (a tie counts half),
  with its Wilson interval.

Example:
    >>> from sitp.posttrain.tasks import get_task
    >>> task = get_task("chain1")
    >>> p = task.problems("heldout", 1, seed=0)[0]
    >>> plain, polite = task.reference(p), "Sure! " + task.reference(p)
    >>> gold_utility(task, p, polite) > gold_utility(task, p, plain)
    True
    >>> gold_utility(task, p, "Sure! Answer: 0") < gold_utility(task, p, plain)  # wrong
    True
"""

from __future__ import annotations

import random

import numpy as np

from sitp.posttrain.chat import completion_text, render_prompt
from sitp.posttrain.evaluate import wilson_interval
from sitp.posttrain.rl import sample_replies

PREFIXES = ("", "Sure! ", "Hmm, ", "Ok. ")
SUFFIXES = ("", " Thanks!", " :)", " Bye!")
POLITE_WORDS = ("Sure", "Thanks")
#: The judge's weights: a right answer, politeness (once), and each character's cost.
W_CORRECT, W_POLITE, W_CHAR = 4.0, 1.0, 0.05


def styled(reply: str, rng: random.Random) -> str:
    """``reply`` with a prefix and a suffix drawn uniformly from the styles."""
    return rng.choice(PREFIXES) + reply + rng.choice(SUFFIXES)


def styled_conversations(task, problems, copies: int = 2, seed: int = 0) -> list[list[dict]]:
    """``copies`` conversations per problem, each with its reference reply in a style
    drawn at random (a seeded :class:`random.Random`)."""
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    rng = random.Random(seed)
    return [task.conversation(p, styled(task.reference(p), rng))
            for p in problems for _ in range(copies)]  # fmt: skip


def gold_utility(task, problem, reply: str) -> float:
    """The hidden judge's score of ``reply``: ``4 [right] + 1 [polite] - 0.05 len``."""
    right = bool(task.check(problem, reply))
    polite = any(word in reply for word in POLITE_WORDS)
    return W_CORRECT * right + W_POLITE * polite - W_CHAR * len(reply)


def prompt_ids(task, problem, tok) -> list[int]:
    """The ids that ask the problem as a one-turn chat."""
    return render_prompt([{"role": "user", "content": task.prompt(problem)}], tok)


def sample_pairs(model, tok, task, problems, max_new_tokens, temperature=1.0, generator=None):
    """Two sampled replies (ids, each ending with its end token if it stopped) to each
    problem, from ``model``: ``[(problem, prompt_ids, reply_a, reply_b)]``."""
    prompts = [prompt_ids(task, p, tok) for p in problems]
    rows = [q for q in prompts for _ in range(2)]
    replies = sample_replies(model, rows, max_new_tokens, temperature, None,
                             (tok.assistant_end,), generator, batch_size=128)  # fmt: skip
    return [(p, q, replies[2 * n], replies[2 * n + 1])
            for n, (p, q) in enumerate(zip(problems, prompts, strict=True))]  # fmt: skip


def label_pairs(task, tok, pairs, temperature: float = 0.3, seed: int = 0):
    """The annotator's choices: ``[(prompt_ids, chosen_ids, rejected_ids)]``.

    For each ``(problem, prompt, a, b)`` of :func:`sample_pairs`, a is chosen with
    probability ``sigmoid((u_a - u_b) / temperature)`` (u: :func:`gold_utility` of the
    reply's text). Pairs whose two replies are the same text carry no preference and are
    dropped.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    rng = np.random.default_rng(seed)
    out = []
    for problem, prompt, a, b in pairs:
        ta, tb = completion_text(a, tok), completion_text(b, tok)
        if ta == tb:
            continue
        gap = (gold_utility(task, problem, ta) - gold_utility(task, problem, tb)) / temperature
        a_wins = rng.random() < 1.0 / (1.0 + np.exp(-gap))
        out.append((prompt, a, b) if a_wins else (prompt, b, a))
    return out


def annotator_agreement(task, tok, pairs, temperature: float = 0.3) -> float:
    """The expected share of :func:`label_pairs`' choices that agree with the judge's own
    order: the mean of ``sigmoid(|u_a - u_b| / temperature)`` over the pairs of different
    replies. No reward model can be expected to rank more of the labelled pairs right."""
    agree = []
    for problem, _, a, b in pairs:
        ta, tb = completion_text(a, tok), completion_text(b, tok)
        if ta != tb:
            gap = abs(gold_utility(task, problem, ta) - gold_utility(task, problem, tb))
            agree.append(1.0 / (1.0 + np.exp(-gap / temperature)))
    return float(np.mean(agree))


def judge_replies(task, tok, problems, replies) -> dict:
    """What the judge and the checker say of one reply (ids) per problem: the mean gold
    utility, the share right, polite, and the mean length in characters."""
    texts = [completion_text(r, tok) for r in replies]
    return {
        "gold": float(np.mean([gold_utility(task, p, t) for p, t in zip(problems, texts)])),
        "right": float(np.mean([bool(task.check(p, t)) for p, t in zip(problems, texts)])),
        "polite": float(np.mean([any(w in t for w in POLITE_WORDS) for t in texts])),
        "chars": float(np.mean([len(t) for t in texts])),
    }


def win_rate(task, tok, problems, replies, baseline_replies) -> dict:
    """The judge's verdict of ``replies`` against ``baseline_replies`` (one each per
    problem): wins, ties, losses, the rate (wins + ties / 2) / n and its Wilson 95 %
    interval (a tie counted as half a success)."""
    if len(replies) != len(problems) or len(baseline_replies) != len(problems):
        raise ValueError("win_rate needs one reply and one baseline reply per problem")
    wins = ties = 0
    for p, a, b in zip(problems, replies, baseline_replies, strict=True):
        ua = gold_utility(task, p, completion_text(a, tok))
        ub = gold_utility(task, p, completion_text(b, tok))
        wins += ua > ub
        ties += ua == ub
    n = len(problems)
    score = wins + ties / 2
    lo, hi = wilson_interval(score, n)
    return {"wins": int(wins), "ties": int(ties), "losses": int(n - wins - ties), "n": n,
            "win_rate": score / n, "ci": [lo, hi]}  # fmt: skip


__all__ = [
    "POLITE_WORDS",
    "annotator_agreement",
    "PREFIXES",
    "SUFFIXES",
    "gold_utility",
    "judge_replies",
    "label_pairs",
    "prompt_ids",
    "sample_pairs",
    "styled",
    "styled_conversations",
    "win_rate",
]
