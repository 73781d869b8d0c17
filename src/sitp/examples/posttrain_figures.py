"""The figures of chapter 8, drawn from ``posttrain-demo.json``.

``scripts/posttrain_demo.py --json`` writes that file: the demo's configuration, the
CPU it ran on, each stage's held-out pass@1 with its Wilson 95 % interval, and the
mean reward of every RL step.

* ``posttrain-stages.png``: pass@1 after each stage (base, pretrain, SFT, RL), bars
  with their intervals;

and from ``posttrain-pipeline.json`` (``scripts/posttrain_pipeline.py --json``, the four
commands at the book's configuration):

* ``posttrain-pipeline.png``: every task's pass@1 after each stage, with intervals;
* ``posttrain-pipeline-reward.png``: the mean reward of each step of its RL stage.

Redraw from the repository root::

    python -m sitp.examples.posttrain_figures
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from sitp.examples._plot import pyplot, save

HERE = Path(__file__).resolve().parent
ASSETS = HERE.parents[2] / "docs" / "assets" / "part3"
DEMO_JSON = HERE / "posttrain-demo.json"
PIPELINE_JSON = HERE / "posttrain-pipeline.json"


def load(path: Path = DEMO_JSON) -> dict:
    """The demo's record."""
    return json.loads(Path(path).read_text())


def running_mean(values, window: int = 10) -> np.ndarray:
    """The mean of each value and the ``window - 1`` before it (fewer at the start)."""
    v = np.asarray(values, dtype=float)
    c = np.concatenate([[0.0], np.cumsum(v)])
    i = np.arange(1, len(v) + 1)
    lo = np.maximum(0, i - window)
    return (c[i] - c[lo]) / (i - lo)


def draw_stages(run: dict, path: Path) -> Path:
    """pass@1 after each stage, with its Wilson 95 % interval."""
    plt = pyplot()
    stages = run["stages"]
    names = [s["stage"] for s in stages]
    p = np.array([s["pass@1"] for s in stages])
    lo = np.array([s["pass@1_ci"][0] for s in stages])
    hi = np.array([s["pass@1_ci"][1] for s in stages])
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.bar(names, p, color="C0", yerr=[p - lo, hi - p], capsize=6, ecolor="k")
    for k, v in enumerate(p):
        ax.text(k, hi[k] + 0.02, f"{v:.3f}", ha="center", va="bottom")
    cfg = run["config"]
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("held-out pass@1 (greedy)")
    ax.set_title(f"{cfg['task']}: {stages[0]['n']} held-out problems, "
                 f"{cfg['parameters']:,}-parameter GPT", fontsize=10)  # fmt: skip
    return save(fig, path)


def draw_pipeline(run: dict, path: Path) -> Path:
    """Every task's held-out pass@1 after each stage of the pipeline: a group of bars a
    task, a bar a stage, each with its Wilson 95 % interval."""
    plt = pyplot()
    stages, tasks = run["stages"], run["tasks"]
    fig, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.8 / len(stages)
    x = np.arange(len(tasks))
    for k, stage in enumerate(stages):
        scores = [stage["pass@1"][t] for t in tasks]
        p = np.array([s["pass@1"] for s in scores])
        lo, hi = (np.array([s["ci"][j] for s in scores]) for j in (0, 1))
        ax.bar(x + (k - (len(stages) - 1) / 2) * width, p, width, label=stage["stage"],
               color=f"C{k}", yerr=[p - lo, hi - p], capsize=2, ecolor="k", lw=0)  # fmt: skip
    ax.set_xticks(x, tasks)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("held-out pass@1 (greedy)")
    n = stages[0]["pass@1"][tasks[0]]["n"]
    ax.set_title(f"after each stage, {n} held-out problems a task; the whole pipeline "
                 f"{run['minutes']:.0f} min", fontsize=10)  # fmt: skip
    ax.legend(ncol=len(stages), fontsize=8, loc="upper right")
    return save(fig, path)


def draw_pipeline_reward(run: dict, path: Path) -> Path:
    """The mean reward of each step of the pipeline's RL stage (all tasks mixed)."""
    plt = pyplot()
    rl = next(s for s in run["stages"] if s["stage"] == "rl")
    r = np.array([h["reward"] for h in rl["history"]])
    fig, ax = plt.subplots(figsize=(6, 3.4))
    steps = np.arange(1, len(r) + 1)
    ax.plot(steps, r, "o", ms=3, color="C0", alpha=0.6, label="mean reward of the step")
    ax.plot(steps, running_mean(r), "-", color="C1", label="running mean (10 steps)")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("RL step (REINFORCE with a group baseline)")
    ax.set_ylabel("reward (share correct)")
    ax.set_title("the pipeline's RL stage, prompts from every task", fontsize=10)
    ax.legend(loc="lower right")
    return save(fig, path)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="Draw chapter 8's figures from posttrain-demo.json.")
    p.add_argument("--json", type=Path, default=DEMO_JSON)
    p.add_argument("--pipeline-json", type=Path, default=PIPELINE_JSON)
    p.add_argument("--out", type=Path, default=ASSETS)
    args = p.parse_args(argv)
    run, pipeline = load(args.json), load(args.pipeline_json)
    args.out.mkdir(parents=True, exist_ok=True)
    for path in (draw_stages(run, args.out / "posttrain-stages.png"),
                 draw_pipeline(pipeline, args.out / "posttrain-pipeline.png"),
                 draw_pipeline_reward(pipeline, args.out / "posttrain-pipeline-reward.png")):  # fmt: skip
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
