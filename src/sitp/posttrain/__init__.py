"""sitp.posttrain: from a language model to an assistant (chapter 8).

* :mod:`sitp.posttrain.chat` — the chat format's special tokens, rendering a
  conversation into ids with the assistant-only training mask, parsing back;
* :mod:`sitp.posttrain.tasks` — generated tasks with checkers and disjoint train and
  held-out splits, and the hand-written identity conversations (identity.json);
* :mod:`sitp.posttrain.sft` — supervised fine-tuning with masked targets;
* :mod:`sitp.posttrain.rl` — GRPO: groups of sampled replies, rewards from the checkers
  (or a reward model), PPO's clip and a KL penalty to the SFT model;
* :mod:`sitp.posttrain.prefs` — preference data: replies in several styles, a hidden judge,
  pairs labelled by a Bradley–Terry annotator, win rates;
* :mod:`sitp.posttrain.reward` — a reward model (the SFT model and a scalar head) fitted by
  the Bradley–Terry loss;
* :mod:`sitp.posttrain.dpo` — direct preference optimisation on the same pairs;
* :mod:`sitp.posttrain.evaluate` — pass@1 and unbiased pass@k with confidence intervals;
* :mod:`sitp.posttrain.cli` — the ``sft``, ``rl``, ``rm``, ``dpo``, ``eval`` and ``chat``
  commands.

An application (layer 6 of docs/layout.md).
"""
