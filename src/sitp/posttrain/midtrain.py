"""Mid-training (chapter 8.2): the base model learns the chat format and the tasks' forms.

A pre-trained GPT has read plain text and has never seen a special token. Mid-training
goes on with the pre-training objective, the next token at every position, on a new
stream: every conversation of the tasks (and the identity set) rendered whole, its
frame tokens included, with pieces of the old plain text between them so that the
model keeps what it knew. Nothing is masked: the model learns the user's turns, the
frame and the answers alike, and so learns where a turn starts and ends. Supervised
fine-tuning (:mod:`sitp.posttrain.sft`) then narrows the loss to the assistant's tokens.

:func:`midtrain_stream` builds the stream once from its options (the same seed, the
same stream), and :func:`midtrain` trains on random ``(B, T + 1)`` windows of it, as
pre-training does on its shards.

Example:
    >>> from sitp.data.tokens import ByteTokenizer
    >>> from sitp.posttrain.chat import ChatTokenizer
    >>> tok = ChatTokenizer(ByteTokenizer())
    >>> convo = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    >>> ids = midtrain_stream([convo], tok, text="To be, or not to be", text_share=0.5, piece=8)
    >>> tok.decode(ids)
    '<|bos|><|user_start|>hi<|user_end|><|assistant_start|>ok<|assistant_end|><|bos|> or not '
"""

from __future__ import annotations

import random
import sys

import numpy as np

from sitp._tensor.creation import tensor
from sitp.dtypes import int64
from sitp.optim import AdamW
from sitp.posttrain.chat import render
from sitp.posttrain.cli import _conversations, _non_negative, _positive, _resume_or_init, run_stage
from sitp.posttrain.tasks import get_task
from sitp.train import checkpoint as ckpt
from sitp.train.args import Parser as _Parser
from sitp.train.args import fail as _fail
from sitp.train.trainer import VAL_FRACTION, UsageError, corpus_text


# --8<-- [start:stream]
def midtrain_stream(conversations, tokenizer, text=None, text_share=0.5, seed=0, piece=256):
    """The mid-training stream: a 1-D int64 array of token ids.

    Every conversation appears once, rendered whole (``<|bos|>`` first). When ``text``
    is given, pieces of it are added, each ``<|bos|>`` and ``piece`` tokens of ordinary
    text from a random place, until they make ``text_share`` of the stream's tokens;
    then the conversations and pieces are shuffled together (a seeded
    :class:`random.Random`).

    Raises:
        ValueError: no conversation, ``text_share`` outside [0, 1), or a text shorter
            than one piece.
    """
    if not conversations:
        raise ValueError("midtrain_stream needs at least one conversation")
    if not 0 <= text_share < 1:
        raise ValueError(f"text_share must be in [0, 1), got {text_share}")
    rng = random.Random(seed)
    docs = [render(c, tokenizer)[0] for c in conversations]
    if text and text_share > 0:
        ids = tokenizer.encode_text(text)
        if len(ids) <= piece:
            raise ValueError(f"the text has {len(ids)} tokens, not more than one piece ({piece})")
        wanted = sum(map(len, docs)) * text_share / (1 - text_share)
        for _ in range(max(1, round(wanted / (piece + 1)))):
            start = rng.randrange(len(ids) - piece)
            docs.append([tokenizer.bos, *ids[start : start + piece]])
    rng.shuffle(docs)
    return np.fromiter((i for doc in docs for i in doc), dtype=np.int64)


# --8<-- [end:stream]


def midtrain(model, stream, steps, batch_size=16, lr=1e-3, optimizer=None, rng=None, seed=0):
    """Trains ``model`` for ``steps`` AdamW steps on random windows of ``stream``; returns
    the losses. Each step draws ``batch_size`` starts (``rng``, a :class:`random.Random`,
    or one seeded with ``seed``); inputs are ``T`` ids, targets the ``T`` that follow,
    with ``T`` the model's block size. Pass ``optimizer`` and ``rng`` to resume."""
    T = model.block_size
    if len(stream) < T + 2:
        raise ValueError(f"the stream has {len(stream)} tokens; windows of {T} + 1 need more")
    if steps < 0 or batch_size < 1:
        raise ValueError(f"steps must be >= 0 and batch_size >= 1, got {steps}, {batch_size}")
    if optimizer is None:
        optimizer = AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    rng = random.Random(seed) if rng is None else rng
    model.train()
    losses = []
    for _ in range(steps):
        starts = [rng.randrange(len(stream) - T) for _ in range(batch_size)]
        window = np.stack([stream[s : s + T + 1] for s in starts])
        _, loss = model(tensor(window[:, :-1], dtype=int64), tensor(window[:, 1:], dtype=int64))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.item()))
    model.eval()
    return losses


# ------------------------------------------------------------------ the command
def midtrain_parser():
    p = _Parser(
        prog="sitp midtrain",
        description="Mid-training: next-token training on the tasks' conversations, whole, "
        "mixed with plain text.",
    )
    p.add_argument("--init", metavar="DIR", help="checkpoint to start from (a pretrain run)")
    p.add_argument("--out", metavar="DIR", required=True, help="checkpoint directory to write")
    p.add_argument("--tasks", default="", help="comma-separated task names, e.g. addition3,count")
    p.add_argument("--identity", action="store_true", help="add the identity conversations")
    p.add_argument("--problems", type=_positive(int), default=2000, help="train problems per task")
    p.add_argument("--text", default="auto", metavar="auto|none|shakespeare|FILE",
                   help="plain text mixed in: the training part of --init's corpus (auto), "
                   "none, or a corpus")  # fmt: skip
    p.add_argument("--text-share", type=_non_negative(float), default=0.5,
                   help="share of the stream's tokens that are plain text, in [0, 1)")  # fmt: skip
    p.add_argument("--steps", type=_positive(int), default=500, help="total optimizer steps")
    p.add_argument("--lr", type=_positive(float), default=1e-3, help="AdamW learning rate")
    p.add_argument("--batch-size", type=_positive(int), default=16, help="windows per step")
    p.add_argument("--seed", type=_non_negative(int), default=0, help="seed of the stream")
    p.add_argument("--save-every", type=_positive(int), default=100, help="steps between saves")
    return p


def _text(spec, init):
    """The plain text to mix in: the first (training) part of a corpus, or None."""
    if spec == "none":
        return None
    if spec == "auto":
        record = ckpt.load_record(init)
        spec = (record.get("train_config") or {}).get("data")
        if not (record.get("tokenizer") or {}).get("kind") or spec is None:
            return None  # not a text run: a post-training checkpoint has no corpus of its own
    text = corpus_text(spec)
    return text[: int(len(text) * (1 - VAL_FRACTION))]


def main_midtrain(argv=None) -> int:
    args = midtrain_parser().parse_args(argv)
    try:
        names = [t for t in args.tasks.split(",") if t]
        for name in names:
            get_task(name)
        if not args.text_share < 1:
            raise UsageError(f"--text-share must be below 1, got {args.text_share}")
        model, tok, saved, optimizer, record = _resume_or_init(args, "midtrain")
        if record["step"] == 0:
            record["options"] = dict(tasks=names, identity=args.identity, problems=args.problems,
                                     text=args.text, text_share=args.text_share, lr=args.lr,
                                     batch_size=args.batch_size, seed=args.seed,
                                     init=args.init)  # fmt: skip
        opts = record["options"]
        convos = _conversations(opts["tasks"], opts["problems"], opts["identity"])
        text = _text(opts["text"], opts["init"])
        try:
            stream = midtrain_stream(convos, tok, text, opts["text_share"], opts["seed"])
        except ValueError as error:  # a character the tokenizer lacks, or a short text
            raise UsageError(
                f"cannot build the stream: {' '.join(str(error).split())} (a model for chat "
                "needs a tokenizer for any text: pretrain with --tokenizer bytes or a BPE)"
            ) from None
        if record["step"] == 0:
            share = 0 if text is None else opts["text_share"]
            print(f"sitp midtrain: {len(convos):,} conversations and {share:.0%} plain text, "
                  f"{len(stream):,} tokens", file=sys.stderr)  # fmt: skip

        def train(n, rng):
            return midtrain(model, stream, n, opts["batch_size"], optimizer=optimizer, rng=rng)

        run_stage(args, "midtrain", random.Random(opts["seed"] + 1), train,
                  (model, optimizer, tok, saved), record)  # fmt: skip
        return 0
    except (UsageError, ValueError, ckpt.CheckpointError) as error:
        return _fail(f"sitp midtrain: error: {error}")


__all__ = ["main_midtrain", "midtrain", "midtrain_stream"]
