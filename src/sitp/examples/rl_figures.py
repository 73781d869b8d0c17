"""The figures of chapter 8.3's and 8.4's seeded runs.

From ``rl-runs.json`` and ``rl-count.json`` (``scripts/rl_runs.py --parts chain1`` and
``--parts count``):

* ``rl-machinery.png``: reward, clip fraction, KL and entropy at each RL step of the
  three variants on chain1, every seed a thin line and their mean a thick one;
* ``rl-hacking.png``: on the counting task, the strict and the lenient checker's score
  of each step's samples, for the runs rewarded by each;
* ``rl-pass-at-k.png``: pass@k against k before and after RL, on chain1 and count.

From ``preferences.json`` (``scripts/preferences.py --json``):

* ``preferences-overopt.png``: the reward model's score, the judge's and the share right
  of the policy's held-out replies along RL against the reward model;
* ``preferences-win.png``: each policy's win rate against the SFT model, every seed with
  its Wilson interval.

Redraw from the repository root::

    python -m sitp.examples.rl_figures
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from sitp.examples._plot import pyplot, save

HERE = Path(__file__).resolve().parent
ASSETS = HERE.parents[2] / "docs" / "assets" / "part3"
RUNS_JSON = HERE / "rl-runs.json"
COUNT_JSON = HERE / "rl-count.json"
PREFS_JSON = HERE / "preferences.json"
COLORS = {"grpo": "C0", "grpo-seq": "C2", "reinforce": "C3", "strict": "C0", "lenient": "C3"}


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def _lines(ax, series, color, label):
    """Every seed's series thin, their mean thick."""
    steps = np.arange(1, len(series[0]) + 1)
    for s in series:
        ax.plot(steps, s, color=color, lw=0.6, alpha=0.35)
    ax.plot(steps, np.mean(series, axis=0), color=color, lw=1.8, label=label)


def draw_machinery(runs: dict, path: Path) -> Path:
    plt = pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.2))
    keys = [("reward", "reward (share right)"), ("clip_frac", "clip fraction"),
            ("kl", "KL to SFT (k3, per token)"), ("entropy", "entropy (nats per token)")]  # fmt: skip
    for name in runs["variants"]:
        for ax, (key, label) in zip(axes, keys):
            series = [[h[key] for h in r["chain1"]["rl"][name]["history"]] for r in runs["runs"]]
            _lines(ax, series, COLORS[name], name)
            ax.set_title(label, fontsize=10)
            ax.set_xlabel("RL step")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"chain1, {len(runs['runs'])} seeds (thin: each seed, thick: mean)", fontsize=10)
    return save(fig, path)


def draw_hacking(runs: dict, path: Path) -> Path:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.3), sharey=True)
    for ax, trained in zip(axes, ("strict", "lenient")):
        for checker in ("strict", "lenient"):
            series = [[h[checker] for h in r["count"]["rl"][trained]["history"]]
                      for r in runs["runs"]]  # fmt: skip
            _lines(ax, series, COLORS[checker], f"{checker} checker's score")
        ax.set_title(f"rewarded by the {trained} checker", fontsize=10)
        ax.set_xlabel("RL step")
    axes[0].set_ylabel("share of the step's samples")
    axes[0].legend(fontsize=8)
    return save(fig, path)


def draw_pass_at_k(runs: dict, count: dict, path: Path) -> Path:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.3))
    for ax, task, runs in zip(axes, ("chain1", "count"), (runs, count)):
        for model, color in (("sft", "C7"), ("grpo", "C0")):
            ks = runs["runs"][0][task]["pass_at_k"][model]["k"]
            series = np.array([r[task]["pass_at_k"][model]["pass@k"] for r in runs["runs"]])
            for s in series:
                ax.plot(ks, s, color=color, lw=0.6, alpha=0.35)
            ax.plot(ks, series.mean(0), "o-", ms=3, color=color,
                    label="SFT" if model == "sft" else "after RL")  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k (samples per problem, T 0.7)")
        ax.set_title(task, fontsize=10)
        ax.set_ylim(0, 1.02)
    axes[0].set_ylabel("held-out pass@k")
    axes[0].legend(fontsize=8)
    return save(fig, path)


def draw_overopt(prefs: dict, path: Path) -> Path:
    """For each RL run against the reward model (a KL coefficient), the reward model's
    score, the judge's utility and the share right of the held-out replies, every seed."""
    plt = pyplot()
    names = list(prefs["runs"][0]["rl"])
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    keys = [("rm", "reward model's score"), ("gold", "judge's utility u"),
            ("right", "share right (strict checker)")]  # fmt: skip
    for ax, (key, label) in zip(axes, keys):
        for k, name in enumerate(names):
            for j, run in enumerate(prefs["runs"]):
                curve = run["rl"][name]["curve"]
                ax.plot([c["step"] for c in curve], [c[key] for c in curve], "o-", ms=2,
                        lw=1, color=f"C{k}", alpha=0.8,
                        label=f"KL coefficient {run['rl'][name]['kl_coef']:g}" if j == 0 else None)  # fmt: skip
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("RL step (against the reward model)")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"held-out replies, one per prompt; {len(prefs['runs'])} seeds, a line each",
                 fontsize=10)  # fmt: skip
    return save(fig, path)


def draw_win(prefs: dict, path: Path) -> Path:
    """Each policy's win rate against the SFT model, every seed with its Wilson interval."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.4))
    names = list(prefs["runs"][0]["policies"])
    for k, name in enumerate(names):
        for j, run in enumerate(prefs["runs"]):
            w = run["policies"][name]["win"]
            x = k + (j - (len(prefs["runs"]) - 1) / 2) * 0.12
            ax.errorbar(x, w["win_rate"], yerr=[[w["win_rate"] - w["ci"][0]],
                        [w["ci"][1] - w["win_rate"]]], fmt="o", color=f"C{k}", capsize=3)  # fmt: skip
    ax.axhline(0.5, color="k", lw=0.6, ls="--")
    labels = {"sft": "SFT (itself)", "dpo": "DPO"}
    ax.set_xticks(range(len(names)), [labels.get(n, n.replace("rl-kl", "RL, KL ")) for n in names])
    ax.set_ylim(0, 1)
    ax.set_ylabel("win rate against SFT (judge)")
    ax.set_title("each seed with its Wilson 95 % interval", fontsize=10)
    return save(fig, path)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="Draw chapter 8.3's and 8.4's seeded figures.")
    p.add_argument("--out", type=Path, default=ASSETS)
    args = p.parse_args(argv)
    paths = []
    if RUNS_JSON.exists() and COUNT_JSON.exists():
        runs, count = load(RUNS_JSON), load(COUNT_JSON)
        paths += [draw_machinery(runs, args.out / "rl-machinery.png"),
                  draw_hacking(count, args.out / "rl-hacking.png"),
                  draw_pass_at_k(runs, count, args.out / "rl-pass-at-k.png")]  # fmt: skip
    if PREFS_JSON.exists():
        prefs = load(PREFS_JSON)
        paths += [draw_overopt(prefs, args.out / "preferences-overopt.png"),
                  draw_win(prefs, args.out / "preferences-win.png")]  # fmt: skip
    for path in paths:
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
