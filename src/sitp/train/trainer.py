"""Training a ladder model on names, or a GPT on text, with checkpoints you can resume bit for bit.

This is the loop behind ``python -m sitp train`` (see :mod:`sitp.train.cli`)::

    for step in range(start, steps):
        X_B, Y_B = next_batch()                            # a random minibatch
        logits, loss = model(X_B, Y_B)
        optimizer.zero_grad(); loss.backward(); optimizer.step(); scheduler.step()

A run reads one of two kinds of data (:meth:`Trainer.next_batch`):

* names (chapters 3.1–3.5): the corpus split 80/10/10 by name, each part built into
  tensors (X, Y) once; a batch is B random rows, ``randint(0, N, (B,), generator=batch_gen)``;
* text (chapter 5, ``TrainConfig.tokenizer`` set): the corpus cut 90/10 by character
  as nanoGPT's ``prepare.py`` cuts tinyshakespeare, each part encoded with the
  tokenizer into ``uint16`` shards under ``OUT/tokens`` (:func:`sitp.data.tokens.encode_text`:
  the training shards first, then the validation ones, none mixing the two); a batch
  is B random windows of T + 1 tokens (:meth:`~sitp.data.tokens.TokenShards.get_batch`).
  Every evaluation reads the same first ``eval_batches`` batches of each split, in
  order, so the points of the curve compare, and reports the loss and the bits per
  byte of the text those targets stand for (:func:`evaluate_text`); at the end the
  whole validation split is read as well (``final["val_all"]``).

With ``grad_accum = K`` the batch of B is run as K micro-batches of B/K, each loss
weighted by its share of the targets, and the gradients add up in ``.grad`` before the
one optimizer step: the step of the whole batch, in a K-th of the activation memory
(:meth:`Trainer.accumulate_gradients`).

The optimizer is AdamW (betas 0.9/0.99, weight decay 0.01, as makemore). For the GPT
the decay is in a parameter group of its own, as nanoGPT's ``configure_optimizers``:
matrices and embeddings (parameters of two or more dimensions) decay, biases and
LayerNorm gains do not (:func:`param_groups`). The other models decay every
parameter, as makemore does. The rate
warms up linearly over the first ``warmup`` steps, then decays along half a cosine
to a tenth of ``lr`` at ``steps``.

On several ranks (a ``train`` started by ``python -m sitp.distributed.run`` or
``mpirun``, after ``sitp.distributed.init_process_group()``), the model is wrapped in
:class:`~sitp.nn.parallel.DistributedDataParallel` (``self.net``; ``self.model`` stays the
bare model, which saving and evaluation use). ``batch_size`` is the batch of all the
ranks: each rank draws the same batch of B from the same generator and trains on its
own B/W rows (:meth:`Trainer.next_batch`), with each loss weighted so that DDP's average
is the gradient of the whole batch's mean loss (:meth:`Trainer.accumulate_gradients_ddp`;
the first K - 1 micro-batches under ``no_sync()``). W ranks thus take the steps of one
process at the same ``batch_size``, up to the order in which float sums are rounded.
Rank 0 alone prints, evaluates and writes checkpoints; the others wait for it. Each
rank's default generator (dropout's masks) is seeded ``seed + rank`` after the
initialisation (rank 0's is left as one process has it) and saved, every rank's, in
``rng.default_ranks``. With ``zero`` the AdamW state is sharded over the ranks
(:class:`~sitp.distributed.optim.ZeroRedundancyOptimizer`, ZeRO-1): the same steps, and
the checkpoint holds the whole state, gathered on rank 0.

Resuming is exact. Everything the next step depends on is in the checkpoint: the
weights (and BatchNorm's running statistics), AdamW's moments and step counts, the
scheduler's step, and the states of the two random generators — sitp's default one
(used by the model's initialisation) and the batch generator that picks the
minibatches. A run stopped at step 30 and resumed to 60 ends with the same weights,
to the bit, as a run that went to 60 at once. (Evaluation draws no random numbers
and changes no state, so it may happen at any step.) Resuming with a larger
``--steps`` than the run started with stretches the rest of the cosine.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable

import sitp
from sitp import distributed as dist
from sitp.compile.api import explain_text
from sitp.data import (
    IGNORE_INDEX,
    Vocab,
    build_context_dataset,
    build_sequence_dataset,
    load_names,
    load_tinyshakespeare,
    split_words,
)
from sitp.data.tokens import (
    ByteTokenizer,
    CharTokenizer,
    ShardStream,
    TokenShards,
    bits_per_byte,
    encode_text,
    text_bytes,
)
from sitp.distributed.optim import ZeroRedundancyOptimizer
from sitp.models import MODELS
from sitp.nn.parallel import DistributedDataParallel
from sitp.tokenizers import BPETokenizer
from sitp.train import checkpoint as ckpt

try:
    from tqdm import tqdm
except ImportError:  # tqdm is optional: no progress bar without it
    tqdm = None

SPLIT_SEED = 42  # the makemore split; --seed changes the initialisation and batches only
TEXT_MODELS = frozenset({"gpt"})  # the models a text run can train
VAL_FRACTION = 0.1  # text: the last tenth of the characters is the validation split
TOKENIZER_FILE = "tokenizer.json"  # a text run's copy of its BPE, in the run directory


class UsageError(Exception):
    """A bad request (unknown model, wrong checkpoint, unavailable device): one line."""


@dataclass
class TrainConfig:
    """The options of a training run (``python -m sitp train --help``)."""

    model: str = "gpt"  # a key of sitp.models.MODELS
    steps: int = 1000  # optimizer steps in all (a resumed run continues to this)
    batch_size: int = 32  # B: names or windows per step, over all ranks together
    grad_accum: int = 1  # K: the batch is run as K micro-batches of B/K, one optimizer step
    lr: float | None = None  # peak AdamW rate; None: the model's default (MODELS[...].lr)
    weight_decay: float = 0.01  # AdamW's decoupled decay
    warmup: int | None = None  # linear warmup steps; None: min(100, steps // 10)
    seed: int = 42  # seeds the initialisation and the batch order
    data: str = "offline"  # names: "offline", "makemore", a path; text: "shakespeare", a path
    eval_every: int = 100  # steps between train/val evaluations (0: only at the end)
    save_every: int = 500  # steps between checkpoints (0: only at the end)
    device: str = "cpu"
    tokenizer: str | None = None  # text runs: "char", "bytes" or a BPE directory; None: names
    eval_batches: int = 20  # text: batches of each split per evaluation, in order (0: all)
    zero: bool = False  # several ranks: shard AdamW's state (ZeRO-1); no effect on one
    compile: bool = False  # forward and backward through sitp.compile (chapter 6)

    def resolved(self) -> "TrainConfig":
        """A copy with the model-dependent defaults filled in."""
        lr = MODELS[self.model].lr if self.lr is None else self.lr
        warmup = min(100, self.steps // 10) if self.warmup is None else self.warmup
        return TrainConfig(**{**asdict(self), "lr": lr, "warmup": warmup})


# --------------------------------------------------------------------------- data
@dataclass
class Splits:
    """The corpus cut three ways, and the tensors of each part."""

    vocab: Vocab
    words: dict[str, list[str]]  # "train", "val", "test" -> names
    tensors: dict[str, tuple[sitp.Tensor, sitp.Tensor]]  # -> (X, Y)


def load_splits(data: str, kind: str, block_size: int) -> Splits:
    """Loads the names, splits them 80/10/10 and builds each part's (X, Y).

    Args:
        data: the corpus (see :func:`sitp.data.load_names`).
        kind: ``"context"`` (windows of ``block_size``) or ``"sequence"`` (whole names,
            padded to the longest name of the corpus plus one).
        block_size: the model's context length.
    """
    try:
        words = load_names(data)
    except (OSError, ValueError) as error:  # OfflineError is an OSError
        raise UsageError(
            f"cannot load names from {data!r}: {' '.join(str(error).split())}"
        ) from None
    if len(words) < 10:
        raise UsageError(f"the corpus {data!r} has {len(words)} names; need at least 10")
    vocab = Vocab(words)
    parts = dict(zip(("train", "val", "test"), split_words(words, seed=SPLIT_SEED)))
    if kind == "context":
        tensors = {k: build_context_dataset(w, vocab, block_size) for k, w in parts.items()}
    else:
        T = max(len(w) for w in words) + 1
        if T > block_size:
            raise UsageError(
                f"the longest name needs {T} positions, more than the model's "
                f"block_size {block_size}"
            )
        tensors = {k: build_sequence_dataset(w, vocab, T) for k, w in parts.items()}
    return Splits(vocab, parts, tensors)


# ---------------------------------------------------------------------- text data
def corpus_text(data: str) -> str:
    """The text of a corpus: ``shakespeare`` (tinyshakespeare), ``names``, or a UTF-8 file."""
    if data == "shakespeare":
        return load_tinyshakespeare()
    if data == "names":
        return "\n".join(load_names("offline")) + "\n"
    path = Path(data)
    if not path.is_file():
        raise UsageError(f"--data: {data!r} is not shakespeare, names or a text file")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"--data: cannot read {data} as UTF-8 text ({error})") from None


def load_tokenizer(spec: str, text: str):
    """The tokenizer a text run names: ``"char"`` (the characters of ``text``), ``"bytes"``
    (the 256 byte values of UTF-8: any text, the chat chapter's choice), or the directory
    (or ``tokenizer.json``) of a BPE saved by ``sitp tokenizer train``.

    Returns:
        ``(tokenizer, saved)``: ``saved`` is the BPE file's bytes (None for ``char`` and
        ``bytes``).
    """
    if spec == "char":
        return CharTokenizer(text), None
    if spec == "bytes":
        return ByteTokenizer(), None
    path = Path(spec)
    path = path / TOKENIZER_FILE if path.is_dir() else path
    if not path.is_file():
        raise UsageError(
            f"--tokenizer: {spec!r} is neither 'char' nor a directory holding {TOKENIZER_FILE} "
            f"(write one with: python -m sitp tokenizer train --out DIR)"
        )
    return _bpe_from_bytes(path.read_bytes(), path), path.read_bytes()


def _bpe_from_bytes(data: bytes, path) -> BPETokenizer:
    try:
        state = json.loads(data.decode("utf-8"))
        if not isinstance(state, dict) or state.get("format") != "sitp-bpe":
            raise ValueError("its format is not sitp-bpe")
        tokenizer = BPETokenizer(state["merges"], state["special_tokens"], state["pattern"])
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, IndexError) as error:
        raise UsageError(f"--tokenizer: {path} is not a saved sitp BPE ({error})") from None
    # the shards' cache key: the merges, not only the tokens they make
    tokenizer.name = f"bpe-{hashlib.sha256(data).hexdigest()[:16]}"
    return tokenizer


def tokenizer_from_record(out_dir, record: dict):
    """The tokenizer a text run saved: its characters in the record, or its BPE file.

    Returns:
        ``(tokenizer, saved)`` as :func:`load_tokenizer`.
    """
    info = record.get("tokenizer") or {}
    if info.get("kind") == "char" and isinstance(info.get("chars"), str):
        return CharTokenizer(info["chars"]), None
    if info.get("kind") == "bytes":
        return ByteTokenizer(), None
    if info.get("kind") == "bpe":
        data = ckpt.read_extra_file(out_dir, record, TOKENIZER_FILE)
        try:
            return _bpe_from_bytes(data, Path(out_dir) / TOKENIZER_FILE), data
        except UsageError as error:
            raise ckpt.CheckpointError(f"corrupt checkpoint: {error}") from None
    raise ckpt.CheckpointError(f"corrupt checkpoint: bad tokenizer entry {info!r}")


@dataclass
class TextData:
    """A text corpus encoded into shards: what a text run samples its windows from."""

    tokenizer: object  # CharTokenizer, ByteTokenizer or BPETokenizer
    saved: bytes | None  # the BPE file kept in the run directory (None: char, bytes)
    shards: TokenShards
    source_sha256: str  # of the corpus text, so a resume can tell it has not changed

    def tokenizer_record(self) -> dict:
        if isinstance(self.tokenizer, ByteTokenizer):
            return {"kind": "bytes"}
        if self.saved is None:
            return {"kind": "char", "chars": "".join(self.tokenizer.chars)}
        return {"kind": "bpe", "file": TOKENIZER_FILE, "vocab_size": self.tokenizer.vocab_size}


def load_text_data(
    data: str, tokenizer, saved: bytes | None, out_dir, batch_size: int, block_size: int
) -> TextData:
    """Encodes the corpus ``data`` into ``out_dir/tokens`` (once; a resume reuses it)."""
    text = corpus_text(data)
    try:
        shards = encode_text(text, tokenizer, Path(out_dir) / "tokens", val_fraction=VAL_FRACTION)
    except ValueError as error:
        raise UsageError(f"cannot encode {data!r}: {' '.join(str(error).split())}") from None
    need = batch_size * block_size + 1
    for split in ("train", "val"):
        have = max(s.num_tokens for s in shards.split(split))
        if have < need:
            raise UsageError(
                f"the {split} part of {data!r} has {have:,} tokens; a batch of "
                f"{batch_size} x {block_size} + 1 needs {need:,}: use a longer text, or a "
                f"smaller --batch-size or block_size"
            )
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return TextData(tokenizer, saved, shards, sha)


# --------------------------------------------------------------------- evaluation
@sitp.no_grad()
def evaluate_text(
    model, data: TextData, split: str, batch_size: int, block_size: int, max_batches=0
) -> dict:
    """Loss and bits per byte of a split, read in order from its start (no random numbers).

    ``max_batches`` batches of B x T targets (0: the whole split). The bits per byte
    count the bytes of text that exactly those targets decode to.

    Returns:
        ``{"loss": nats per token, "bpb": bits per byte}``.
    """
    was_training = model.training
    model.eval()
    device = next(iter(model.parameters())).device
    stream = ShardStream(data.shards, split, batch_size, block_size, loop=False)
    total, count, num_bytes = 0.0, 0, 0
    for i, (x_BT, y_BT) in enumerate(stream):
        if max_batches and i == max_batches:
            break
        num_bytes += text_bytes(data.tokenizer, y_BT.numpy().reshape(-1).tolist())
        _, loss = model(x_BT.to(device), y_BT.to(device))
        total += loss.item() * y_BT.numel()
        count += y_BT.numel()
    model.train(was_training)
    mean = total / count
    return {"loss": mean, "bpb": bits_per_byte(mean, count, num_bytes)}


@sitp.no_grad()
def evaluate(model, X, Y, batch_size: int = 1024) -> float:
    """The mean loss per predicted character over all of (X, Y), in eval mode.

    Sequence targets padded with -1 are skipped, as in training: each chunk's mean
    loss is weighted by its number of real targets.
    """
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(X), batch_size):
        Xb, Yb = X[i : i + batch_size], Y[i : i + batch_size]
        n = int((Yb != IGNORE_INDEX).sum().item())
        if n == 0:
            continue
        _, loss = model(Xb, Yb)
        total += loss.item() * n
        count += n
    model.train(was_training)
    return total / max(count, 1)


# ------------------------------------------------------------------- the trainer
# --8<-- [start:grad_step]
def grad_step(model, X_B, Y_B, share, state):
    """Forward and backward of one (micro-)batch, the loss weighted by ``share`` (a 0-d
    tensor); the gradients add up in ``.grad``. Returns the loss, detached.

    This is the function ``--compile`` hands to :func:`sitp.compile`. ``state`` (the
    model's parameters and buffers) is not read here: passed as an argument, each of its
    tensors is an input of the compiled program, so that a buffer the step writes in
    place (BatchNorm's running statistics) is an output of the program rather than a
    graph break, and the guards check the parameters' layouts on every call.
    """
    _, loss = model(X_B, Y_B)
    (loss * share).backward()
    return loss.detach()


# --8<-- [end:grad_step]


def compile_step(model):
    """:func:`grad_step` of ``model`` compiled, the tracing call rerun as the program
    (``rerun_trace``): every step, the first after a resume included, runs the same
    program, so that a resumed compiled run repeats the uninterrupted one bit for bit."""
    return sitp.compile(functools.partial(grad_step, model), name="train step", rerun_trace=True)


#: The models whose AdamW decays matrices only (two parameter groups, chapter 3.5).
GROUPED_DECAY = frozenset({"gpt"})


# --8<-- [start:param_groups]
def param_groups(model, weight_decay: float) -> list[dict]:
    """Two AdamW groups: decay on tensors of 2+ dimensions, none on biases and norms."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]  # Linear weights, embeddings
    no_decay = [p for p in params if p.dim() < 2]  # biases, LayerNorm gains and shifts
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


# --8<-- [end:param_groups]


def make_optimizer(
    model, lr: float, weight_decay: float, grouped: bool = False, zero: bool = False
):
    """AdamW with betas 0.9/0.99; ``grouped``: the two groups of :func:`param_groups`;
    ``zero``: sharded over the ranks by :class:`~sitp.distributed.optim.ZeroRedundancyOptimizer`
    (the same steps, each rank keeping the moments of its share only)."""
    params = param_groups(model, weight_decay) if grouped else model.parameters()
    options = {"lr": lr, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": weight_decay}
    if zero:
        return ZeroRedundancyOptimizer(params, optimizer_class=sitp.optim.AdamW, **options)
    return sitp.optim.AdamW(params, **options)


def make_scheduler(optimizer, warmup: int, steps: int):
    """Linear warmup, then half a cosine down to 0.1 * lr at ``steps``."""
    return sitp.optim.lr_scheduler.get_cosine_schedule_with_warmup(
        optimizer, num_warmup_steps=min(warmup, steps), num_training_steps=steps, min_lr_ratio=0.1
    )


def check_device(device: str) -> None:
    """Raises UsageError for a device this build cannot use."""
    if device == "cpu":
        return
    if device.startswith("cuda"):
        if not sitp.cuda.is_available():
            raise UsageError(
                "--device cuda: no CUDA GPU answers (sitp.cuda.is_available() is "
                "False); use --device cpu"
            )
        return
    raise UsageError(f"unknown device {device!r}; use cpu or cuda")


class Trainer:
    """A model, its data, optimizer, scheduler and generators: one training run.

    Build it with :meth:`fresh` or :meth:`resume`, then call :meth:`run`. A names run
    has ``splits`` (and ``text`` None); a text run has ``text`` (and ``splits`` None).

    Args:
        config: the options; ``config.tokenizer`` set makes it a text run.
        out_dir: the run directory (checkpoints; a text run's shards in ``tokens/``).
        model_config: fields of the model's config to override.
        tokenizer: a text run's tokenizer and its saved BPE bytes, ``(tok, bytes | None)``;
            by default built from ``config.tokenizer``.
    """

    def __init__(
        self, config: TrainConfig, out_dir, model_config: dict | None = None, tokenizer=None
    ):
        self.config = config = config.resolved()
        if config.model not in MODELS:
            raise UsageError(f"unknown model {config.model!r}; choose one of {', '.join(MODELS)}")
        if config.tokenizer is not None and config.model not in TEXT_MODELS:
            raise UsageError(
                f"text corpora train {', '.join(sorted(TEXT_MODELS))} only, not {config.model!r}"
            )
        check_device(config.device)
        if config.grad_accum < 1 or config.batch_size % config.grad_accum:
            raise UsageError(
                f"grad_accum must be a positive divisor of batch_size {config.batch_size}, "
                f"got {config.grad_accum}"
            )
        # the ranks of a multi-process run (chapter 7): rank 0 alone prints and writes
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        if config.batch_size % (self.world * config.grad_accum):
            raise UsageError(
                f"batch_size {config.batch_size} is the batch of all {self.world} ranks "
                f"together: it must be a multiple of ranks x grad_accum = "
                f"{self.world} x {config.grad_accum}"
            )
        if config.eval_batches < 0:
            raise UsageError(f"eval_batches must be non-negative, got {config.eval_batches}")
        ckpt._safetensors()  # fail now, not after the training, if it is missing
        self.out_dir = Path(out_dir)
        self.spec = MODELS[config.model]
        try:
            probe = self.spec.make_config(**(model_config or {}))  # for block_size
        except (TypeError, ValueError) as error:
            raise UsageError(f"bad {config.model} config: {error}") from None
        self.splits, self.text = None, None
        if config.tokenizer is None:
            self.splits = load_splits(config.data, self.spec.data, probe.block_size)
            vocab_size = len(self.splits.vocab)
        else:
            if tokenizer is None:
                text = corpus_text(config.data)
                tokenizer = load_tokenizer(config.tokenizer, text)
            if self.rank > 0:  # rank 0 writes the shards; the others then reuse them
                dist.barrier()
            self.text = load_text_data(
                config.data, *tokenizer, self.out_dir, config.batch_size, probe.block_size
            )
            if self.rank == 0 and self.world > 1:
                dist.barrier()
            vocab_size = self.text.tokenizer.vocab_size
        fields_ = {**asdict(probe), "vocab_size": vocab_size}
        self.model_config = self.spec.make_config(**fields_)
        self.batch_tokens = 0  # targets in the last batch (the progress bar's tokens/s)
        sitp.manual_seed(config.seed)
        try:
            self.model = self.spec.build(self.model_config)
        except (AssertionError, TypeError, ValueError) as error:
            raise UsageError(
                f"cannot build {config.model} with {asdict(self.model_config)}: "
                f"{error or type(error).__name__}"
            ) from None
        self.batch_gen = sitp.Generator().manual_seed(config.seed)
        self.zero = config.zero and self.world > 1
        self.optimizer = make_optimizer(
            self.model,
            config.lr,
            config.weight_decay,
            grouped=config.model in GROUPED_DECAY,
            zero=self.zero,
        )
        self.scheduler = make_scheduler(self.optimizer, config.warmup, config.steps)
        self.step = 0
        self.history: dict[str, list] = {"train": [], "eval": []}
        if config.device != "cpu":
            self.model.to(config.device)
        if config.device != "cpu" and self.splits is not None:
            self.splits.tensors = {
                k: (X.to(config.device), Y.to(config.device))
                for k, (X, Y) in self.splits.tensors.items()
            }
        # what training calls: the model itself, or DDP around it (which averages the
        # gradients over the ranks in backward); saving and evaluation use the model
        self.net = self.model
        if self.world > 1:
            if self.rank > 0:  # dropout's masks differ between ranks; rank 0's stream is
                sitp.manual_seed(config.seed + self.rank)  # the one a single process has
            self.net = DistributedDataParallel(self.model)
        self.compiled = None  # --compile: grad_step through sitp.compile
        if config.compile:
            if self.world > 1:
                raise UsageError(
                    "--compile trains on one process (sitp.compile does not see DDP's "
                    "collectives); drop --compile or the launcher"
                )
            self.compiled = compile_step(self.model)
            self._state = list(self.model.parameters()) + [
                b for b in self.model.buffers() if b is not None
            ]

    @classmethod
    def fresh(cls, config: TrainConfig, out_dir, model_config: dict | None = None) -> "Trainer":
        """A new run into ``out_dir``, which must not hold a checkpoint yet."""
        if ckpt.has_checkpoint(out_dir):
            raise UsageError(
                f"{out_dir} already holds a checkpoint; pass --resume to continue "
                "it, or choose another --out"
            )
        return cls(config, out_dir, model_config)

    @classmethod
    def resume(
        cls, out_dir, steps: int | None = None, model: str | None = None, **overrides
    ) -> "Trainer":
        """Continues the run saved in ``out_dir`` (to ``steps``, if given)."""
        point = ckpt.load_checkpoint(out_dir)
        record = point.record
        saved_model = record.get("model")
        if saved_model not in MODELS:
            raise ckpt.CheckpointError(
                f"corrupt checkpoint: unknown model {saved_model!r} in {out_dir}/record.json"
            )
        if model is not None and model != saved_model:
            raise UsageError(
                f"the checkpoint in {out_dir} is a {saved_model!r} model, not {model!r}"
            )
        saved = {
            f.name: record["train_config"][f.name]
            for f in fields(TrainConfig)
            if f.name in record["train_config"]
        }
        for key in ("seed", "data", "lr", "weight_decay", "warmup", "tokenizer"):  # fixed
            if overrides.get(key) is not None and overrides[key] != saved.get(key):
                raise UsageError(
                    f"cannot change --{key.replace('_', '-')} when resuming "
                    f"(the checkpoint has {saved.get(key)!r})"
                )
        saved.update({k: v for k, v in overrides.items() if v is not None})
        if steps is not None:
            saved["steps"] = steps
        tokenizer = None
        if saved.get("tokenizer") is not None:  # the run's own copy, not the original
            tokenizer = tokenizer_from_record(out_dir, record)
        self = cls(TrainConfig(**saved), out_dir, record["model_config"], tokenizer)
        if self.splits is not None and self.splits.vocab.itos != record["vocab"]:
            raise UsageError(
                f"the names of {saved['data']!r} have another vocabulary than the checkpoint's"
            )
        if self.text is not None and self.text.source_sha256 != record.get("corpus_sha256"):
            raise UsageError(
                f"the text of {saved['data']!r} has changed since the run began "
                f"(its SHA-256 differs from the checkpoint's)"
            )
        point.load_model(self.model)
        try:
            self.optimizer.load_state_dict(point.optimizer_state)
        except (ValueError, KeyError, RuntimeError) as error:
            raise ckpt.CheckpointError(
                f"corrupt checkpoint: optimizer state does not fit ({error})"
            ) from None
        if record.get("scheduler"):  # its schedule function is the new one (new --steps)
            self.scheduler.load_state_dict(record["scheduler"])
        ranks = record["rng"].get("default_ranks")
        if self.world == 1 or ranks is None or len(ranks) != self.world:
            if self.rank == 0:  # another world size: exact when no rank draws (no dropout)
                sitp.set_rng_state(record["rng"]["default"])
        else:
            sitp.set_rng_state(ranks[self.rank])
        self.batch_gen.set_state(record["rng"]["batch"])
        self.step = record["step"]
        self.history = record["history"]
        return self

    def record(self, **extra) -> dict:
        """The JSON record of the run at this step (rank 0's generators; :meth:`save` adds
        every rank's default generator, ``rng.default_ranks``, in a multi-process run)."""
        if self.text is None:
            data = {"vocab": self.splits.vocab.itos, "split_seed": SPLIT_SEED}
        else:
            data = {
                "tokenizer": self.text.tokenizer_record(),
                "corpus_sha256": self.text.source_sha256,
                "val_fraction": VAL_FRACTION,
            }
        return {
            "model": self.config.model,
            "model_config": asdict(self.model_config),
            "train_config": asdict(self.config),
            "step": self.step,
            **data,
            "num_params": sum(p.numel() for p in self.model.parameters()),
            "rng": {"default": sitp.get_rng_state(), "batch": self.batch_gen.get_state()},
            "history": self.history,
            **extra,
        }

    def save(self, **extra) -> None:
        """Checkpoints the run (with a text run's BPE file beside it), atomically.

        Every rank calls it: the ranks' default generators are gathered (dropout's masks
        differ between ranks), rank 0 alone writes, and the others wait for it. AdamW's
        state is the same on every rank, so rank 0's is the run's; ZeRO's shards are
        gathered on rank 0 first, and saved as the one AdamW's state they make up (so a
        run may resume with or without ``zero``, on any number of ranks).
        """
        record = self.record(**extra)
        if self.zero:
            self.optimizer.consolidate_state_dict(0)
        if self.world > 1:
            states = [None] * self.world
            dist.all_gather_object(states, sitp.get_rng_state())
            record["rng"]["default_ranks"] = states
        if self.rank == 0:
            files = {}
            if self.text is not None and self.text.saved is not None:
                files[TOKENIZER_FILE] = self.text.saved
            ckpt.save_checkpoint(
                self.out_dir, self.model, self.optimizer, self.scheduler, record, files
            )
        if self.world > 1:
            dist.barrier()  # no rank goes on (or ends) before the checkpoint is written

    def next_batch(self):
        """The next training minibatch ``(X_B, Y_B)``, drawn with the batch generator.

        Names: B random rows of the training tensors. Text: B random windows of the
        training shards, ``(B, T)`` inputs and the ``(B, T)`` targets one token on.

        On several ranks every rank draws the same batch of B from the same generator
        and keeps its own rows, ``[rank B/W, (rank + 1) B/W)`` of W ranks: together they
        take the step one process takes on the whole batch, and a resume needs only the
        one generator's state. ``self.batch_count`` is the batch's targets on all ranks.
        """
        B = self.config.batch_size
        if self.text is not None:
            T = self.model_config.block_size
            X_B, Y_B = self.text.shards.get_batch("train", B, T, generator=self.batch_gen)
            self.batch_tokens = self.batch_count = B * T
            if self.config.device != "cpu":
                X_B, Y_B = X_B.to(self.config.device), Y_B.to(self.config.device)
        else:
            X, Y = self.splits.tensors["train"]
            ix_B = sitp.randint(0, len(X), (B,), generator=self.batch_gen)
            X_B, Y_B = X[ix_B], Y[ix_B]
            self.batch_tokens = int((Y_B != IGNORE_INDEX).sum().item())  # not the padding
            self.batch_count = self.batch_tokens
        if self.world > 1:
            b = B // self.world
            X_B, Y_B = (
                X_B[self.rank * b : (self.rank + 1) * b],
                Y_B[self.rank * b : (self.rank + 1) * b],
            )
        return X_B, Y_B

    # --8<-- [start:train_step]
    def train_step(self) -> float:
        """One minibatch: forward, backward, AdamW update, schedule. Returns the loss."""
        X_B, Y_B = self.next_batch()
        self.optimizer.zero_grad(set_to_none=True)
        if self.world > 1:  # several ranks: this rank's rows, through DDP
            loss = self.accumulate_gradients_ddp(X_B, Y_B)
        else:
            loss = self.accumulate_gradients(X_B, Y_B)
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        return loss

    # --8<-- [end:train_step]

    # --8<-- [start:grad_accum]
    def accumulate_gradients(self, X_B, Y_B) -> float:
        """Backward over the batch in ``grad_accum`` micro-batches; returns the batch's loss.

        Each micro-batch's mean loss is weighted by its share of the batch's targets
        (those not ``IGNORE_INDEX``) before its backward pass, so the gradients that
        add up in ``.grad`` are those of the whole batch's mean loss; with no padding
        the weight is 1/K. (Exact for every model without batch statistics: BatchNorm
        normalises each micro-batch by its own mean. With dropout, the masks are drawn
        per micro-batch, so they differ from K = 1's.)
        """
        K = self.config.grad_accum
        if self.compiled is not None:
            return self.accumulate_gradients_compiled(X_B, Y_B)
        if K == 1:
            _, loss = self.model(X_B, Y_B)
            loss.backward()
            return loss.item()
        M = len(X_B) // K  # micro-batch size
        counts = [int((Y_B[k * M : (k + 1) * M] != IGNORE_INDEX).sum().item()) for k in range(K)]
        total, loss_sum = sum(counts), 0.0
        for k in range(K):
            if total and not counts[k]:  # all padding: nothing to learn, and 0/0 as a loss
                continue
            _, loss = self.model(X_B[k * M : (k + 1) * M], Y_B[k * M : (k + 1) * M])
            share = counts[k] / total if total else 1.0 / K
            (loss * share).backward()  # .grad accumulates across micro-batches
            loss_sum += loss.item() * share
        return loss_sum

    # --8<-- [end:grad_accum]

    def accumulate_gradients_compiled(self, X_B, Y_B) -> float:
        """:meth:`accumulate_gradients` through the compiled :func:`grad_step`: the same
        micro-batches and weights, each weight a 0-d tensor (an input of the program,
        so that the weights of the micro-batches share one compiled signature)."""
        K = self.config.grad_accum
        M = len(X_B) // K
        counts = [int((Y_B[k * M : (k + 1) * M] != IGNORE_INDEX).sum().item()) for k in range(K)]
        total, loss_sum = sum(counts), 0.0
        dtype = self._state[0].dtype  # the loss's: the weight multiplies it exactly
        for k in range(K):
            if total and not counts[k]:
                continue
            share = counts[k] / total if total else 1.0 / K
            share_t = sitp.tensor(share, dtype=dtype, device=X_B.device)
            X_M, Y_M = X_B, Y_B
            if K > 1:  # copies at offset 0: the guards see one layout for every micro-batch
                X_M, Y_M = X_B[k * M : (k + 1) * M].clone(), Y_B[k * M : (k + 1) * M].clone()
            loss = self.compiled(X_M, Y_M, share_t, self._state)
            loss_sum += loss.item() * share
        return loss_sum

    # --8<-- [start:grad_accum_ddp]
    def accumulate_gradients_ddp(self, X_B, Y_B) -> float:
        """This rank's rows of the batch, in ``grad_accum`` micro-batches, under DDP.

        A micro-batch's mean loss is weighted by W x its share of the targets of the
        whole batch (all ranks): DDP divides the sum of the ranks' gradients by W, so
        ``.grad`` ends as the gradient of the whole batch's mean loss, as on one process
        (with no padding every weight is 1/K). The first micro-batches run under
        ``no_sync()``, so the gradients are exchanged once, in the last backward. The
        loss returned is the whole batch's (one all-reduce of a number).
        """
        K, W = self.config.grad_accum, self.world
        M = len(X_B) // K  # micro-batch size
        counts = [int((Y_B[k * M : (k + 1) * M] != IGNORE_INDEX).sum().item()) for k in range(K)]
        total = self.batch_count  # the targets of every rank's rows
        last = max((k for k in range(K) if counts[k]), default=None)
        if last is None:  # every row holds a target (a name's end, a window's next token)
            raise RuntimeError(f"rank {self.rank}: a batch without a single target")
        loss_sum = 0.0
        for k in range(last + 1):
            if not counts[k]:  # all padding: nothing to learn, and 0/0 as a loss
                continue
            X_M, Y_M = X_B[k * M : (k + 1) * M], Y_B[k * M : (k + 1) * M]
            with self.net.no_sync() if k < last else contextlib.nullcontext():
                _, loss = self.net(X_M, Y_M)
                (loss * (W * counts[k] / total)).backward()
            loss_sum += loss.item() * counts[k] / total
        mean = sitp.tensor([loss_sum], dtype=sitp.float64)
        dist.all_reduce(mean)  # the ranks' parts of the batch's mean loss
        return mean.item()

    # --8<-- [end:grad_accum_ddp]

    def evaluate(self, split: str, limit: int | None = None) -> float:
        """The mean loss of a split (names: all of it, or its first ``limit`` rows;
        text: its first ``limit`` batches, or ``eval_batches`` of them)."""
        if self.text is not None:
            return self.evaluate_text(split, limit)["loss"]
        X, Y = self.splits.tensors[split]
        if limit is not None:  # a fixed slice: no random numbers drawn
            X, Y = X[:limit], Y[:limit]
        return evaluate(self.model, X, Y)

    def evaluate_text(self, split: str, max_batches: int | None = None) -> dict:
        """A text run's ``{"loss", "bpb"}`` on a split (``eval_batches`` batches by default)."""
        max_batches = self.config.eval_batches if max_batches is None else max_batches
        B, T = self.config.batch_size, self.model_config.block_size
        return evaluate_text(self.model, self.text, split, B, T, max_batches)

    def eval_entry(self) -> dict:
        """One evaluation for the history: the train and val losses (and text's bits
        per byte, on the first ``eval_batches`` batches of each split)."""
        if self.text is None:
            return {"step": self.step, "train": self.evaluate("train"), "val": self.evaluate("val")}
        train = self.evaluate_text("train")
        val = self.evaluate_text("val")
        return {
            "step": self.step,
            "train": train["loss"],
            "val": val["loss"],
            "train_bpb": train["bpb"],
            "val_bpb": val["bpb"],
        }

    @staticmethod
    def describe_eval(entry: dict) -> str:
        line = f"step {entry['step']}: train loss {entry['train']:.4f}, val loss {entry['val']:.4f}"
        if "val_bpb" in entry:
            line += f" ({entry['val_bpb']:.4f} bits per byte)"
        return line

    def run(self, log: Callable[[str], None] = print, progress: bool = True) -> dict:
        """Trains from ``self.step`` to ``config.steps``, evaluating and saving as configured.

        The progress bar shows the running loss and the tokens per second (the targets
        trained on: real characters of names, B x T of text).

        Returns:
            The final record (with ``final``: the train/val/test losses of names; the
            train/val losses and bits per byte of text).
        """
        cfg = self.config
        if self.rank > 0:  # rank 0 prints, evaluates and writes; the others train
            log, progress = _silent, False
        else:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        bar = None
        if tqdm is None:  # no bar without tqdm
            progress = False
        if progress:
            bar = tqdm(
                total=cfg.steps,
                initial=self.step,
                desc=cfg.model,
                unit="step",
                dynamic_ncols=True,
                file=sys.stderr,
            )
            log = bar.write
        running = None
        t0, start, tokens = time.perf_counter(), self.step, 0
        while self.step < cfg.steps:
            loss = self.train_step()
            self.history["train"].append(loss)
            tokens += self.batch_tokens
            running = loss if running is None else 0.95 * running + 0.05 * loss
            if bar is not None:
                rate = tokens / max(time.perf_counter() - t0, 1e-9)
                bar.update(1)
                bar.set_postfix(loss=f"{running:.4f}", tok_s=f"{rate:,.0f}", refresh=False)
            if not math.isfinite(loss):
                raise FloatingPointError(f"the loss is {loss} at step {self.step}; lower --lr")
            if cfg.eval_every and self.step % cfg.eval_every == 0 and self.step < cfg.steps:
                self._log_eval(log)
            if cfg.save_every and self.step % cfg.save_every == 0 and self.step < cfg.steps:
                self.save()
        if bar is not None:
            bar.close()
        elapsed = time.perf_counter() - t0
        record = self.finish()
        steps_run = self.step - start
        if steps_run:
            log(
                f"{steps_run} steps in {elapsed:.1f} s ({steps_run / elapsed:.1f} steps/s, "
                f"{tokens / elapsed:,.0f} tokens/s)"
            )
        if self.rank > 0:
            return record
        if self.compiled is not None and steps_run:
            log("sitp.compile: " + explain_text(self.compiled).replace("\n", "; "))
        log(self.describe_eval(self.history["eval"][-1]))
        final = record["final"]
        if "test" in final:
            log(f"test loss {final['test']:.4f}")
        if "val_all" in final:
            log(
                f"the whole val split: loss {final['val_all']:.4f} "
                f"({final['val_all_bpb']:.4f} bits per byte)"
            )
        return record

    def finish(self) -> dict:
        """The final evaluation, into the history and a last checkpoint; returns the record.

        On several ranks rank 0 evaluates (the model it holds is every rank's); the
        others only take part in the checkpoint and return a record without ``final``.
        """
        if self.rank > 0:
            self.save()
            return self.record()
        entry = self.eval_entry()
        self.history["eval"].append(entry)
        final = {k: v for k, v in entry.items() if k != "step"}
        if self.text is None:
            final["test"] = self.evaluate("test")
        else:  # every batch of the validation split, in order
            whole = self.evaluate_text("val", 0)
            final.update(val_all=whole["loss"], val_all_bpb=whole["bpb"])
        self.save(final=final)
        return self.record(final=final)

    def _log_eval(self, log) -> None:
        if self.rank > 0:
            return
        entry = self.eval_entry()
        self.history["eval"].append(entry)
        log(self.describe_eval(entry))


def _silent(line: str) -> None:
    """The log of the ranks other than 0: they print nothing."""


# ------------------------------------------------------------------------ plots
def plot_losses(record: dict, png_path=None, terminal: bool = True) -> None:
    """Draws the loss curves: to a PNG with matplotlib, and in the terminal with plotext."""
    train = record["history"]["train"]
    evals = record["history"]["eval"]
    window = max(1, len(train) // 100)  # smooth: mean of each window of steps
    xs = [min((i + 1) * window, len(train)) for i in range(len(train) // window)]
    ys = [sum(train[i * window : (i + 1) * window]) / window for i in range(len(train) // window)]
    title = f"{record['model']}: loss per step"
    try:  # the Agg canvas directly: no pyplot, so a notebook's backend is left alone
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # late: matplotlib is slow
        from matplotlib.figure import Figure  # late: matplotlib is slow to import
    except ImportError:  # optional: no loss.png without it
        png_path = None
    if png_path is not None:
        fig = Figure(figsize=(6, 3.5))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        ax.plot(xs, ys, label=f"train (mean of {window} steps)")
        if evals:
            ax.plot([e["step"] for e in evals], [e["val"] for e in evals], "o-", label="val")
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy (nats)")
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        ckpt.write_atomically(png_path, buf.getvalue())
    if terminal and xs:
        try:
            print(terminal_plot(xs, ys, evals, title))
        except ImportError:  # plotext is optional
            pass


def terminal_plot(xs, ys, evals, title: str, width: int = 80, height: int = 20) -> str:
    """The loss curves as text, drawn by plotext (its 6.x API, or the 5.x one)."""
    import plotext as plx  # late: plotext only when the terminal curve is drawn

    val_x, val_y = [e["step"] for e in evals], [e["val"] for e in evals]
    if hasattr(plx, "plot"):  # plotext 5.x: a matplotlib-like module of functions
        plx.clear_figure()
        plx.plot(xs, ys, label="train")
        if evals:
            plx.plot(val_x, val_y, label="val", marker="dot")
        plx.title(title)
        plx.plotsize(width, height)
        return plx.build()
    fig = plx.figure  # plotext 6.x: figure.draw(figure.signal(...))
    fig.clear()
    fig.plot_size(width, height)
    fig.draw(fig.signal(xs, ys).lines().label("train"))
    if evals:
        fig.draw(fig.signal(val_x, val_y).label("val"))
    fig.title(title)
    return fig.build().string(colorless=not sys.stdout.isatty())


__all__ = [
    "GROUPED_DECAY",
    "TEXT_MODELS",
    "TextData",
    "TrainConfig",
    "Trainer",
    "UsageError",
    "corpus_text",
    "evaluate",
    "evaluate_text",
    "load_splits",
    "load_text_data",
    "load_tokenizer",
    "param_groups",
    "plot_losses",
]
