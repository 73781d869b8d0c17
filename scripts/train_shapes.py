"""Chapter 3.3's images: a LeNet and an MLP on the generated shapes, over three seeds.

Usage::

    python scripts/train_shapes.py                  # 2 models x 3 seeds, one to two minutes
    python scripts/train_shapes.py --seeds 0 --json /tmp/shapes.json   # one seed

Each run is :func:`sitp.examples.shapes_cnn.train_shapes`: 4,000 fresh 16x16 images of
the four shapes of :mod:`sitp.data.shapes` (noise sd 0.35), AdamW at 3e-3 on a cosine to zero for 8 epochs
of batches of 50, then the accuracy on 1,000 other images. A seed fixes the images, the
weights and the batches' order, so the spread over seeds covers all three. numba and
the BLAS run on one thread, so that a run's time does not depend on what else the
machine runs. The JSON (by default ``docs/assets/ch03/shapes-cnn.json``, which the
package ships as ``sitp/examples/shapes-cnn.json``) holds every run, the mean and the
sample standard deviation of the accuracy per model, and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
from pathlib import Path

from sitp.bench import cpu_model, threads
from sitp.examples.shapes_cnn import train_shapes

ROOT = Path(__file__).resolve().parents[1]
CONFIG = dict(n_train=4000, n_test=1000, epochs=8, batch_size=50, lr=3e-3, noise=0.35)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--models", nargs="+", default=["lenet", "mlp"])
    ap.add_argument("--json", default=str(ROOT / "docs/assets/ch03/shapes-cnn.json"))
    args = ap.parse_args(argv)
    runs, load = [], [os.getloadavg()[0]]
    with threads(1):
        train_shapes(0, "lenet", n_train=100, n_test=10, epochs=1)  # load the kernels
        for model in args.models:
            for seed in args.seeds:
                r = train_shapes(seed, model, **CONFIG)
                print(
                    f"{model:5s} seed {seed}: test accuracy {r['test_accuracy']:.3f}, "
                    f"{r['params']} params, {r['train_seconds']:.1f} s "
                    f"({r['train_cpu_seconds']:.1f} s of CPU)"
                )
                runs.append(r)
    load.append(os.getloadavg()[0])
    summary = {}
    for model in args.models:
        acc = [r["test_accuracy"] for r in runs if r["model"] == model]
        sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
        summary[model] = {"mean": statistics.fmean(acc), "sd": sd, "n": len(acc)}
        print(f"{model:5s}: {summary[model]['mean']:.3f} ± {sd:.3f} over {len(acc)} seeds")
    out = {
        "config": CONFIG,
        "machine": f"{cpu_model()}, {os.cpu_count()} cores, {platform.system()}; 1 thread",
        "load_average_1min": {"start": load[0], "end": load[1]},
        "summary": summary,
        "runs": runs,
    }
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
