"""Training a ladder model on names, with checkpoints you can resume bit for bit.

This is the loop behind ``python -m sitp train`` (see :mod:`sitp.train.cli`)::

    for step in range(start, steps):
        ix_B = randint(0, N, (B,), generator=batch_gen)   # a random minibatch
        logits, loss = model(X[ix_B], Y[ix_B])
        optimizer.zero_grad(); loss.backward(); optimizer.step(); scheduler.step()

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

import io
import math
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable

import sitp
from sitp.data import (
    IGNORE_INDEX,
    Vocab,
    build_context_dataset,
    build_sequence_dataset,
    load_names,
    split_words,
)
from sitp.models import MODELS
from sitp.train import checkpoint as ckpt

try:
    from tqdm import tqdm
except ImportError:  # tqdm is optional: no progress bar without it
    tqdm = None

SPLIT_SEED = 42  # the makemore split; --seed changes the initialisation and batches only


class UsageError(Exception):
    """A bad request (unknown model, wrong checkpoint, unavailable device): one line."""


@dataclass
class TrainConfig:
    """The options of a training run (``python -m sitp train --help``)."""

    model: str = "gpt"  # a key of sitp.models.MODELS
    steps: int = 1000  # optimizer steps in all (a resumed run continues to this)
    batch_size: int = 32  # B: names (sequence models) or windows (context models)
    grad_accum: int = 1  # K: the batch is run as K micro-batches of B/K, one optimizer step
    lr: float | None = None  # peak AdamW rate; None: the model's default (MODELS[...].lr)
    weight_decay: float = 0.01  # AdamW's decoupled decay
    warmup: int | None = None  # linear warmup steps; None: min(100, steps // 10)
    seed: int = 42  # seeds the initialisation and the batch order
    data: str = "offline"  # "offline", "makemore", or a path to a names file
    eval_every: int = 100  # steps between train/val evaluations (0: only at the end)
    save_every: int = 500  # steps between checkpoints (0: only at the end)
    device: str = "cpu"

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


# --------------------------------------------------------------------- evaluation
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


def make_optimizer(model, lr: float, weight_decay: float, grouped: bool = False):
    """AdamW with betas 0.9/0.99; ``grouped``: the two groups of :func:`param_groups`."""
    params = param_groups(model, weight_decay) if grouped else model.parameters()
    return sitp.optim.AdamW(params, lr=lr, betas=(0.9, 0.99), eps=1e-8, weight_decay=weight_decay)


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

    Build it with :meth:`fresh` or :meth:`resume`, then call :meth:`run`.
    """

    def __init__(self, config: TrainConfig, out_dir, model_config: dict | None = None):
        self.config = config = config.resolved()
        if config.model not in MODELS:
            raise UsageError(f"unknown model {config.model!r}; choose one of {', '.join(MODELS)}")
        check_device(config.device)
        if config.grad_accum < 1 or config.batch_size % config.grad_accum:
            raise UsageError(
                f"grad_accum must be a positive divisor of batch_size {config.batch_size}, "
                f"got {config.grad_accum}"
            )
        ckpt._safetensors()  # fail now, not after the training, if it is missing
        self.out_dir = Path(out_dir)
        self.spec = MODELS[config.model]
        try:
            probe = self.spec.make_config(**(model_config or {}))  # for block_size
        except TypeError as error:
            raise UsageError(f"bad {config.model} config: {error}") from None
        self.splits = load_splits(config.data, self.spec.data, probe.block_size)
        fields_ = {**asdict(probe), "vocab_size": len(self.splits.vocab)}
        self.model_config = self.spec.make_config(**fields_)
        sitp.manual_seed(config.seed)
        try:
            self.model = self.spec.build(self.model_config)
        except (AssertionError, TypeError, ValueError) as error:
            raise UsageError(
                f"cannot build {config.model} with {asdict(self.model_config)}: "
                f"{error or type(error).__name__}"
            ) from None
        self.batch_gen = sitp.Generator().manual_seed(config.seed)
        self.optimizer = make_optimizer(
            self.model, config.lr, config.weight_decay, grouped=config.model in GROUPED_DECAY
        )
        self.scheduler = make_scheduler(self.optimizer, config.warmup, config.steps)
        self.step = 0
        self.history: dict[str, list] = {"train": [], "eval": []}
        if config.device != "cpu":
            self.model.to(config.device)
            self.splits.tensors = {
                k: (X.to(config.device), Y.to(config.device))
                for k, (X, Y) in self.splits.tensors.items()
            }

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
        for key in ("seed", "data", "lr", "weight_decay", "warmup"):  # fixed by the run
            if overrides.get(key) is not None and overrides[key] != saved[key]:
                raise UsageError(
                    f"cannot change --{key.replace('_', '-')} when resuming "
                    f"(the checkpoint has {saved[key]!r})"
                )
        saved.update({k: v for k, v in overrides.items() if v is not None})
        if steps is not None:
            saved["steps"] = steps
        self = cls(TrainConfig(**saved), out_dir, record["model_config"])
        if self.splits.vocab.itos != record["vocab"]:
            raise UsageError(
                f"the names of {saved['data']!r} have another vocabulary than the checkpoint's"
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
        sitp.set_rng_state(record["rng"]["default"])
        self.batch_gen.set_state(record["rng"]["batch"])
        self.step = record["step"]
        self.history = record["history"]
        return self

    def record(self, **extra) -> dict:
        """The JSON record of the run at this step."""
        return {
            "model": self.config.model,
            "model_config": asdict(self.model_config),
            "train_config": asdict(self.config),
            "step": self.step,
            "vocab": self.splits.vocab.itos,
            "split_seed": SPLIT_SEED,
            "num_params": sum(p.numel() for p in self.model.parameters()),
            "rng": {"default": sitp.get_rng_state(), "batch": self.batch_gen.get_state()},
            "history": self.history,
            **extra,
        }

    def save(self, **extra) -> None:
        ckpt.save_checkpoint(
            self.out_dir, self.model, self.optimizer, self.scheduler, self.record(**extra)
        )

    # --8<-- [start:train_step]
    def train_step(self) -> float:
        """One minibatch: forward, backward, AdamW update, schedule. Returns the loss."""
        X, Y = self.splits.tensors["train"]
        ix_B = sitp.randint(0, len(X), (self.config.batch_size,), generator=self.batch_gen)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.accumulate_gradients(X[ix_B], Y[ix_B])
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

    def evaluate(self, split: str, limit: int | None = None) -> float:
        X, Y = self.splits.tensors[split]
        if limit is not None:  # a fixed slice: no random numbers drawn
            X, Y = X[:limit], Y[:limit]
        return evaluate(self.model, X, Y)

    def run(self, log: Callable[[str], None] = print, progress: bool = True) -> dict:
        """Trains from ``self.step`` to ``config.steps``, evaluating and saving as configured.

        Returns:
            The final record (with ``final``: the train/val/test losses).
        """
        cfg = self.config
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
        t0, start = time.perf_counter(), self.step
        while self.step < cfg.steps:
            loss = self.train_step()
            self.history["train"].append(loss)
            running = loss if running is None else 0.95 * running + 0.05 * loss
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{running:.4f}", refresh=False)
            if not math.isfinite(loss):
                raise FloatingPointError(f"the loss is {loss} at step {self.step}; lower --lr")
            if cfg.eval_every and self.step % cfg.eval_every == 0 and self.step < cfg.steps:
                self._log_eval(log)
            if cfg.save_every and self.step % cfg.save_every == 0 and self.step < cfg.steps:
                self.save()
        if bar is not None:
            bar.close()
        elapsed = time.perf_counter() - t0
        final = {split: self.evaluate(split) for split in ("train", "val", "test")}
        self.history["eval"].append(
            {"step": self.step, "train": final["train"], "val": final["val"]}
        )
        record = self.record(final=final)
        ckpt.save_checkpoint(self.out_dir, self.model, self.optimizer, self.scheduler, record)
        steps_run = self.step - start
        if steps_run:
            log(f"{steps_run} steps in {elapsed:.1f} s ({steps_run / elapsed:.1f} steps/s)")
        log(f"step {self.step}: train loss {final['train']:.4f}, val loss {final['val']:.4f}")
        log(f"test loss {final['test']:.4f}")
        return record

    def _log_eval(self, log) -> None:
        train = self.evaluate("train")
        val = self.evaluate("val")
        self.history["eval"].append({"step": self.step, "train": train, "val": val})
        log(f"step {self.step}: train loss {train:.4f}, val loss {val:.4f}")


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
    "TrainConfig",
    "Trainer",
    "UsageError",
    "evaluate",
    "load_splits",
    "param_groups",
    "plot_losses",
]
