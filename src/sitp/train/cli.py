"""The command line: ``python -m sitp`` (or ``sitp``) trains and samples the ladder models.

Train a model, resume it, sample names from it::

    python -m sitp train --model gpt --steps 2000 --out runs/gpt
    python -m sitp train --model gpt --steps 4000 --out runs/gpt --resume
    python -m sitp sample runs/gpt --num 20 --temperature 0.8 --top-k 10
    python -m sitp sample --out runs/gpt          # the same directory, named as train names it

Train a byte-level BPE tokenizer (section 5.1) and save it::

    python -m sitp tokenizer train --data shakespeare --vocab-size 512 --out runs/bpe512

``train`` shows a progress bar with the running loss, prints the train and
validation losses every ``--eval-every`` steps and the test loss at the end,
checkpoints to ``--out`` every ``--save-every`` steps (see :mod:`sitp.train.checkpoint`),
and draws the loss curve in the terminal and in ``OUT/loss.png``.

``sample`` prints names, then the share of them that are not in the training
set (the innovation rate).

A bad request — an unknown model, a missing or damaged checkpoint, a checkpoint of
another model, a device this build lacks, a number out of its range (a temperature
that is not finite and positive, a top-k below 1, a negative seed) — prints one line
on stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numba

from sitp.data import load_names, load_tinyshakespeare, split_words
from sitp.models import MODELS
from sitp.models.sampling import sample_names
from sitp.random import Generator, seed
from sitp.tokenizers import BPETokenizer
from sitp.train.checkpoint import CheckpointError, load_checkpoint
from sitp.train.trainer import TrainConfig, Trainer, UsageError, check_device, plot_losses


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block), exit status 2."""

    def error(self, message):
        raise SystemExit(_fail(f"{self.prog}: error: {message}"))


def _fail(line: str) -> int:
    print(" ".join(line.split()), file=sys.stderr)
    return 2


def _number(kind, low=None, low_open=False):
    """An argparse ``type=``: parses ``kind`` (int or float), finite, at least ``low``
    (above it when ``low_open``); a bad value is argparse's one-line error, exit 2."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
            ) from None
        if kind is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        if low is not None and (value <= low if low_open else value < low):
            bound = (
                f"greater than {low:g}"
                if low_open
                else "positive"
                if low == 1 and kind is int
                else f"at least {low:g}"
            )
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in some messages
    return parse


_POSITIVE_INT = _number(int, 1)
_NON_NEGATIVE_INT = _number(int, 0)
_POSITIVE_FLOAT = _number(float, 0, low_open=True)
_NON_NEGATIVE_FLOAT = _number(float, 0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sitp",
        description="Train and sample the makemore ladder of models on names, with sitp.",
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )

    t = sub.add_parser(
        "train",
        help="train a model (or resume one) and checkpoint it",
        description="Train a model on names; checkpoint to --out.",
    )
    t.add_argument(
        "--model", choices=list(MODELS), default=None, help="which model (required unless --resume)"
    )
    t.add_argument(
        "--steps", type=_POSITIVE_INT, default=None, help="optimizer steps in all (1000)"
    )
    t.add_argument("--out", required=True, metavar="DIR", help="checkpoint directory")
    t.add_argument("--resume", action="store_true", help="continue the run saved in --out")
    t.add_argument(
        "--seed", type=_NON_NEGATIVE_INT, default=None, help="initialisation and batch order (42)"
    )
    t.add_argument("--device", default=None, help="cpu (default) or cuda")
    t.add_argument("--batch-size", type=_POSITIVE_INT, default=None, help="minibatch size (32)")
    t.add_argument(
        "--grad-accum",
        type=_POSITIVE_INT,
        default=None,
        metavar="K",
        help="split each minibatch into K micro-batches, one optimizer step (1)",
    )
    t.add_argument(
        "--lr",
        type=_POSITIVE_FLOAT,
        default=None,
        help="peak AdamW learning rate "
        "(default per model: " + ", ".join(f"{k} {v.lr:g}" for k, v in MODELS.items()) + ")",
    )
    t.add_argument(
        "--weight-decay", type=_NON_NEGATIVE_FLOAT, default=None, help="AdamW weight decay (0.01)"
    )
    t.add_argument(
        "--warmup", type=_NON_NEGATIVE_INT, default=None, help="warmup steps (min(100, steps/10))"
    )
    t.add_argument(
        "--data",
        default=None,
        metavar="PATH|offline|makemore",
        help="names corpus (offline: the census names that install with sitp)",
    )
    t.add_argument(
        "--eval-every", type=_NON_NEGATIVE_INT, default=None, help="steps between evaluations (100)"
    )
    t.add_argument(
        "--save-every", type=_NON_NEGATIVE_INT, default=None, help="steps between checkpoints (500)"
    )
    t.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a model config field, e.g. --set n_layer=2 (repeatable)",
    )
    t.add_argument(
        "--threads",
        type=_POSITIVE_INT,
        default=None,
        help="threads for sitp's parallel kernels (numba's default: all cores)",
    )
    t.add_argument("--quiet", action="store_true", help="no progress bar, no terminal plot")

    s = sub.add_parser(
        "sample",
        help="sample names from a checkpoint",
        description="Print names sampled from a trained model, then the share "
        "that are new (not in the training set).",
    )
    s.add_argument("dir", metavar="DIR", nargs="?", help="checkpoint directory written by train")
    s.add_argument("--out", metavar="DIR", default=None, help="the same, as train names it")
    s.add_argument("--num", type=_POSITIVE_INT, default=20, help="how many names (20)")
    s.add_argument(
        "--temperature", type=_POSITIVE_FLOAT, default=1.0, help="softmax temperature (1.0)"
    )
    s.add_argument(
        "--top-k", type=_POSITIVE_INT, default=None, help="sample among the k likeliest only"
    )
    s.add_argument("--seed", type=_NON_NEGATIVE_INT, default=None, help="seed of the draws")
    s.add_argument(
        "--max-len", type=_POSITIVE_INT, default=30, help="cut names at this length (30)"
    )

    k = sub.add_parser(
        "tokenizer",
        help="train a byte-level BPE tokenizer (section 5.1)",
        description="Tokenizers for text corpora (section 5.1).",
    )
    ksub = k.add_subparsers(dest="action", required=True, metavar="ACTION", parser_class=_Parser)
    kt = ksub.add_parser(
        "train",
        help="learn BPE merges from a corpus and save them",
        description="Learn byte-level BPE merges from a corpus; save them to --out "
        "(tokenizer.json, read back by sitp.tokenizers.BPETokenizer.load).",
    )
    kt.add_argument(
        "--data",
        default="shakespeare",
        metavar="CORPUS",
        help="shakespeare (tinyshakespeare, default), names, or the path of a UTF-8 text file",
    )
    kt.add_argument(
        "--vocab-size", type=_POSITIVE_INT, default=512, help="tokens, the 256 bytes included (512)"
    )
    kt.add_argument("--out", required=True, metavar="DIR", help="where tokenizer.json goes")
    return parser


def _corpus_text(data: str) -> str:
    """The text of ``--data``: a corpus sitp downloads, or a file."""
    if data == "shakespeare":
        return load_tinyshakespeare()
    if data == "names":
        return "\n".join(load_names("offline")) + "\n"
    path = Path(data)
    if not path.is_file():
        raise UsageError(f"--data: {data!r} is not shakespeare, names or a text file")
    return path.read_text(encoding="utf-8")


def tokenizer_command(args) -> int:
    """``sitp tokenizer train``: learn the merges, save them, report the compression."""
    text = _corpus_text(args.data)
    if args.vocab_size <= 256:
        raise UsageError(
            f"--vocab-size must leave room for merges above the 256 bytes, got {args.vocab_size}"
        )
    t0 = time.perf_counter()
    try:
        tok = BPETokenizer.train(text, args.vocab_size)
    except ValueError as error:
        raise UsageError(str(error)) from None
    seconds = time.perf_counter() - t0
    path = tok.save(args.out)
    n_bytes = len(text.encode("utf-8"))
    n_tokens = len(tok.encode_ordinary(text))
    print(
        f"{args.vocab_size - 256} merges learned from {n_bytes:,} bytes in {seconds:.1f} s; "
        f"{n_bytes / n_tokens:.2f} bytes per token; saved to {path}"
    )
    return 0


def _parse_sets(items: list[str]) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(_fail(f"sitp train: error: --set expects FIELD=VALUE, got {item!r}"))
        key, value = item.split("=", 1)
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def train_command(args) -> int:
    for name in ("steps", "batch_size", "eval_every", "save_every", "warmup"):
        value = getattr(args, name)
        if value is not None and value < (1 if name in ("steps", "batch_size") else 0):
            raise UsageError(
                f"--{name.replace('_', '-')} must be "
                f"{'positive' if name in ('steps', 'batch_size') else 'non-negative'}, "
                f"got {value}"
            )
    if args.device is not None:
        check_device(args.device)
    if args.threads is not None:
        if not 1 <= args.threads <= numba.config.NUMBA_NUM_THREADS:
            raise UsageError(
                f"--threads must be between 1 and "
                f"{numba.config.NUMBA_NUM_THREADS}, got {args.threads}"
            )
        numba.set_num_threads(args.threads)
    options = {
        "batch_size": args.batch_size,
        "grad_accum": args.grad_accum,
        "lr": args.lr,
        "weight_decay": args.weight_decay,
        "warmup": args.warmup,
        "eval_every": args.eval_every,
        "save_every": args.save_every,
        "device": args.device,
    }
    if args.resume:
        if args.set:
            raise UsageError("--set cannot change the model of a run being resumed")
        trainer = Trainer.resume(
            args.out, steps=args.steps, model=args.model, seed=args.seed, data=args.data, **options
        )
        if trainer.step >= trainer.config.steps:
            print(
                f"the run in {args.out} is at step {trainer.step} already; "
                f"pass a larger --steps to train on",
                file=sys.stderr,
            )
    else:
        if args.model is None:
            raise UsageError("--model is required (or --resume to continue a run)")
        given = {k: v for k, v in options.items() if v is not None}
        config = TrainConfig(
            model=args.model,
            steps=args.steps or 1000,
            seed=42 if args.seed is None else args.seed,
            data=args.data or "offline",
            **given,
        )
        overrides = _parse_sets(args.set)
        if overrides:
            try:
                MODELS[args.model].make_config(**overrides)
            except TypeError as error:
                raise UsageError(f"--set: {error}") from None
        trainer = Trainer.fresh(config, args.out, overrides)
    if not args.quiet:
        num = sum(p.numel() for p in trainer.model.parameters())
        print(
            f"{trainer.config.model}: {num:,} parameters, {len(trainer.splits.vocab)} tokens, "
            f"{len(trainer.splits.words['train']):,} training names "
            f"({trainer.config.data}); lr {trainer.config.lr:g}, batch "
            f"{trainer.config.batch_size}"
        )
    record = trainer.run(progress=not args.quiet)
    plot_losses(record, Path(args.out) / "loss.png", terminal=not args.quiet)
    return 0


def sample_command(args) -> int:
    if (args.dir is None) == (args.out is None):
        raise UsageError("give the checkpoint directory once: sitp sample DIR (or --out DIR)")
    args.dir = args.dir or args.out
    if args.num < 1:
        raise UsageError(f"--num must be positive, got {args.num}")
    if args.temperature <= 0:
        raise UsageError(f"--temperature must be positive, got {args.temperature}")
    if args.top_k is not None and args.top_k < 1:
        raise UsageError(f"--top-k must be positive, got {args.top_k}")
    point = load_checkpoint(args.dir)
    record = point.record
    spec = MODELS.get(record.get("model"))
    if spec is None:
        raise CheckpointError(f"corrupt checkpoint: unknown model {record.get('model')!r}")
    try:
        model = spec.build(record["model_config"])
    except (TypeError, KeyError, ValueError) as error:
        raise CheckpointError(f"corrupt checkpoint: bad model config ({error})") from None
    point.load_model(model)
    model.eval()
    generator = Generator()
    if args.seed is not None:
        generator.manual_seed(args.seed)
    else:
        generator.manual_seed(seed())
    names = sample_names(
        model,
        record["vocab"],
        args.num,
        max_len=args.max_len,
        temperature=args.temperature,
        top_k=args.top_k,
        generator=generator,
        fixed_context=spec.data == "context",
    )
    for name in names:
        print(name)
    data = record["train_config"]["data"]
    try:
        train_words = set(split_words(load_names(data), seed=record.get("split_seed", 42))[0])
    except (OSError, ValueError) as error:
        print(
            f"innovation rate: unknown (cannot load the training names from {data!r}: "
            f"{' '.join(str(error).split())[:200]})",
            file=sys.stderr,
        )
        return 0
    new = sum(name not in train_words for name in names)
    print(
        f"innovation rate: {new / len(names):.1%} ({new} of {len(names)} names are not in "
        f"the training set)"
    )
    return 0


def main(argv=None) -> int:
    """Runs the command line; returns the exit status (0, or 2 for a bad request)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            return train_command(args)
        if args.command == "tokenizer":
            return tokenizer_command(args)
        return sample_command(args)
    except (UsageError, CheckpointError) as error:
        return _fail(f"sitp {args.command}: error: {error}")
    except KeyboardInterrupt:
        _fail(f"sitp {args.command}: interrupted; the last checkpoint is kept")
        return 130
