"""Autotuning (``sitp.compile(..., tune=True)``): a compiled training step with each
generated kernel's thread split timed and chosen, against the fixed rule.

Usage::

    python scripts/bench_tune.py [--threads 2] [--rounds 5] [--calls 10] [--repeat 1]
        [--models gpt,gru] [--cpu-time] [--json PATH] [--smoke]

One call is one step of :class:`sitp.train.trainer.Trainer` with ``--compile`` (as
``scripts/bench_train_compile.py``: the GPT anchor, nanoGPT's CPU recipe of 4 layers,
4 heads, width 128, block 64, batch 12; the ladder's GRU of chapter 3.4 on names at
batch 32), its :func:`~sitp.train.trainer.grad_step` compiled two ways:

* ``fixed``: ``tune=False``, the parallel version of every kernel above
  ``codegen.PARALLEL_MIN`` entries whenever numba has more than one thread;
* ``tuned``: ``tune=True`` with a fresh, empty decision cache (a temporary directory),
  so the first call times every kernel that has two versions.

Per arm the record holds the tuner's counts (``timed``: kernels timed, ``serial``:
those whose serial twin won, ``seconds``: the time spent timing, numba's compilation
of the twins included) and the compiled graph's report; the arms take turns in one
worker, ``--rounds`` rounds of ``--calls`` steps, through sitp.bench.ab, after three
warm-up calls each (the tuning happens in the first). ``--repeat`` runs the whole
comparison again in new workers: the tuner's decisions, made from a few microsecond
timings, and the step's time both vary from process to process, so the record holds a
list of comparisons per model.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench_train_compile, beside
from bench_train_compile import ANCHOR, make_trainer  # noqa: E402

BATCH = {
    "gpt": 12,
    "gru": 32,
    "rnn": 32,
    "wavenet": 32,
}  # the models this script times (their batches are bench_train_compile's)
MODES = ("fixed", "tuned")


def workload(model: str, mode: str, smoke: bool = False):
    """One compiled Trainer step of ``model``, its grad_step compiled with or without tuning."""
    import functools  # late: only the worker builds a run
    import tempfile  # late: as above

    import sitp  # late: the worker's library
    from sitp.compile import tune  # late: as above
    from sitp.train.trainer import grad_step  # late: as above

    trainer = make_trainer(model, smoke, True, "bench-tune-")
    batch = 4 if smoke else BATCH[model]  # as make_trainer chose
    tuner = tune.Tuner(tempfile.mkdtemp(prefix="bench-tune-cache-")) if mode == "tuned" else False
    trainer.compiled = cf = sitp.compile(
        functools.partial(grad_step, trainer.model), name="train step", rerun_trace=True,
        tune=tuner,
    )  # fmt: skip
    sitp.manual_seed(0)

    def call():
        return trainer.train_step()

    def info():
        e = cf.entries
        keys = ("kernels", "epilogues", "steps_after")
        return {
            "batch": batch,
            "compiled": all(x.program is not None for x in e),
            "signatures": len(e),
            "report": {k: e[0].report.get(k) for k in keys} if e else {},
            "tune": dict(tuner.stats) if tuner else None,
        }

    call.info = info
    return call


def measure(args, threads: int) -> dict:
    """Per model, a list of ``--repeat`` comparisons, each in workers of its own (a fresh
    process, a fresh decision cache: the tuner decides anew each time)."""
    from sitp.bench import ab  # late: the workers import this file

    here = f"{os.path.abspath(__file__)}:workload"
    out: dict = {model: [] for model in args.models}
    for rep in range(args.repeat):
        with ab.workers(["sitp"], threads=threads) as w:
            for model in args.models:
                arms = {
                    mode: ab.Arm(w["sitp"], here, dict(model=model, mode=mode,
                                 smoke=args.smoke), warmup=3)
                    for mode in MODES
                }  # fmt: skip
                res = ab.compare(
                    arms, rounds=args.rounds, calls=args.calls, ratios=[MODES], clock=args.clock
                )
                print(f"{model}, {threads} thread(s), run {rep + 1}:\n{ab.table(res)}", flush=True)
                print(f"  tuned: {res['arms']['tuned']['info']['tune']}\n", flush=True)
                out[model].append(res)
    return out


def main(argv=None) -> int:
    import bench_train_compile as btc  # beside this script (sys.path above)

    ap = btc.parser(__doc__.splitlines()[0], "2", "gpt,gru")
    ap.add_argument("--repeat", type=int, default=1, help="comparisons per model, each in "
                    "new workers with an empty decision cache (1)")  # fmt: skip
    what = (
        "one Trainer.train_step with --compile, its grad_step compiled with tune=False "
        "(fixed) and tune=True (tuned, from an empty decision cache)"
    )
    return btc.run(ap, argv, what, BATCH, ANCHOR, measure)


if __name__ == "__main__":
    raise SystemExit(main())
