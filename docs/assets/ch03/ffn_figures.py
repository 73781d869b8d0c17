"""Draw the figures of chapter 3.1 with sitp: the Bengio et al. MLP on the census names.

* ``ffn-lr.png``: the learning-rate sweep. One run of plain SGD whose rate grows
  exponentially from 1e-3 to 1 over ``steps`` minibatches; the loss of each minibatch
  against the rate it was taken with.
* ``ffn-loss.png`` (and its numbers, ``ffn-loss.json``): a training run of the MLP (context 3,
  embedding 10, hidden 200) with
  SGD at rate 0.1, divided by 10 for the last quarter of the steps; the minibatch loss
  (mean over 100 steps) and the loss on the whole training and validation splits.

Run from the repository root: ``python docs/assets/ch03/ffn_figures.py`` (about ten
minutes on a 2-core CPU for the default 12,000 steps). The chapter's fences call
:func:`lr_sweep` and :func:`train_curve` with a few hundred steps.

``--seeds 0 1 2 3 4`` trains the SGD run again for each seed ``s`` (initial weights from
seed ``s``, minibatches from seed ``s + 1``: seed 0 is the figure's run) and writes each
run's final train and validation losses, with their mean and sample standard deviation,
to ``ffn-loss-seeds.json`` (no figure).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

import sitp
from sitp.bench import cpu_model
from sitp.data import Vocab, build_context_dataset, load_names, split_words
from sitp.models.mlp import MLP, MLPConfig

HERE = Path(__file__).resolve().parent
BATCH = 32


def data(block_size: int = 3):
    """The vocabulary and the (X, Y) tensors of the train and validation splits."""
    words = load_names("offline")
    vocab = Vocab(words)
    train_words, val_words, _ = split_words(words, seed=42)
    return (
        vocab,
        build_context_dataset(train_words, vocab, block_size),
        build_context_dataset(val_words, vocab, block_size),
    )


def lr_sweep(steps: int = 1000, lo: float = 1e-3, hi: float = 1.0, seed: int = 0):
    """Rates (steps,) and the minibatch loss taken at each of them (steps,)."""
    vocab, (X, Y), _ = data()
    sitp.manual_seed(seed)
    model = MLP(MLPConfig(vocab_size=len(vocab)))
    opt = sitp.optim.SGD(model.parameters(), lr=lo)
    gen = sitp.Generator().manual_seed(seed + 1)
    lrs = lo * (hi / lo) ** (np.arange(steps) / (steps - 1))
    losses = []
    for lr in lrs:
        for group in opt.param_groups:
            group["lr"] = float(lr)
        ix = sitp.randint(0, X.shape[0], (BATCH,), generator=gen)
        _, loss = model(X[ix], Y[ix])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return lrs, np.array(losses)


@sitp.no_grad()
def evaluate(model, X, Y) -> float:
    model.eval()
    _, loss = model(X, Y)
    model.train()
    return loss.item()


def train_curve(steps: int = 12000, eval_every: int = 1000, lr: float = 0.1, seed: int = 0):
    """Trains the MLP with SGD; returns the model and its history.

    The rate is ``lr`` for the first three quarters of the steps and ``lr / 10`` after.
    History: ``"train_step"`` (steps,) minibatch losses, and ``"eval"``, a list of
    (step, train loss, val loss) on the whole splits.
    """
    vocab, (Xtr, Ytr), (Xva, Yva) = data()
    sitp.manual_seed(seed)
    model = MLP(MLPConfig(vocab_size=len(vocab)))
    opt = sitp.optim.SGD(model.parameters(), lr=lr)
    gen = sitp.Generator().manual_seed(seed + 1)
    history = {
        "train_step": [],
        "eval": [(0, evaluate(model, Xtr, Ytr), evaluate(model, Xva, Yva))],
    }
    for step in range(1, steps + 1):
        if step == 3 * steps // 4 + 1:
            for group in opt.param_groups:
                group["lr"] = lr / 10
        ix = sitp.randint(0, Xtr.shape[0], (BATCH,), generator=gen)
        _, loss = model(Xtr[ix], Ytr[ix])
        opt.zero_grad()
        loss.backward()
        opt.step()
        history["train_step"].append(loss.item())
        if step % eval_every == 0 or step == steps:
            history["eval"].append((step, evaluate(model, Xtr, Ytr), evaluate(model, Xva, Yva)))
    return model, vocab, history


def draw_lr(lrs, losses, path):
    import matplotlib  # late: matplotlib is slow to import; only figures need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # late: matplotlib is slow to import; only figures need it

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=120)
    ax.plot(lrs, losses, lw=0.6, color="#999999", label="minibatch loss")
    k = 25
    smooth = np.convolve(losses, np.ones(k) / k, mode="valid")
    ax.plot(lrs[k - 1 :], smooth, color="#3050c0", label=f"mean of {k}")
    ax.set_xscale("log")
    ax.set_ylim(2.0, 4.0)
    ax.set_xlabel("learning rate")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title("One SGD run, rate growing from 1e-3 to 1")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def draw_curve(history, path):
    import matplotlib  # late: matplotlib is slow to import; only figures need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # late: matplotlib is slow to import; only figures need it

    steps = np.arange(1, len(history["train_step"]) + 1)
    k = 100
    losses = np.array(history["train_step"])
    n = len(losses) // k * k
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=120)
    ax.plot(
        steps[:n].reshape(-1, k).mean(1),
        losses[:n].reshape(-1, k).mean(1),
        color="#999999",
        label=f"minibatch loss (mean of {k})",
    )
    ev = np.array(history["eval"])
    ax.plot(ev[:, 0], ev[:, 1], "o-", color="#3050c0", label="train split")
    ax.plot(ev[:, 0], ev[:, 2], "s-", color="#d05020", label="validation split")
    ax.axhline(2.3706, ls="--", color="k", lw=0.8, label="bigram, val (chapter 1)")
    ax.set_ylim(1.8, 3.0)
    ax.set_xlabel("step (batch 32)")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title("MLP, context 3, emb 10, hidden 200, SGD 0.1 then 0.01")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(out_dir=HERE, sweep_steps: int = 1000, steps: int = 12000, eval_every: int = 1000):
    out_dir = Path(out_dir)
    t0 = time.time()
    lrs, losses = lr_sweep(sweep_steps)
    draw_lr(lrs, losses, out_dir / "ffn-lr.png")
    model, vocab, history = train_curve(steps, eval_every)
    draw_curve(history, out_dir / "ffn-loss.png")
    step, tr, va = history["eval"][-1]
    (out_dir / "ffn-loss.json").write_text(
        json.dumps(
            {
                "machine": platform.processor() or platform.machine(),
                "steps": steps,
                "seconds": round(time.time() - t0),
                "eval": history["eval"],
            },
            indent=1,
        )
    )
    print(
        f"{platform.processor() or platform.machine()}: {steps} steps in {time.time() - t0:.0f} s; "
        f"final train {tr:.4f}, val {va:.4f}"
    )
    return [out_dir / "ffn-lr.png", out_dir / "ffn-loss.png"], history


def main_seeds(seeds, out_dir=HERE, steps: int = 12000, eval_every: int = 1000) -> dict:
    """The SGD run of :func:`train_curve` for each of ``seeds``: final losses, mean, sd."""
    runs = []
    for seed in seeds:
        t0 = time.time()
        _, _, history = train_curve(steps, eval_every, seed=seed)
        step, tr, va = history["eval"][-1]
        runs.append({"seed": seed, "train": round(tr, 5), "val": round(va, 5),
                     "seconds": round(time.time() - t0, 1)})  # fmt: skip
        print(
            f"seed {seed}: {steps} steps in {runs[-1]['seconds']} s; train {tr:.4f}, val {va:.4f}"
        )
    out = {
        "machine": cpu_model(),
        "steps": steps,
        "seeds": "initial weights from seed s, minibatches from seed s + 1",
        "runs": runs,
        "summary": {
            k: {
                "mean": round(statistics.fmean(r[k] for r in runs), 5),
                "sd": round(statistics.stdev(r[k] for r in runs), 5),
            }
            for k in ("train", "val")
        },
    }
    (Path(out_dir) / "ffn-loss-seeds.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=12000)
    p.add_argument("--sweep-steps", type=int, default=1000)
    p.add_argument("--out", default=str(HERE))
    p.add_argument("--seeds", type=int, nargs="+", help="the SGD run once per seed")
    a = p.parse_args()
    if a.seeds:
        main_seeds(a.seeds, a.out, a.steps)
    else:
        main(a.out, a.sweep_steps, a.steps)
