"""Chapter 3.4's three cells on names: the RNN, the GRU and the LSTM, over three seeds.

Usage::

    python scripts/rnn_seeds.py                    # 3 models x 3 seeds, about a minute of CPU each
    python scripts/rnn_seeds.py --models lstm --seeds 0 --steps 200 --json /tmp/lstm.json

Each run is the loop of ``python -m sitp train --model NAME``
(:class:`sitp.train.trainer.Trainer`) on makemore's 32,033 names (``--data makemore``,
read from ``$SITP_DATA_DIR``), split 80/10/10 by the fixed seed 42, with the ladder's
default config for every cell (embeddings of 64, a state of 64, batches of 32 names, AdamW
at 5e-3 with 100 warmup steps and a cosine decay to a tenth, weight decay 0.01) and a
budget of ``--steps`` steps (5,000 by default, as the ladder of section 3.5). A seed fixes
the initialisation and the order of the batches, not the split. numba and the BLAS run on
one thread: a run uses one core, and its CPU time (``train_cpu_seconds``) is what it costs
there, whatever else the machine runs. The JSON (by default
``docs/assets/ch03/rnn-seeds.json``, which the package ships as
``sitp/examples/rnn-seeds.json`` for chapter 3.4) holds every run's final train/val/test
losses (each over the whole split), the mean and the sample standard deviation per model,
and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from sitp.bench import cpu_model, threads
from sitp.models import MODELS
from sitp.train.trainer import TrainConfig, Trainer

ROOT = Path(__file__).resolve().parents[1]
STEPS = 5000


def train_once(model: str, seed: int, steps: int) -> dict:
    """One run of ``sitp train`` with the defaults; its final losses and times."""
    config = TrainConfig(
        model=model, steps=steps, seed=seed, data="makemore", eval_every=0, save_every=0
    )
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer.fresh(config, out)
        wall, cpu = time.perf_counter(), time.process_time()
        record = trainer.run(log=lambda line: None, progress=False)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    final = record["final"]
    return {
        "model": model,
        "seed": seed,
        "train": final["train"],
        "val": final["val"],
        "test": final["test"],
        "params": sum(p.numel() for p in trainer.model.parameters()),
        "train_seconds": wall,
        "train_cpu_seconds": cpu,
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--models", nargs="+", default=["rnn", "gru", "lstm"])
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--json", default=str(ROOT / "docs/assets/ch03/rnn-seeds.json"))
    args = ap.parse_args(argv)
    runs, load = [], [os.getloadavg()[0]]
    with threads(1):
        for model in args.models:
            train_once(model, 0, 2)  # compile or load the kernels outside the timed runs
        for model in args.models:
            for seed in args.seeds:
                r = train_once(model, seed, args.steps)
                print(
                    f"{model:4s} seed {seed}: train {r['train']:.4f}, val {r['val']:.4f}, "
                    f"{r['params']} params, {r['train_seconds']:.1f} s "
                    f"({r['train_cpu_seconds']:.1f} s of CPU)",
                    flush=True,
                )
                runs.append(r)
    load.append(os.getloadavg()[0])
    summary = {}
    for model in args.models:
        mine = [r for r in runs if r["model"] == model]
        summary[model] = {"n": len(mine), "params": mine[0]["params"]}
        for split in ("train", "val", "test"):
            xs = [r[split] for r in mine]
            sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
            summary[model][split] = {"mean": statistics.fmean(xs), "sd": sd}
        s = summary[model]
        print(
            f"{model:4s}: train {s['train']['mean']:.4f} ± {s['train']['sd']:.4f}, "
            f"val {s['val']['mean']:.4f} ± {s['val']['sd']:.4f} over {len(mine)} seeds"
        )
    spec = MODELS[args.models[0]]
    out = {
        "config": {
            "data": "makemore names.txt (32,033 names), split 80/10/10 by seed 42",
            "steps": args.steps,
            "batch_size": TrainConfig.batch_size,
            "lr": spec.lr,
            "warmup": min(100, args.steps // 10),
            "schedule": "linear warmup, then cosine to lr/10",
            "weight_decay": TrainConfig.weight_decay,
            "model": {
                k: v
                for k, v in vars(spec.make_config()).items()
                if k in ("n_embd", "n_embd2", "block_size")
            },
            "seeds": args.seeds,
        },
        "machine": f"{cpu_model()}, {os.cpu_count()} cores, {platform.system()}; 1 thread",
        "load_average_1min": {"start": load[0], "end": load[1]},
        "summary": summary,
        "runs": runs,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
