"""Draw the figures of chapter 3.3.

* ``cnn-receptive-field.png``: a stack of three causal convolutions of kernel 2 with
  dilations 1, 2 and 4 over eight characters, with the connections that reach the last
  output drawn bold: its receptive field is the whole window of 2^3 = 8 inputs.
* ``cnn-loss.png``: the validation losses of two runs of ``python -m sitp train``, the MLP
  and the WaveNet, read from their ``record.json`` files (run the commands in the
  chapter, then ``python docs/assets/ch03/cnn_figures.py RUNS_DIR``, where RUNS_DIR holds
  ``mlp/`` and ``wavenet/``). Their numbers are kept in ``cnn-runs.json`` so the figure
  can be redrawn without training.

The same two runs over seeds 42, 1, 2, 3 and 4 (the chapter's commands with ``--seed N``
and ``--out SEEDS_DIR/MODEL-sN``) are recorded with ``--seeds SEEDS_DIR`` into
``cnn-runs-seeds.json`` beside the script: each seed's final losses and evaluations, and
their mean and sample standard deviation (``src/sitp/examples`` holds a link to it, as
to ``cnn-runs.json``, so that the package ships it)::

    python docs/assets/ch03/cnn_figures.py --seeds build/cnn-seeds

The chapter's fence calls :func:`receptive_field_figure` into a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import sitp
from sitp.bench import cpu_model
from sitp.examples.gpt_figures import spread

HERE = Path(__file__).resolve().parent
SEEDS_JSON = HERE / "cnn-runs-seeds.json"
COMMANDS = {  # the chapter's runs: python -m sitp train --model NAME ...
    "mlp": "--steps 10000 --eval-every 1000",
    "wavenet": "--steps 4000 --eval-every 1000",
}


def receptive_field_figure(path, T: int = 8, dilations=(1, 2, 4)):
    """Draws the dilated causal stack; returns the input positions that reach the last output."""
    import matplotlib  # late: matplotlib is slow to import; only figures need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # late: matplotlib is slow to import; only figures need it

    fig, ax = plt.subplots(figsize=(7.2, 3.4), dpi=120)
    levels = len(dilations) + 1
    # which nodes feed the last output, found by walking down from it
    reach = {levels - 1: {T - 1}}
    for level in range(levels - 1, 0, -1):
        d = dilations[level - 1]
        reach[level - 1] = {t - k * d for t in reach[level] for k in (0, 1) if t - k * d >= 0}
    for level in range(levels):
        for t in range(T):
            on = t in reach[level]
            ax.scatter(
                [t],
                [level],
                s=180,
                zorder=3,
                color="#3050c0" if on else "white",
                edgecolors="#3050c0" if on else "#999999",
                linewidths=1.2,
            )
        if level > 0:
            d = dilations[level - 1]
            for t in range(T):
                for k in (0, 1):
                    s = t - k * d
                    if s < 0:
                        continue
                    bold = t in reach[level] and s in reach[level - 1]
                    ax.plot(
                        [s, t],
                        [level - 1, level],
                        color="#3050c0" if bold else "#cccccc",
                        lw=2.0 if bold else 0.8,
                        zorder=2 if bold else 1,
                    )
    names = ["input (characters)"] + [f"dilation {d}" for d in dilations]
    ax.set_yticks(range(levels), names)
    ax.set_xticks(range(T), [f"t-{T - 1 - t}" if t < T - 1 else "t" for t in range(T)])
    ax.set_xlim(-0.6, T - 0.4)
    ax.set_ylim(-0.5, levels - 0.5)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title("Causal convolutions of kernel 2: the last output sees all 8 inputs")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return sorted(reach[0])


def runs_from_records(runs_dir) -> dict:
    """The evaluations and final losses of the runs in RUNS_DIR/{mlp,wavenet}/record.json."""
    out = {}
    for name in ("mlp", "wavenet"):
        record = json.loads((Path(runs_dir) / name / "record.json").read_text())
        out[name] = {
            "model_config": record["model_config"],
            "train_config": record["train_config"],
            "num_params": record["num_params"],
            "eval": record["history"]["eval"],
            "final": record["final"],
        }
    return out


def record_seeds(seeds_dir) -> dict:
    """The chapter's two runs over seeds, from SEEDS_DIR/{mlp,wavenet}-sSEED/record.json.

    ``times*.txt`` in SEEDS_DIR (lines ``NAME-sSEED START END``, seconds since the epoch)
    give each run's wall time. Seed 42 first, then the others in order.
    """
    seeds_dir = Path(seeds_dir)
    times = {}
    for path in sorted(seeds_dir.glob("times*.txt")):
        for line in path.read_text().splitlines():
            key, start, end = line.split()
            times[key] = round(float(end) - float(start), 1)
    out = {
        "machine": sitp.show_config(mode="dicts").get("cpu"),
        "cpu_model": cpu_model(),
        "split_seed": 42,
        "runs": {},
    }
    for name, args in COMMANDS.items():
        runs = []
        for path in sorted(seeds_dir.glob(f"{name}-s*/record.json")):
            seed = int(re.fullmatch(rf"{name}-s(\d+)", path.parent.name)[1])
            record = json.loads(path.read_text())
            tc = record["train_config"]
            assert tc["seed"] == seed and f"--steps {tc['steps']} " in args + " ", path
            runs.append(
                {
                    "seed": seed,
                    "wall_s": times.get(path.parent.name),
                    "final": {k: round(v, 4) for k, v in record["final"].items()},
                    "eval": [
                        [e["step"], round(e["train"], 4), round(e["val"], 4)]
                        for e in record["history"]["eval"]
                    ],
                }
            )
        runs.sort(key=lambda r: (r["seed"] != 42, r["seed"]))
        out["runs"][name] = {
            "command": f"python -m sitp train --model {name} {args} --quiet --threads 1 "
            f"--seed N --out {seeds_dir}/{name}-sN",
            "num_params": record["num_params"],
            "seeds": [r["seed"] for r in runs],
            "summary": {k: spread(r["final"][k] for r in runs) for k in ("train", "val", "test")},
            "runs": runs,
        }
    return out


def loss_figure(runs: dict, path):
    import matplotlib  # late: matplotlib is slow to import; only figures need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # late: matplotlib is slow to import; only figures need it

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=120)
    styles = {"mlp": ("#3050c0", "MLP, context 3"), "wavenet": ("#d05020", "WaveNet, context 8")}
    for name, run in runs.items():
        color, label = styles[name]
        steps = [e["step"] for e in run["eval"]]
        ax.plot(
            steps,
            [e["train"] for e in run["eval"]],
            "o--",
            color=color,
            alpha=0.6,
            label=f"{label}: train",
        )
        ax.plot(
            steps,
            [e["val"] for e in run["eval"]],
            "s-",
            color=color,
            label=f"{label}: val ({run['num_params']:,} params)",
        )
    ax.set_xlabel("step (batch 32)")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title("python -m sitp train: AdamW, warmup + cosine")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None, out_dir=HERE):
    parser = argparse.ArgumentParser(description="Draw chapter 3.3's figures.")
    parser.add_argument("runs_dir", nargs="?", help="holds mlp/ and wavenet/: cnn-runs.json")
    parser.add_argument("--seeds", help="holds MODEL-sSEED/ runs: cnn-runs-seeds.json")
    args = parser.parse_args(argv)
    out_dir = Path(out_dir)
    receptive_field_figure(out_dir / "cnn-receptive-field.png")
    runs_file = HERE / "cnn-runs.json"
    if args.runs_dir is not None:
        runs = runs_from_records(args.runs_dir)
        runs_file.write_text(json.dumps(runs, indent=1))
    if args.seeds is not None:
        SEEDS_JSON.write_text(json.dumps(record_seeds(args.seeds), indent=1) + "\n")
    if runs_file.exists():
        loss_figure(json.loads(runs_file.read_text()), out_dir / "cnn-loss.png")


if __name__ == "__main__":
    main()
