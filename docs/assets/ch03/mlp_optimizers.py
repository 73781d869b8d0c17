"""Train the MLP of chapter 3.1 with four optimizers and draw mlp-optimizers.svg (chapter 3.2).

Each run starts from the same initial weights (seed 0) and sees the same minibatches
(seed 1): 3000 steps of batch 32 on the training split of the offline census names
(``sitp.data.load_names()``), with the validation loss measured every 250 steps.
The results go to ``mlp-optimizers.json`` (with the machine and the time they took),
the figure to ``mlp-optimizers.svg``.

Run from the repository root: ``python docs/assets/ch03/mlp_optimizers.py`` (a few
minutes on a 2-core CPU). ``--steps 100`` makes a quick check; the chapter's fence does
that with :func:`train`.

``--seeds 0 1 2 3 4`` trains the four runs again for each seed ``s`` (initial weights
from seed ``s``, minibatches from seed ``s + 1``: seed 0 is the recorded run) and writes
each run's final validation loss per seed, with their mean and sample standard
deviation, to ``mlp-optimizers-seeds.json`` (no figure).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

import sitp
from sitp.data import Vocab, build_context_dataset, load_names, split_words
from sitp.models.mlp import MLP, MLPConfig

HERE = Path(__file__).resolve().parent
BATCH = 32
EVAL_EVERY = 250
MEAN_OVER = 50  # the training loss is saved as means over 50 steps

# name -> (optimizer class, keyword arguments, warmup steps or None for a constant rate)
RUNS = {
    "SGD, lr 0.1": (sitp.optim.SGD, dict(lr=0.1), None),
    "SGD + momentum 0.9, lr 0.02": (sitp.optim.SGD, dict(lr=0.02, momentum=0.9), None),
    "AdamW, lr 0.01": (sitp.optim.AdamW, dict(lr=0.01, weight_decay=0.01), None),
    "AdamW, lr 0.01, warmup 100 + cosine": (
        sitp.optim.AdamW,
        dict(lr=0.01, weight_decay=0.01),
        100,
    ),
}


def data():
    words = load_names()
    vocab = Vocab(words)
    train_words, val_words, _ = split_words(words, seed=42)
    return (
        vocab,
        build_context_dataset(train_words, vocab, 3),
        build_context_dataset(val_words, vocab, 3),
    )


def train(opt_class, kwargs, warmup, steps, vocab, train_set, val_set, seed: int = 0):
    """Train one MLP; return (steps where val was measured, val losses, minibatch losses).

    The initial weights come from ``seed``, the minibatches from ``seed + 1``.
    """
    (X_NT, Y_N), (Xv_NT, Yv_N) = train_set, val_set
    sitp.manual_seed(seed)
    model = MLP(MLPConfig(vocab_size=len(vocab)))
    opt = opt_class(model.parameters(), **kwargs)
    sched = None
    if warmup is not None:
        sched = sitp.optim.lr_scheduler.get_cosine_schedule_with_warmup(
            opt, warmup, steps, min_lr_ratio=0.1
        )
    gen = sitp.Generator().manual_seed(seed + 1)
    at, val, train_losses = [], [], []
    for step in range(steps + 1):
        if step % EVAL_EVERY == 0 or step == steps:
            with sitp.no_grad():
                at.append(step)
                val.append(model(Xv_NT, Yv_N)[1].item())
        if step == steps:
            break
        ix_B = sitp.randint(0, X_NT.shape[0], (BATCH,), generator=gen)
        _, loss = model(X_NT[ix_B], Y_N[ix_B])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        train_losses.append(loss.item())
    return at, val, train_losses


def machine() -> str:
    """The CPU's model name (Linux), its number of cores and the OS."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    except (OSError, StopIteration):
        pass
    return f"{name}, {os.cpu_count()} cores, {platform.system()}"


def main(steps: int = 3000, out_dir: Path = HERE) -> dict:
    vocab, train_set, val_set = data()
    results = {
        "config": dict(
            steps=steps,
            batch=BATCH,
            model="MLPConfig() (11,897 params)",
            data="sitp.data.load_names() census names, split seed 42",
        ),
        "machine": machine(),
        "runs": {},
    }
    for name, (cls, kwargs, warmup) in RUNS.items():
        t0 = time.perf_counter()
        at, val, train_losses = train(cls, kwargs, warmup, steps, vocab, train_set, val_set)
        means = [
            sum(train_losses[i : i + MEAN_OVER]) / len(train_losses[i : i + MEAN_OVER])
            for i in range(0, len(train_losses), MEAN_OVER)
        ]
        results["runs"][name] = dict(
            eval_steps=at,
            val_loss=[round(v, 5) for v in val],
            train_loss_means=[round(m, 5) for m in means],
            seconds=round(time.perf_counter() - t0, 1),
        )
        print(f"{name:40s} val {val[-1]:.4f}  ({results['runs'][name]['seconds']} s)")
    (Path(out_dir) / "mlp-optimizers.json").write_text(json.dumps(results, indent=1) + "\n")
    plot(results, Path(out_dir) / "mlp-optimizers.svg")
    return results


def main_seeds(seeds, steps: int = 3000, out_dir: Path = HERE) -> dict:
    """The four runs for each of ``seeds``; their final validation losses, mean and sd."""
    vocab, train_set, val_set = data()
    results = {
        "config": dict(
            steps=steps,
            batch=BATCH,
            model="MLPConfig() (11,897 params)",
            data="sitp.data.load_names() census names, split seed 42",
            seeds="initial weights from seed s, minibatches from seed s + 1",
        ),
        "machine": machine(),
        "seeds": list(seeds),
        "runs": {name: {"val": [], "seconds": []} for name in RUNS},
    }
    for seed in seeds:
        for name, (cls, kwargs, warmup) in RUNS.items():
            t0 = time.perf_counter()
            _, val, _ = train(cls, kwargs, warmup, steps, vocab, train_set, val_set, seed)
            run = results["runs"][name]
            run["val"].append(round(val[-1], 5))
            run["seconds"].append(round(time.perf_counter() - t0, 1))
            print(f"seed {seed} {name:40s} val {val[-1]:.4f}  ({run['seconds'][-1]} s)")
    for run in results["runs"].values():
        run["mean"] = round(statistics.fmean(run["val"]), 5)
        run["sd"] = round(statistics.stdev(run["val"]), 5)
    (Path(out_dir) / "mlp-optimizers-seeds.json").write_text(json.dumps(results, indent=1) + "\n")
    return results


def plot(results: dict, path: Path) -> None:
    import matplotlib  # late: matplotlib is slow to import; only figures need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # late: matplotlib is slow to import; only figures need it

    plt.rcParams["svg.hashsalt"] = "sitp"
    fig, (ax_train, ax_val) = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for name, run in results["runs"].items():
        means = run["train_loss_means"]
        mid = MEAN_OVER * np.arange(len(means)) + MEAN_OVER / 2  # the middle of each window
        ax_train.plot(mid, means, lw=1.2, label=name)
        ax_val.plot(run["eval_steps"], run["val_loss"], "o-", ms=3, lw=1.2, label=name)
    ax_train.set_title(f"training loss (mean over {MEAN_OVER} minibatches)", fontsize=10)
    ax_val.set_title("validation loss", fontsize=10)
    for ax in (ax_train, ax_val):
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        ax.set_ylim(2.0, 3.4)
    ax_train.set_ylabel("cross-entropy (nats)")
    ax_val.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--seeds", type=int, nargs="+", help="run every optimizer per seed")
    args = parser.parse_args()
    if args.seeds:
        main_seeds(args.seeds, args.steps, args.out)
    else:
        main(args.steps, args.out)
