"""The command line: ``python -m sitp`` (or ``sitp``) trains and samples the book's models.

Train a ladder model on names, resume it, sample names from it (Parts I and II)::

    python -m sitp train --model gpt --steps 2000 --out runs/gpt
    python -m sitp train --model gpt --steps 4000 --out runs/gpt --resume
    python -m sitp sample runs/gpt --num 20 --temperature 0.8 --top-k 10
    python -m sitp sample --out runs/gpt          # the same directory, named as train names it

Train a byte-level BPE tokenizer (section 5.1), a GPT on text with it or with characters,
and sample text through the KV-cache engine (section 5.4)::

    python -m sitp tokenizer train --data shakespeare --vocab-size 512 --out runs/bpe512
    python -m sitp train --model gpt --data shakespeare --tokenizer runs/bpe512 \
        --set block_size=64 --set rope=true --set norm=rmsnorm --out runs/shakespeare
    python -m sitp sample runs/shakespeare --prompt "ROMEO:" --max-new-tokens 300

A run is a text run when it names a ``--tokenizer`` (``char``, or the directory of a
saved BPE), or when ``--data`` is ``shakespeare`` (whose default tokenizer is ``char``);
``--data`` is then ``shakespeare`` or the path of a UTF-8 text file. Without either it
trains on names, as in Parts I and II. The text is cut 90/10 by character (nanoGPT's
split of tinyshakespeare), each part encoded into token shards under ``OUT/tokens``;
batches are random windows of ``block_size + 1`` tokens, and the evaluations report the
loss and the bits per byte on the first ``--eval-batches`` batches of each split, and at
the end on the whole validation split (see :mod:`sitp.train.trainer`). The run directory keeps
what sampling needs: the model config and the tokenizer (its characters in
``record.json``, or a copy of the BPE file, ``tokenizer.json``) beside the checkpoint.

``--set FIELD=VALUE`` sets a field of the model's config (for the GPT: ``block_size``,
``n_layer``, ``n_head``, ``n_embd``, ``dropout``, ``bias`` and section 5.3's ``rope``,
``norm``, ``norm_params``, ``qk_norm``, ``mlp``, ``tie_weights``, ``logit_softcap``);
the value is parsed as the field's type (``true``/``false`` for a switch), and a field
the config lacks (the error lists those it has) or a value it refuses is a one-line error.

``train`` shows a progress bar with the running loss and the tokens per second, prints
the train and validation losses every ``--eval-every`` steps and the final ones at the
end (and the test loss of names), checkpoints to ``--out`` every ``--save-every`` steps
(see :mod:`sitp.train.checkpoint`), and draws the loss curve in the terminal and in
``OUT/loss.png``.

``--compile`` runs each step's forward and backward through :func:`sitp.compile`
(chapter 6): traced at the first step, compiled, and replayed at every step after; the
run prints, at its end, what was compiled (or why it ran eagerly). A compiled run
checkpoints and resumes as exactly as an eager one.

Train on several processes (chapter 7) by starting ``train`` under the launcher, or
under MPI's own ``mpirun``; nothing else changes::

    python -m sitp.distributed.run --nproc-per-node 2 -m sitp train --model gpt \
        --data shakespeare --batch-size 24 --out runs/ddp
    mpirun -n 2 python -m sitp train --model gpt --batch-size 24 --out runs/ddp2

A ``train`` started among several processes (torchrun's ``WORLD_SIZE``, or ``mpirun``'s
own variables) joins the process group and wraps the model in
:class:`~sitp.nn.parallel.DistributedDataParallel`. ``--batch-size`` is the batch of
all the ranks together: every rank draws the same batch from the one seeded generator
and trains on its own ``B / ranks`` rows of it, so W ranks take the steps that one
process takes at the same ``--batch-size`` (to float rounding), a checkpoint is one
process's, and a run may be resumed on another number of ranks (exactly, when no
dropout draws on the ranks' generators). ``--batch-size`` must be a multiple of the
ranks times ``--grad-accum``. Rank 0 alone prints, evaluates and writes the run
directory (atomically, as always); each rank's generator for dropout is in the
checkpoint, so a resume on the same number of ranks is exact. Unless ``--threads`` is
given, the ranks of a machine share its cores for sitp's kernels. ``--zero`` shards
AdamW's state over the ranks (ZeRO-1: the same steps, a W-th of the moments on each
rank; the checkpoint holds the whole state, so a run resumes with or without it). An
error on any rank ends the whole job, with that rank's message.

``sample`` prints names, then the share of them that are not in the training set (the
innovation rate); from a text run it prints the prompt and ``--max-new-tokens`` tokens
drawn after it (default prompt: a newline), and the tokens per second on stderr.

A bad request — an unknown model, a missing or damaged checkpoint, a checkpoint of
another model, a device this build lacks, a number out of its range (a temperature
that is not finite and positive, a top-k below 1, a negative seed), an unknown
``--set`` field, a prompt that is empty or has a character the tokenizer lacks —
prints one line on stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import traceback
from dataclasses import fields
from pathlib import Path

import numba

import sitp
from sitp import distributed as dist
from sitp.data import load_names, split_words
from sitp.models import MODELS
from sitp.models.engine import Engine
from sitp.models.gpt import MODERN
from sitp.models.sampling import sample_names
from sitp.posttrain import cli as posttrain_cli
from sitp.posttrain import midtrain as posttrain_midtrain
from sitp.random import Generator, seed
from sitp.tokenizers import BPETokenizer
from sitp.train.args import Parser as _Parser
from sitp.train.args import fail as _fail
from sitp.train.args import number as _number
from sitp.train.checkpoint import CheckpointError, load_checkpoint
from sitp.train.trainer import (
    TrainConfig,
    Trainer,
    UsageError,
    check_device,
    corpus_text,
    plot_losses,
    tokenizer_from_record,
)

_POSITIVE_INT = _number(int, 1)
_NON_NEGATIVE_INT = _number(int, 0)
_POSITIVE_FLOAT = _number(float, 0, low_open=True)
_NON_NEGATIVE_FLOAT = _number(float, 0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sitp",
        description="Train and sample the book's models with sitp: the makemore ladder "
        "on names, a GPT on text.",
        epilog="Post-training (chapter 8) has its own commands, each with --help: "
        + ", ".join(f"'sitp {verb}'" for verb in POSTTRAIN)
        + ".",
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )

    t = sub.add_parser(
        "train",
        help="train a model (or resume one) and checkpoint it",
        description="Train a model on names, or a GPT on text (with --tokenizer); "
        "checkpoint to --out. Under 'python -m sitp.distributed.run --nproc-per-node N -m "
        "sitp train ...' or 'mpirun -n N python -m sitp train ...' the N ranks train "
        "with DistributedDataParallel; rank 0 prints and writes.",
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
    t.add_argument(
        "--batch-size",
        type=_POSITIVE_INT,
        default=None,
        help="minibatch size (32); on several ranks, of all of them together (each "
        "trains on batch-size / ranks rows)",
    )
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
        metavar="CORPUS",
        help="names: offline (the census names that install with sitp, default), makemore "
        "or a names file; text: shakespeare (tinyshakespeare) or a UTF-8 text file",
    )
    t.add_argument(
        "--tokenizer",
        default=None,
        metavar="char|bytes|DIR",
        help="train on text: char (one token per character), bytes (one per UTF-8 byte) or a directory written by "
        "'sitp tokenizer train' (default for --data shakespeare: char)",
    )
    t.add_argument(
        "--eval-batches",
        type=_NON_NEGATIVE_INT,
        default=None,
        help="text: batches of each split read per evaluation (20; 0: all)",
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
        help="set a model config field, e.g. --set n_layer=2 --set rope=true (repeatable)",
    )
    t.add_argument(
        "--threads",
        type=_POSITIVE_INT,
        default=None,
        help="threads for sitp's parallel kernels (numba's default: all cores; on "
        "several ranks, the cores divided among a machine's ranks)",
    )
    t.add_argument(
        "--zero",
        action="store_true",
        default=None,
        help="on several ranks: shard AdamW's state over them (ZeRO-1, the same steps in "
        "less memory per rank); no effect on one process",
    )
    t.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run each step's forward and backward through sitp.compile (chapter 6; one "
        "process); a resumed run keeps the run's choice unless --compile/--no-compile says",
    )
    t.add_argument("--quiet", action="store_true", help="no progress bar, no terminal plot")

    s = sub.add_parser(
        "sample",
        help="sample names or text from a checkpoint",
        description="Print names sampled from a trained model, then the share "
        "that are new (not in the training set); or, from a text run, a prompt and the "
        "text drawn after it.",
    )
    s.add_argument("dir", metavar="DIR", nargs="?", help="checkpoint directory written by train")
    s.add_argument("--out", metavar="DIR", default=None, help="the same, as train names it")
    s.add_argument("--num", type=_POSITIVE_INT, default=None, help="names: how many (20)")
    s.add_argument(
        "--temperature", type=_POSITIVE_FLOAT, default=1.0, help="softmax temperature (1.0)"
    )
    s.add_argument(
        "--top-k", type=_POSITIVE_INT, default=None, help="sample among the k likeliest only"
    )
    s.add_argument("--seed", type=_NON_NEGATIVE_INT, default=None, help="seed of the draws")
    s.add_argument(
        "--max-len", type=_POSITIVE_INT, default=None, help="names: cut at this length (30)"
    )
    s.add_argument("--prompt", default=None, help="text: the text to continue (default: a newline)")
    s.add_argument(
        "--max-new-tokens",
        type=_POSITIVE_INT,
        default=None,
        help="text: tokens to draw after the prompt (300)",
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


def tokenizer_command(args) -> int:
    """``sitp tokenizer train``: learn the merges, save them, report the compression."""
    text = corpus_text(args.data)
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


_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


def parse_sets(items: list[str], model: str) -> dict:
    """``--set FIELD=VALUE`` items as config fields of ``model``, each of its field's type.

    Raises:
        UsageError: for an item without ``=``, a field the config lacks, ``vocab_size``
            (the data sets it), a value of the wrong type, or one the config refuses.
    """
    spec = MODELS[model]
    defaults = spec.make_config()
    kinds = {f.name: type(getattr(defaults, f.name)) for f in fields(defaults)}
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set expects FIELD=VALUE, got {item!r}")
        if key not in kinds:
            raise UsageError(
                f"--set: {model} has no config field {key!r}; its fields: {', '.join(kinds)}"
            )
        if key == "vocab_size":
            raise UsageError("--set vocab_size: the data sets it (its characters or tokenizer)")
        out[key] = _field_value(key, text, kinds[key])
    try:
        spec.make_config(**out)  # the config's own checks (n_embd divisible by n_head, ...)
    except (TypeError, ValueError) as error:
        raise UsageError(f"--set: {error}") from None
    return out


def _field_value(key: str, text: str, kind: type):
    if kind is bool:
        if text.lower() not in _TRUE | _FALSE:
            raise UsageError(f"--set {key}: expected true or false, got {text!r}")
        return text.lower() in _TRUE
    if kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise UsageError(f"--set {key}: expected {what}, got {text!r}") from None
        if not math.isfinite(value):
            raise UsageError(f"--set {key}: must be finite, got {text!r}")
        return value
    return text


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name, "")
        if value.strip().isdigit():
            return int(value)
    return None


def launched_world_size() -> int:
    """The number of processes this one was started among: torchrun's and the sitp
    launcher's ``WORLD_SIZE``, or a bare ``mpirun``'s (MPICH's ``PMI_SIZE``, Open MPI's
    ``OMPI_COMM_WORLD_SIZE``); 1 for a process started alone."""
    return _env_int("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE") or 1


def start_ranks() -> int:
    """Joins the process group when started among several processes; returns the world
    size. Each rank then gets an equal share of the cores for sitp's kernels (as
    torchrun sets ``OMP_NUM_THREADS=1``), unless ``--threads`` says otherwise."""
    if launched_world_size() == 1:
        return 1
    try:
        dist.init_process_group()
    except (RuntimeError, ValueError) as error:
        raise UsageError(f"cannot join the other processes: {error}") from None
    local = _env_int("LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")
    local = local or dist.get_world_size()
    numba.set_num_threads(max(1, numba.config.NUMBA_NUM_THREADS // local))
    return dist.get_world_size()


def train_command(args) -> int:
    if args.device is not None:
        check_device(args.device)
    if args.threads is not None:
        if not 1 <= args.threads <= numba.config.NUMBA_NUM_THREADS:
            raise UsageError(
                f"--threads must be between 1 and "
                f"{numba.config.NUMBA_NUM_THREADS}, got {args.threads}"
            )
    start_ranks()
    if args.threads is not None:
        numba.set_num_threads(args.threads)
    rank = dist.get_rank() if dist.is_initialized() else 0
    quiet = args.quiet or rank > 0  # rank 0 alone prints
    options = {
        "batch_size": args.batch_size,
        "grad_accum": args.grad_accum,
        "lr": args.lr,
        "weight_decay": args.weight_decay,
        "warmup": args.warmup,
        "eval_every": args.eval_every,
        "save_every": args.save_every,
        "device": args.device,
        "eval_batches": args.eval_batches,
        "zero": args.zero,
        "compile": args.compile,
    }
    if args.resume:
        if args.set:
            raise UsageError("--set cannot change the model of a run being resumed")
        trainer = Trainer.resume(
            args.out,
            steps=args.steps,
            model=args.model,
            seed=args.seed,
            data=args.data,
            tokenizer=args.tokenizer,
            **options,
        )
        if trainer.step >= trainer.config.steps and rank == 0:
            print(
                f"the run in {args.out} is at step {trainer.step} already; "
                f"pass a larger --steps to train on",
                file=sys.stderr,
            )
    else:
        if args.model is None:
            raise UsageError("--model is required (or --resume to continue a run)")
        tokenizer = args.tokenizer
        if tokenizer is None and args.data == "shakespeare":
            tokenizer = "char"  # tinyshakespeare is text: its characters by default
        given = {k: v for k, v in options.items() if v is not None}
        data = args.data or ("shakespeare" if tokenizer is not None else "offline")
        config = TrainConfig(
            model=args.model,
            steps=args.steps or 1000,
            seed=42 if args.seed is None else args.seed,
            data=data,
            tokenizer=tokenizer,
            **given,
        )
        overrides = parse_sets(args.set, args.model)
        trainer = Trainer.fresh(config, args.out, overrides)
    if not quiet:
        print(describe_run(trainer))
    record = trainer.run(progress=not quiet)
    if rank == 0:
        plot_losses(record, Path(args.out) / "loss.png", terminal=not quiet)
    return 0


def describe_run(trainer) -> str:
    """One line: the model, its size and its data."""
    cfg, num = trainer.config, sum(p.numel() for p in trainer.model.parameters())
    head = f"{cfg.model}: {num:,} parameters"
    tail = f"lr {cfg.lr:g}, batch {cfg.batch_size}"
    if trainer.world > 1:
        tail += f" ({trainer.world} ranks x {cfg.batch_size // trainer.world})"
    if cfg.compile:
        tail += ", compiled"
    if trainer.text is None:
        return (
            f"{head}, {len(trainer.splits.vocab)} tokens, "
            f"{len(trainer.splits.words['train']):,} training names ({cfg.data}); {tail}"
        )
    shards = trainer.text.shards
    return (
        f"{head}, {trainer.text.tokenizer.vocab_size} tokens ({cfg.tokenizer}), "
        f"{shards.num_tokens('train'):,} training and {shards.num_tokens('val'):,} validation "
        f"tokens ({cfg.data}); {tail}, block {trainer.model_config.block_size}"
    )


def sample_command(args) -> int:
    if (args.dir is None) == (args.out is None):
        raise UsageError("give the checkpoint directory once: sitp sample DIR (or --out DIR)")
    args.dir = args.dir or args.out
    point = load_checkpoint(args.dir)
    record = point.record
    spec = MODELS.get(record.get("model"))
    if spec is None:
        raise CheckpointError(f"corrupt checkpoint: unknown model {record.get('model')!r}")
    text_run = record.get("tokenizer") is not None
    wrong = ("--num", "--max-len") if text_run else ("--prompt", "--max-new-tokens")
    for option in wrong:
        if getattr(args, option[2:].replace("-", "_")) is not None:
            kind = "names" if text_run else "text"
            this = "a text" if text_run else "a names"
            raise UsageError(f"{option} is for {kind} runs; {args.dir} holds {this} run")
    try:
        model = spec.build(record["model_config"])
    except (TypeError, KeyError, ValueError) as error:
        raise CheckpointError(f"corrupt checkpoint: bad model config ({error})") from None
    point.load_model(model)
    model.eval()
    generator = Generator()
    generator.manual_seed(seed() if args.seed is None else args.seed)
    if text_run:
        return _sample_text(args, model, record, generator)
    names = sample_names(
        model,
        record["vocab"],
        args.num or 20,
        max_len=args.max_len or 30,
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


def _sample_text(args, model, record, generator) -> int:
    """A text run's sample: the prompt and ``--max-new-tokens`` tokens drawn after it."""
    tokenizer, _ = tokenizer_from_record(args.dir, record)
    prompt = "\n" if args.prompt is None else args.prompt
    if not prompt:
        raise UsageError("--prompt is empty; give at least one character to continue")
    try:
        ids = tokenizer.encode(prompt)
    except ValueError as error:
        raise UsageError(f"--prompt: {error}") from None
    n = 300 if args.max_new_tokens is None else args.max_new_tokens
    t0 = time.perf_counter()
    ids = generate_text(model, ids, n, args.temperature, args.top_k, generator)
    seconds = time.perf_counter() - t0
    print(tokenizer.decode(ids))
    print(f"{n} tokens in {seconds:.2f} s ({n / seconds:.0f} tokens/s)", file=sys.stderr)
    return 0


def generate_text(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    """The token ids ``ids`` extended by ``max_new_tokens``, drawn with the KV-cache Engine.

    The cache holds ``block_size`` positions. When a pass has filled it, the last
    ``block_size // 2`` tokens are prefilled again as a fresh context (at positions
    0, 1, ..., as every training window began) and decoding goes on; a prompt longer
    than ``block_size`` is cut to its last ``block_size`` tokens. Each pass is
    exact; only the context shrinks at the seams.
    """
    engine, T = Engine(model), model.block_size
    ids, keep, left = list(ids), len(ids), max_new_tokens
    while left:
        context = ids[-min(keep, T) :]
        n = min(left, T - len(context) + 1)  # the prompt and n - 1 fed-back tokens fit
        for next_B1, _ in engine.stream(
            sitp.tensor([context]), n, temperature=temperature, top_k=top_k, generator=generator
        ):
            ids.append(int(next_B1.item()))
        left -= n
        keep = max(1, T // 2)
    return ids


#: ``sitp pretrain``'s defaults, before the command line's own options (which win): a
#: GPT with 5.3's modern options on the bytes of tinyshakespeare, wide enough in its
#: block for every conversation of chapter 8 (the longest identity one is 150 tokens).
PRETRAIN_DEFAULTS = (
    "--model", "gpt", "--data", "shakespeare", "--tokenizer", "bytes", "--batch-size", "16",
    *(f"--set={k}={str(v).lower()}" for k, v in dict(
        MODERN, n_layer=4, n_head=4, n_embd=128, block_size=160).items()),
)  # fmt: skip


def main_pretrain(argv=None) -> int:
    """``sitp pretrain``: chapter 8's first stage, ``sitp train`` with :data:`PRETRAIN_DEFAULTS`.

    A byte tokenizer, because a chat model must read whatever a user types (digits,
    which tinyshakespeare's characters lack, among them). ``--resume`` continues a run
    as ``sitp train --resume`` does, with the options the run was started with. Any
    chapter-5 GPT run can also be the next stage's ``--init`` directly, if its
    tokenizer can write the tasks' text (bytes or a BPE can; characters may not).
    """
    argv = list(argv or [])
    if "-h" in argv or "--help" in argv:
        print("usage: sitp pretrain --out DIR [sitp train's options]\n\n"
              + " ".join(main_pretrain.__doc__.split("\n\n")[1].split()) + "\n\nDefaults: "
              + " ".join(PRETRAIN_DEFAULTS) + "\n")  # fmt: skip
        return main(["train", "--help"])
    if "--resume" in argv:
        return main(["train", *argv])
    return main(["train", *PRETRAIN_DEFAULTS, *argv])


#: Chapter 8's stages, each a command of its own (sitp.posttrain).
POSTTRAIN = {
    "pretrain": main_pretrain,
    "midtrain": posttrain_midtrain.main_midtrain,
    "sft": posttrain_cli.main_sft,
    "rl": posttrain_cli.main_rl,
    "rm": posttrain_cli.main_rm,
    "dpo": posttrain_cli.main_dpo,
    "eval": posttrain_cli.main_eval,
    "chat": posttrain_cli.main_chat,
}


def main(argv=None) -> int:
    """Runs the command line; returns the exit status (0, or 2 for a bad request)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in POSTTRAIN:
        return POSTTRAIN[argv[0]](argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status = _command(args)
    except BaseException as error:
        if not _in_job() or isinstance(error, SystemExit) and not error.code:
            raise
        prefix = f"[rank {dist.get_rank()}]: "
        lines = "".join(traceback.format_exception(error)).rstrip("\n").split("\n")
        sys.stderr.write("".join(prefix + line + "\n" for line in lines))
        _abort(1)
    if status and _in_job():
        _abort(status)
    if _in_job():
        dist.destroy_process_group()
    return status


def _command(args) -> int:
    try:
        if args.command == "train":
            return train_command(args)
        if args.command == "tokenizer":
            return tokenizer_command(args)
        return sample_command(args)
    except (UsageError, CheckpointError) as error:
        if _in_job() and dist.get_rank() > 0:
            return _fail(f"sitp {args.command}: error on rank {dist.get_rank()}: {error}")
        return _fail(f"sitp {args.command}: error: {error}")
    except KeyboardInterrupt:
        _fail(f"sitp {args.command}: interrupted; the last checkpoint is kept")
        return 130


def _in_job() -> bool:
    """Whether this process is one rank of several (``train`` joined the process group)."""
    return dist.is_initialized() and dist.get_world_size() > 1


def _abort(status: int) -> None:
    """Ends every rank of the job: the others may be waiting in a collective that this
    rank will never join, and a bare ``mpirun`` would wait with them for ever."""
    sys.stdout.flush()
    sys.stderr.flush()
    dist.group.WORLD.comm.Abort(status)
