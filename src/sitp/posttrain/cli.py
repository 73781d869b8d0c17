"""The post-training commands (chapter 8): ``sft``, ``rl``, ``rm``, ``dpo``, ``eval``, ``chat``.

Each ``main_*(argv)`` parses its own arguments and returns the exit status: 0, or 2
after one line on stderr for a bad request (an unknown task, a missing checkpoint, a
value out of range); ``python -m sitp sft ...`` and the others call them.

* ``sft --init DIR --out OUT --tasks addition2,count --identity`` fine-tunes the
  GPT of checkpoint DIR (a ``sitp train`` text run or a post-training checkpoint) on
  the tasks' train problems and the identity conversations, with the loss on the
  assistant's tokens only. A tokenizer without the chat tokens gets them as new ids,
  and the model new embedding rows for them.
* ``rl --init DIR --out OUT --task addition2`` runs GRPO from checkpoint DIR, rewarded
  by the task's checker; with ``--kl β`` it penalises the KL to DIR's model.
* ``rm --init DIR --out OUT --task chain1`` samples two replies of DIR's model to each
  train problem, lets :mod:`sitp.posttrain.prefs`'s annotator choose one, and fits a
  reward model (DIR's model and a scalar head) to the pairs by the Bradley–Terry loss;
  ``rl --reward-model OUT`` then rewards the replies by its score.
* ``dpo --init DIR --out OUT --task chain1`` fits DIR's model to the same pairs by DPO,
  with DIR's model as the frozen reference.
* ``eval DIR --task addition2`` prints held-out pass@1 (and pass@k) with intervals.
* ``chat DIR`` reads the user's lines on stdin and streams the replies; ``chat DIR
  --web`` serves a page on 127.0.0.1 that streams them (:mod:`sitp.posttrain.web`).

Checkpoints are written atomically by :mod:`sitp.train.checkpoint` every
``--save-every`` steps and at the end; rerunning ``sft``, ``rl``, ``rm`` or ``dpo`` with
the same ``--out`` resumes from the last one exactly (model, optimizer, random state,
step; ``rm`` and ``dpo`` keep their pairs in the checkpoint, ``pairs.json``).
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from sitp._tensor.creation import tensor
from sitp.data.tokens import ByteTokenizer
from sitp.dtypes import int64
from sitp.models.engine import Engine
from sitp.models.gpt import GPT, GPTConfig
from sitp.optim import AdamW
from sitp.posttrain import prefs, web
from sitp.posttrain.chat import ChatTokenizer, completion_text, render, render_prompt
from sitp.posttrain.dpo import train_dpo
from sitp.posttrain.evaluate import evaluate
from sitp.posttrain.reward import RewardModel, batch_scores, pair_accuracy, train_reward_model
from sitp.posttrain.rl import NORMS, grpo_step
from sitp.posttrain.sft import sft
from sitp.posttrain.tasks import get_task, identity_conversations
from sitp.random import Generator, get_rng_state, manual_seed, randn, set_rng_state
from sitp.train import checkpoint as ckpt
from sitp.train.args import Parser as _Parser
from sitp.train.args import fail as _fail
from sitp.train.args import number
from sitp.train.trainer import TOKENIZER_FILE, UsageError, tokenizer_from_record


def _positive(kind):
    """An argparse type: an int of at least 1, or a finite float above 0."""
    return number(kind, 1 if kind is int else 0, low_open=kind is float)


def _non_negative(kind):
    """An argparse type: an int or a finite float of at least 0."""
    return number(kind, 0)


# ------------------------------------------------------------------ checkpoints
def load_model(directory):
    """``(model, chat_tokenizer, record, tokenizer_file_bytes)`` of a GPT checkpoint.

    The model gets embedding rows for the chat tokens if its tokenizer lacked them.
    """
    point = ckpt.load_checkpoint(directory)
    record = point.record
    if record.get("model") != "gpt":
        raise UsageError(f"{directory} holds a {record.get('model')!r} run, not a GPT")
    tok, saved = _chat_tokenizer(directory, record)
    model = GPT(_config(record))
    point.load_model(model)
    if tok.vocab_size > model.config.vocab_size:
        model = extend_vocab(model, tok.vocab_size)
    return model.eval(), tok, record, saved


def _chat_tokenizer(directory, record):
    info = record.get("tokenizer") or {}
    if info.get("kind") == "bytes":
        base, saved = ByteTokenizer(), None
    else:
        base, saved = tokenizer_from_record(directory, record)
    return ChatTokenizer(base), saved


def _config(record) -> GPTConfig:
    try:
        return GPTConfig(**record["model_config"])
    except (TypeError, KeyError, ValueError) as error:
        raise ckpt.CheckpointError(f"corrupt checkpoint: bad model config ({error})") from None


def load_reward_model(directory):
    """``(reward_model, chat_tokenizer, record, tokenizer_file_bytes)`` of a ``sitp rm``
    checkpoint."""
    point = ckpt.load_checkpoint(directory)
    record = point.record
    if record.get("model") != "reward":
        raise UsageError(f"{directory} holds a {record.get('model')!r} run, not a reward model")
    tok, saved = _chat_tokenizer(directory, record)
    rm = RewardModel(GPT(_config(record)))
    point.load_model(rm)
    return rm.eval(), tok, record, saved


def extend_vocab(model, vocab_size, seed=0):
    """A copy of ``model`` with ``vocab_size`` token rows: the old rows kept, the new ones
    drawn as GPT-2's init draws them (N(0, 0.02)), from a generator seeded with ``seed``
    (so the same checkpoint always gets the same rows, and the global random state is
    left as it was)."""
    old = model.config
    saved_state = get_rng_state()
    new = GPT(GPTConfig(**dict(asdict(old), vocab_size=vocab_size)))  # the structure
    set_rng_state(saved_state)
    generator = Generator().manual_seed(seed)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    target = new.state_dict()
    for name, value in target.items():
        src = state[name]
        if src.shape != tuple(value.shape):  # wte and lm_head: (V, C)
            rows = randn(vocab_size - src.shape[0], src.shape[1], generator=generator)
            array = np.concatenate([src, (rows * 0.02).numpy().astype(src.dtype)])
        else:
            array = src
        state[name] = array
    new.load_state_dict({k: tensor(v) for k, v in state.items()})
    return new


def tokenizer_record(tok: ChatTokenizer, saved) -> dict:
    base = tok.base
    if isinstance(base, ByteTokenizer):
        return {"kind": "bytes"}
    if saved is None:
        return {"kind": "char", "chars": "".join(base.chars)}
    return {"kind": "bpe", "file": TOKENIZER_FILE, "vocab_size": base.vocab_size}


def save(out, model, optimizer, tok, saved, record):
    """Writes a post-training checkpoint (atomically, through sitp.train.checkpoint)."""
    record = dict(record, model="gpt", model_config=asdict(model.config),
                  tokenizer=tokenizer_record(tok, saved))  # fmt: skip
    extra = {TOKENIZER_FILE: saved} if saved is not None else None
    return ckpt.save_checkpoint(out, model, optimizer, None, record, extra)


def _resume_or_init(args, stage):
    """The model, tokenizer, optimizer and record to continue from: OUT's own checkpoint
    of this stage if there is one, else --init's model and a fresh optimizer."""
    out = Path(args.out)
    if ckpt.has_checkpoint(out):
        model, tok, record, saved = load_model(out)
        if record.get("stage") != stage:
            raise UsageError(
                f"{out} holds a {record.get('stage')!r} checkpoint, not {stage}: "
                "choose another --out"
            )
        optimizer = AdamW(model.parameters(), lr=record["options"]["lr"])
        optimizer.load_state_dict(ckpt.load_checkpoint(out).optimizer_state)
        return model, tok, saved, optimizer, record
    if args.init is None:
        raise UsageError(f"{out} holds no checkpoint to resume: give --init DIR")
    model, tok, _, saved = load_model(args.init)
    optimizer = AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    return model, tok, saved, optimizer, {"stage": stage, "step": 0, "history": []}


# ------------------------------------------------------------------------ sft
def sft_parser():
    p = _Parser(prog="sitp sft", description="Supervised fine-tuning on conversations.")
    p.add_argument("--init", metavar="DIR", help="checkpoint to start from")
    p.add_argument("--out", metavar="DIR", required=True, help="checkpoint directory to write")
    p.add_argument("--tasks", default="", help="comma-separated task names, e.g. addition2,count")
    p.add_argument("--identity", action="store_true", help="add the identity conversations")
    p.add_argument("--problems", type=_positive(int), default=2000, help="train problems per task")
    p.add_argument("--steps", type=_positive(int), default=200, help="total optimizer steps")
    p.add_argument("--lr", type=_positive(float), default=1e-3, help="AdamW learning rate")
    p.add_argument("--batch-size", type=_positive(int), default=16, help="conversations per step")
    p.add_argument("--seed", type=_non_negative(int), default=0, help="seed of the batches")
    p.add_argument("--save-every", type=_positive(int), default=100, help="steps between saves")
    return p


def _conversations(task_names, n, identity):
    convos = []
    for name in task_names:
        task = get_task(name)
        convos += [task.conversation(p) for p in task.problems("train", n, seed=0, at_most=True)]
    if identity:
        convos += identity_conversations()
    if not convos:
        raise UsageError("no data: give --tasks and/or --identity")
    return convos


def main_sft(argv=None) -> int:
    args = sft_parser().parse_args(argv)
    try:
        names = [t for t in args.tasks.split(",") if t]
        for name in names:
            get_task(name)
        model, tok, saved, optimizer, record = _resume_or_init(args, "sft")
        if record["step"] == 0:
            record["options"] = dict(tasks=names, identity=args.identity, problems=args.problems,
                                     lr=args.lr, batch_size=args.batch_size, seed=args.seed,
                                     init=args.init)  # fmt: skip
        opts = record["options"]
        convos = _conversations(opts["tasks"], opts["problems"], opts["identity"])
        fits = [c for c in convos if len(render(c, tok)[0]) <= model.block_size + 1]
        if len(fits) < len(convos):
            print(f"sitp sft: {len(convos) - len(fits)} of {len(convos)} conversations are "
                  f"longer than block_size {model.block_size} + 1 tokens; left out",
                  file=sys.stderr)  # fmt: skip
        if not fits:
            raise UsageError(f"no conversation fits in block_size {model.block_size}")
        convos = fits

        def train(n, rng):
            return sft(model, convos, tok, n, batch_size=opts["batch_size"], optimizer=optimizer,
                       rng=rng)  # fmt: skip

        run_stage(args, "sft", random.Random(opts["seed"]), train, (model, optimizer, tok, saved),
                  record)  # fmt: skip
        return 0
    except (UsageError, ValueError, ckpt.CheckpointError) as error:
        return _fail(f"sitp sft: error: {error}")


def run_stage(args, stage, rng, train, state, record):
    """A loss-minimising stage (midtrain, sft) to ``args.steps``: ``train(n, rng)`` runs n
    steps and returns their losses; after every ``args.save_every`` steps the checkpoint
    (``state`` = model, optimizer, tokenizer, saved tokenizer file) is written with the
    record, the losses and ``rng``'s state, so that a rerun resumes exactly."""
    if "rng" in record:
        rng.setstate(_tuple(record["rng"]))
    while record["step"] < args.steps:
        n = min(args.save_every, args.steps - record["step"])
        losses = train(n, rng)
        record["step"] += n
        record["history"] += losses
        record["rng"] = rng.getstate()
        save(args.out, *state, record)
        print(f"{stage} step {record['step']}: loss {np.mean(losses[-10:]):.4f}", flush=True)


def _tuple(state):
    """random.Random's state back from JSON (lists to tuples)."""
    return tuple(tuple(x) if isinstance(x, list) else x for x in state)


# ------------------------------------------------------------------------- rl
def rl_parser():
    p = _Parser(prog="sitp rl", description="GRPO with rewards from a task's checker.")
    p.add_argument("--init", metavar="DIR", help="checkpoint to start from (the reference)")
    p.add_argument("--out", metavar="DIR", required=True, help="checkpoint directory to write")
    p.add_argument("--task", required=True, help="the task to reward, e.g. addition2")
    p.add_argument("--steps", type=_positive(int), default=50, help="total GRPO steps")
    p.add_argument("--prompts", type=_positive(int), default=4, help="prompts per step")
    p.add_argument("--group", type=_positive(int), default=8, help="replies per prompt (>= 2)")
    p.add_argument("--max-new-tokens", type=_positive(int), default=None,
                   help="reply length cap (default: the task's longest reference reply, "
                   "its end token and 4 more)")  # fmt: skip
    p.add_argument("--temperature", type=_positive(float), default=1.0, help="sampling temperature")
    p.add_argument("--clip", type=_positive(float), default=0.2, help="PPO clip epsilon")
    p.add_argument("--kl", type=_non_negative(float), default=0.0, help="KL penalty to --init")
    p.add_argument("--epochs", type=_positive(int), default=1, help="updates per sampled batch")
    p.add_argument("--norm", choices=NORMS, default="token",
                   help="the loss's mean: over all reply tokens, or per reply first")  # fmt: skip
    p.add_argument("--reward-model", metavar="DIR", default=None,
                   help="reward the replies by this `sitp rm` checkpoint, not the checker")  # fmt: skip
    p.add_argument("--lr", type=_positive(float), default=1e-4, help="AdamW learning rate")
    p.add_argument("--seed", type=_non_negative(int), default=0, help="seed of prompts and draws")
    p.add_argument("--save-every", type=_positive(int), default=10, help="steps between saves")
    return p


def main_rl(argv=None) -> int:
    args = rl_parser().parse_args(argv)
    try:
        task = get_task(args.task)
        if args.group < 2:
            raise UsageError(
                f"--group must be at least 2 (a group compares replies), got {args.group}"
            )
        model, tok, saved, optimizer, record = _resume_or_init(args, "rl")
        if record["step"] == 0:
            record["options"] = {k: getattr(args, k) for k in (
                "init", "task", "prompts", "group", "max_new_tokens", "temperature", "clip",
                "kl", "epochs", "norm", "reward_model", "lr", "seed")}  # fmt: skip
        opts = record["options"]
        ref = load_model(opts["init"])[0] if opts["kl"] > 0 else None
        rm = None
        if opts.get("reward_model"):
            rm = load_reward_model(opts["reward_model"])[0]
        problems = task.problems("train", 5000, seed=opts["seed"], at_most=True)
        if opts["max_new_tokens"] is None:  # resolved once, and kept for a resume
            opts["max_new_tokens"] = reply_budget(task, problems, tok)
            if rm is not None:  # room for the styles of the preference data
                opts["max_new_tokens"] += len(prefs.PREFIXES[1] + prefs.SUFFIXES[1])
        generator = Generator().manual_seed(opts["seed"])
        if "rng" in record:
            generator.set_state(record["rng"])
        while record["step"] < args.steps:
            step = record["step"]
            batch = [problems[(step * opts["prompts"] + i) % len(problems)]
                     for i in range(opts["prompts"])]  # fmt: skip
            prompts = [render_prompt([{"role": "user", "content": task.prompt(p)}], tok)
                       for p in batch]  # fmt: skip

            def reward(rows, replies, batch=batch, prompts=prompts):
                if rm is not None:
                    return batch_scores(rm, [prompts[i] for i in rows], replies)
                return [float(task.check(batch[i], completion_text(r, tok)))
                        for i, r in zip(rows, replies)]  # fmt: skip

            stats = grpo_step(model, optimizer, prompts, group_size=opts["group"],
                              max_new_tokens=opts["max_new_tokens"],
                              temperature=opts["temperature"], clip_eps=opts["clip"],
                              kl_coef=opts["kl"], ref_model=ref, epochs=opts["epochs"],
                              stop_ids=(tok.assistant_end,), generator=generator,
                              norm=opts.get("norm", "token"), reward_batch=reward)  # fmt: skip
            record["step"] += 1
            record["history"].append(stats)
            print(f"rl step {record['step']}: reward {stats['reward']:.3f} kl {stats['kl']:.4f} "
                  f"clip {stats['clip_frac']:.3f} entropy {stats['entropy']:.3f}",
                  flush=True)  # fmt: skip
            if record["step"] % args.save_every == 0 or record["step"] == args.steps:
                record["rng"] = generator.get_state()
                save(args.out, model, optimizer, tok, saved, record)
        return 0
    except (UsageError, ValueError, ckpt.CheckpointError) as error:
        return _fail(f"sitp rl: error: {error}")


def reply_budget(task, problems, tok) -> int:
    """A reply length cap that fits every correct reply: the longest reference reply of
    ``problems`` in tokens, plus the end token and 4 tokens of slack."""
    return max(len(tok.encode_text(task.reference(p))) for p in problems) + 1 + 4


# ------------------------------------------------------------------ rm, dpo
PAIRS_FILE = "pairs.json"


def prefs_parser(verb):
    what = {"rm": "Fits a reward model (the --init model and a scalar head) to preference pairs.",
            "dpo": "Fits the --init model to preference pairs by DPO."}[verb]  # fmt: skip
    what += " The pairs: two sampled replies to each train problem, judged by the annotator."
    p = _Parser(prog=f"sitp {verb}", description=what)
    p.add_argument("--init", metavar="DIR", help="the SFT checkpoint (samples the pairs)")
    p.add_argument("--out", metavar="DIR", required=True, help="checkpoint directory to write")
    p.add_argument("--task", required=True, help="the task whose problems are asked, e.g. chain1")
    p.add_argument("--problems", type=_positive(int), default=1000,
                   help="train problems to sample a pair for (at most the split)")  # fmt: skip
    p.add_argument("--steps", type=_positive(int), default=150, help="total optimizer steps")
    p.add_argument("--batch-size", type=_positive(int), default=32, help="pairs per step")
    p.add_argument("--lr", type=_positive(float), default=1e-3 if verb == "rm" else 3e-4,
                   help="AdamW learning rate")  # fmt: skip
    if verb == "dpo":
        p.add_argument("--beta", type=_positive(float), default=0.1, help="DPO's beta")
    p.add_argument("--seed", type=_non_negative(int), default=0, help="seed of pairs and batches")
    p.add_argument("--save-every", type=_positive(int), default=50, help="steps between saves")
    return p


def make_pairs(model, tok, task, n, seed):
    """The labelled pairs (prompt, chosen, rejected) of ``n`` train problems of ``task``:
    two replies of ``model`` each at temperature 1, chosen by the judge's annotator."""
    problems = task.problems("train", n, seed=0, at_most=True)
    budget = reply_budget(task, problems, tok) + len(prefs.PREFIXES[1] + prefs.SUFFIXES[1])
    gen = Generator().manual_seed(seed)
    raw = prefs.sample_pairs(model, tok, task, problems, budget, 1.0, gen)
    return prefs.label_pairs(task, tok, raw, seed=seed)


def _prefs_state(args, verb):
    """What ``sitp rm`` and ``sitp dpo`` continue from: OUT's checkpoint of ``verb``, or
    --init's model, fresh pairs and a fresh optimizer. Returns (trained model, the model
    to save as a GPT or None, tok, saved, optimizer, record, pairs, reference)."""
    out = Path(args.out)
    resume = ckpt.has_checkpoint(out)
    if resume:
        record = ckpt.load_record(out)
        if record.get("stage") != verb:
            raise UsageError(
                f"{out} holds a {record.get('stage')!r} checkpoint, not {verb}: choose another --out"
            )
        init = record["options"]["init"]
    elif args.init is None:
        raise UsageError(f"{out} holds no checkpoint to resume: give --init DIR")
    else:
        init = args.init
    sft_model, tok, _, saved = load_model(init)
    if resume:
        pairs = [tuple(row) for row in json.loads(ckpt.read_extra_file(out, record, PAIRS_FILE))]
        if verb == "rm":
            model = load_reward_model(out)[0]
        else:
            model = load_model(out)[0]
    else:
        task = get_task(args.task)
        pairs = make_pairs(sft_model, tok, task, args.problems, args.seed)
        if not pairs:
            raise UsageError("the sampled replies of every pair were the same: no preference")
        twin = extend_vocab(sft_model, tok.vocab_size)  # a copy: the same rows, none new
        model = RewardModel(twin) if verb == "rm" else twin
        opts = {k: getattr(args, k) for k in ("init", "task", "problems", "batch_size", "lr",
                                              "seed", "beta") if hasattr(args, k)}  # fmt: skip
        record = {"stage": verb, "step": 0, "history": [], "options": opts}
    optimizer = AdamW(model.parameters(), lr=record["options"]["lr"], weight_decay=0.0)
    if resume:
        optimizer.load_state_dict(ckpt.load_checkpoint(out).optimizer_state)
    return model, tok, saved, optimizer, record, pairs, sft_model


def _save_prefs(out, verb, model, optimizer, tok, saved, record, pairs):
    extra = {PAIRS_FILE: json.dumps([list(p) for p in pairs]).encode()}
    if saved is not None:
        extra[TOKENIZER_FILE] = saved
    if verb == "dpo":
        record = dict(record, model="gpt", model_config=asdict(model.config),
                      tokenizer=tokenizer_record(tok, saved))  # fmt: skip
    else:
        record = dict(record, model="reward", model_config=asdict(model.gpt.config),
                      tokenizer=tokenizer_record(tok, saved))  # fmt: skip
    ckpt.save_checkpoint(out, model, optimizer, None, record, extra)


def _main_prefs(verb, argv) -> int:
    args = prefs_parser(verb).parse_args(argv)
    try:
        get_task(args.task)
        model, tok, saved, optimizer, record, pairs, ref = _prefs_state(args, verb)
        opts = record["options"]
        rng = random.Random(opts["seed"])
        if "rng" in record:
            rng.setstate(_tuple(record["rng"]))
        if record["step"] == 0:
            print(f"sitp {verb}: {len(pairs)} preference pairs", flush=True)
        while record["step"] < args.steps:
            n = min(args.save_every, args.steps - record["step"])
            if verb == "rm":
                losses, accs = train_reward_model(model, pairs, n, opts["batch_size"],
                                                  optimizer=optimizer, rng=rng)  # fmt: skip
                history = [{"loss": a, "accuracy": b} for a, b in zip(losses, accs)]
            else:
                history = train_dpo(model, ref, pairs, n, opts["batch_size"], opts["beta"],
                                    optimizer=optimizer, rng=rng)  # fmt: skip
            record["step"] += n
            record["history"] += history
            record["rng"] = rng.getstate()
            _save_prefs(args.out, verb, model, optimizer, tok, saved, record, pairs)
            loss = np.mean([h["loss"] for h in history[-10:]])
            acc = np.mean([h["accuracy"] for h in history[-10:]])
            print(f"{verb} step {record['step']}: loss {loss:.4f} pair accuracy {acc:.3f}",
                  flush=True)  # fmt: skip
        if verb == "rm":
            print(f"rm: the chosen reply scores higher in {pair_accuracy(model, pairs):.3f} of "
                  f"the {len(pairs)} pairs", flush=True)  # fmt: skip
        return 0
    except (UsageError, ValueError, ckpt.CheckpointError) as error:
        return _fail(f"sitp {verb}: error: {error}")


def main_rm(argv=None) -> int:
    """``sitp rm``: a Bradley–Terry reward model on preference pairs (chapter 8.4)."""
    return _main_prefs("rm", argv)


def main_dpo(argv=None) -> int:
    """``sitp dpo``: DPO on preference pairs (chapter 8.4)."""
    return _main_prefs("dpo", argv)


# ----------------------------------------------------------------------- eval
def eval_parser():
    p = _Parser(prog="sitp eval", description="Held-out pass@k of a checkpoint on a task.")
    p.add_argument("dir", metavar="DIR", help="checkpoint directory")
    p.add_argument("--task", required=True, help="e.g. addition2, count, chain2")
    p.add_argument("--problems", type=_positive(int), default=None,
                   help="held-out problems (default: 100, or all of a smaller split)")  # fmt: skip
    p.add_argument("--samples", type=_positive(int), default=1, help="replies per problem")
    p.add_argument("--k", default="1", help="comma-separated k values for pass@k (<= samples)")
    p.add_argument("--temperature", type=_non_negative(float), default=0.0, help="0: greedy")
    p.add_argument("--max-new-tokens", type=_positive(int), default=None,
                   help="reply length cap (default: the longest reference reply of the "
                   "problems, its end token and 4 more)")  # fmt: skip
    p.add_argument("--seed", type=_non_negative(int), default=0, help="seed of the draws")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    return p


def main_eval(argv=None) -> int:
    args = eval_parser().parse_args(argv)
    try:
        task = get_task(args.task)
        try:
            ks = [int(k) for k in args.k.split(",")]
        except ValueError:
            raise UsageError(f"--k must be comma-separated integers, got {args.k!r}") from None
        model, tok, _, _ = load_model(args.dir)
        if args.problems is None:
            problems = task.problems("heldout", 100, seed=0, at_most=True)
        else:
            problems = task.problems("heldout", args.problems, seed=0)
        if args.max_new_tokens is None:
            args.max_new_tokens = reply_budget(task, problems, tok)
        out = evaluate(model, tok, task, problems, n_samples=args.samples, ks=ks,
                       temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                       generator=Generator().manual_seed(args.seed), seed=args.seed)  # fmt: skip
        if args.json:
            print(json.dumps(out))
        for k in ks:
            lo, hi = out[f"pass@{k}_ci"]
            print(f"{task.name} pass@{k}: {out[f'pass@{k}']:.3f} (95% CI {lo:.3f}-{hi:.3f}; "
                  f"{len(problems)} held-out problems, {args.samples} samples each)")  # fmt: skip
        return 0
    except (UsageError, ValueError, ckpt.CheckpointError) as error:
        return _fail(f"sitp eval: error: {error}")


# ----------------------------------------------------------------------- chat
def chat_parser():
    p = _Parser(prog="sitp chat", description="Chat with a checkpoint: one message a line.")
    p.add_argument("dir", metavar="DIR", help="checkpoint directory")
    p.add_argument("--temperature", type=_non_negative(float), default=0.0, help="0: greedy")
    p.add_argument("--top-k", type=_positive(int), default=None, help="sample among k likeliest")
    p.add_argument("--max-new-tokens", type=_positive(int), default=64, help="reply length cap")
    p.add_argument("--seed", type=_non_negative(int), default=0, help="seed of the draws")
    p.add_argument("--web", action="store_true",
                   help="serve a chat page on http://127.0.0.1:PORT/, not stdin")  # fmt: skip
    p.add_argument("--port", type=_non_negative(int), default=8008,
                   help="the page's port with --web (0: any free one)")  # fmt: skip
    return p


def reply_pieces(model, tok, conversation, max_new_tokens, temperature=0.0, top_k=None,
                 generator=None):  # fmt: skip
    """Yields the assistant's reply to ``conversation`` as text pieces, each as soon as the
    engine has drawn it; the pieces joined are the reply's text.

    Older turns are dropped (from the front, whole exchanges) until the prompt and
    at least one new token fit in the model's block. A piece is held back while a byte
    tokenizer is inside a character.

    Raises:
        ValueError: (on the first ``next``) the conversation is malformed, a message has a
            character the tokenizer lacks, or the last message alone exceeds the block.
    """
    while True:
        prompt = render_prompt(conversation, tok)
        if len(prompt) < model.block_size or len(conversation) == 1:
            break
        conversation = conversation[2:]
    if len(prompt) > model.block_size:
        raise ValueError(
            f"the message is {len(prompt)} tokens, more than block_size {model.block_size}"
        )
    n = min(max_new_tokens, model.block_size - len(prompt) + 1)
    reply, shown = [], ""
    for next_B1, _ in Engine(model).stream(tensor([prompt], dtype=int64), n, temperature,
                                            top_k, generator):  # fmt: skip
        token = int(next_B1.item())
        if token in tok.name_of:
            break
        reply.append(token)
        text = tok.decode_text(reply)
        if not text.endswith("\ufffd"):  # a byte tokenizer may be inside a character
            yield text[len(shown) :]
            shown = text
    rest = completion_text(reply, tok)[len(shown) :]
    if rest:
        yield rest


def stream_reply(model, tok, conversation, max_new_tokens, temperature=0.0, top_k=None,
                 generator=None, out=sys.stdout):  # fmt: skip
    """Writes the reply to ``out`` piece by piece as the engine draws it (see
    :func:`reply_pieces`), then a newline; returns its text."""
    pieces = []
    for piece in reply_pieces(model, tok, conversation, max_new_tokens, temperature, top_k,
                              generator):  # fmt: skip
        out.write(piece)
        out.flush()
        pieces.append(piece)
    out.write("\n")
    out.flush()
    return "".join(pieces)


def main_chat(argv=None, stdin=None) -> int:
    parser = chat_parser()
    args = parser.parse_args(argv)
    if args.port > 65535:
        parser.error(f"argument --port: must be at most 65535, got {args.port}")
    stdin = sys.stdin if stdin is None else stdin
    try:
        model, tok, _, _ = load_model(args.dir)
        manual_seed(args.seed)
        generator = Generator().manual_seed(args.seed)
        if args.web:

            def pieces(conversation):
                return reply_pieces(model, tok, conversation, args.max_new_tokens,
                                    args.temperature, args.top_k, generator)  # fmt: skip

            try:
                server = web.make_server(pieces, args.port)
            except OSError as error:  # the port is taken, or not ours to bind
                return _fail(f"sitp chat: error: cannot serve on 127.0.0.1:{args.port}: {error}")
            return web.serve(server)
        conversation, interactive = [], stdin.isatty()
        while True:
            if interactive:
                print("> ", end="", flush=True)
            line = stdin.readline()
            if not line:
                return 0
            message = line.rstrip("\n")
            if not message.strip():
                continue
            conversation.append({"role": "user", "content": message})
            try:
                reply = stream_reply(model, tok, conversation, args.max_new_tokens,
                                     args.temperature, args.top_k, generator)  # fmt: skip
            except ValueError as error:  # a character the tokenizer lacks, or too long
                conversation.pop()
                print(f"sitp chat: {' '.join(str(error).split())}", file=sys.stderr)
                continue
            conversation.append({"role": "assistant", "content": reply})
    except (UsageError, ckpt.CheckpointError) as error:
        return _fail(f"sitp chat: error: {error}")
    except KeyboardInterrupt:
        return 130


__all__ = [
    "extend_vocab",
    "load_model",
    "load_reward_model",
    "main_chat",
    "main_dpo",
    "main_eval",
    "main_rl",
    "main_rm",
    "main_sft",
    "save",
]
