"""The figures of chapter 8, drawn from the records of the demo and the pipeline.

``scripts/posttrain_demo.py --seeds 0 1 2 3 4 --json`` writes the demo's: for each seed
the configuration, the CPU it ran on, each stage's held-out pass@1, and the mean reward
of every RL step.

* ``posttrain-stages.png``: pass@1 after each stage (base, pretrain, SFT, RL) of the
  demo's seeds in ``posttrain-demo-seeds.json`` (``posttrain_demo.py --seeds``): each
  seed a dot, the mean a bar with the seeds' standard deviation, and the Wilson 95 %
  interval of the first seed's run, the one ``posttrain-demo.json`` holds;

and from ``posttrain-pipeline.json`` (``scripts/posttrain_pipeline.py --json``, the four
commands at the book's configuration):

* ``posttrain-pipeline.png``: every task's pass@1 after each stage, with intervals, and
  each seed's of ``posttrain-pipeline-seeds.json`` (``posttrain_pipeline.py --collect``);
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
DEMO_SEEDS_JSON = HERE / "posttrain-demo-seeds.json"
PIPELINE_JSON = HERE / "posttrain-pipeline.json"
PIPELINE_SEEDS_JSON = HERE / "posttrain-pipeline-seeds.json"


def load(path: Path = DEMO_SEEDS_JSON) -> dict:
    """A record: the demo's seeds unless ``path`` names another."""
    return json.loads(Path(path).read_text())


def running_mean(values, window: int = 10) -> np.ndarray:
    """The mean of each value and the ``window - 1`` before it (fewer at the start)."""
    v = np.asarray(values, dtype=float)
    c = np.concatenate([[0.0], np.cumsum(v)])
    i = np.arange(1, len(v) + 1)
    lo = np.maximum(0, i - window)
    return (c[i] - c[lo]) / (i - lo)


def draw_stages(seeds: dict, path: Path) -> Path:
    """pass@1 after each stage over the demo's seeds: a dot a seed, the mean as a bar with
    ± one standard deviation, and the first seed's Wilson 95 % interval beside it."""
    plt = pyplot()
    runs = seeds["runs"]
    names = [s["stage"] for s in runs[0]["stages"]]
    p = np.array([[s["pass@1"] for s in run["stages"]] for run in runs])  # seeds x stages
    mean, sd = p.mean(axis=0), p.std(axis=0, ddof=1)
    first = runs[0]["stages"]
    n = first[0]["n"]
    lo, hi = (np.array([s["pass@1_ci"][j] for s in first]) for j in (0, 1))
    fig, ax = plt.subplots(figsize=(5.8, 3.8))
    x = np.arange(len(names))
    ax.bar(x, mean, 0.6, color="C0", alpha=0.5, yerr=sd, capsize=6, ecolor="k",
           label=f"mean of {len(runs)} seeds ± sd")  # fmt: skip
    for k in range(len(runs)):
        ax.plot(x + (k - (len(runs) - 1) / 2) * 0.08, p[k], "o", ms=4, color="C0",
                label="each seed" if k == 0 else None)  # fmt: skip
    ax.errorbar(x + 0.38, p[0], yerr=[p[0] - lo, hi - p[0]], fmt="s", ms=3, color="C3",
                capsize=3, label=f"seed {runs[0]['config']['seed']}, Wilson 95 %")  # fmt: skip
    for k, v in enumerate(mean):
        ax.text(x[k], max(mean[k] + sd[k], hi[k]) + 0.03, f"{v:.3f}", ha="center", va="bottom")
    cfg = runs[0]["config"]
    ax.set_xticks(x, names)
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("held-out pass@1 (greedy)")
    ax.set_title(f"{cfg['task']}: {n} held-out problems, "
                 f"{cfg['parameters']:,}-parameter GPT", fontsize=10)  # fmt: skip
    ax.legend(loc="upper left", fontsize=8)
    return save(fig, path)


def draw_pipeline(run: dict, path: Path, seeds: dict | None = None) -> Path:
    """Every task's held-out pass@1 after each stage of the pipeline: a group of bars a
    task, a bar a stage, each with its Wilson 95 % interval; with ``seeds`` (the
    ``--collect`` record), each seed's pass@1 as a dot on its bar."""
    plt = pyplot()
    stages, tasks = run["stages"], run["tasks"]
    fig, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.8 / len(stages)
    x = np.arange(len(tasks))
    for k, stage in enumerate(stages):
        scores = [stage["pass@1"][t] for t in tasks]
        p = np.array([s["pass@1"] for s in scores])
        lo, hi = (np.array([s["ci"][j] for s in scores]) for j in (0, 1))
        at = x + (k - (len(stages) - 1) / 2) * width
        ax.bar(at, p, width, label=stage["stage"], color=f"C{k}", yerr=[p - lo, hi - p],
               capsize=2, ecolor="k", lw=0)  # fmt: skip
        if seeds is not None:
            label = f"each of {len(seeds['runs'])} runs" if k == 0 else None
            for j, run_ in enumerate(seeds["runs"]):
                ax.plot(at, [run_["pass@1"][stage["stage"]][t] for t in tasks], "o", ms=2.5,
                        color="k", alpha=0.6, label=label if j == 0 else None)  # fmt: skip
    ax.set_xticks(x, tasks)
    ax.set_ylim(0, 1.2)
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.set_ylabel("held-out pass@1 (greedy)")
    n = stages[0]["pass@1"][tasks[0]]["n"]
    ax.set_title(f"after each stage, {n} held-out problems a task; the whole pipeline "
                 f"{run['minutes']:.0f} min", fontsize=10)  # fmt: skip
    ax.legend(ncol=len(stages) + (seeds is not None), fontsize=8, loc="upper right")
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
    p = argparse.ArgumentParser(
        description="Draw chapter 8's figures from the demo's and the pipeline's records."
    )
    p.add_argument("--seeds-json", type=Path, default=DEMO_SEEDS_JSON)
    p.add_argument("--pipeline-json", type=Path, default=PIPELINE_JSON)
    p.add_argument("--pipeline-seeds-json", type=Path, default=PIPELINE_SEEDS_JSON)
    p.add_argument("--out", type=Path, default=ASSETS)
    args = p.parse_args(argv)
    seeds, pipeline = load(args.seeds_json), load(args.pipeline_json)
    pipeline_seeds = load(args.pipeline_seeds_json)
    args.out.mkdir(parents=True, exist_ok=True)
    for path in (draw_stages(seeds, args.out / "posttrain-stages.png"),
                 draw_pipeline(pipeline, args.out / "posttrain-pipeline.png", pipeline_seeds),
                 draw_pipeline_reward(pipeline, args.out / "posttrain-pipeline-reward.png")):  # fmt: skip
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
