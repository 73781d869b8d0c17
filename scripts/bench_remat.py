"""Save or recompute (``sitp.compile(..., remat=...)``): the bytes a compiled training
step holds from its forward into its backward, its memory peak, and its time.

Usage::

    python scripts/bench_remat.py [--threads 1] [--rounds 5] [--calls 10]
        [--models gpt,wavenet] [--cpu-time] [--json PATH] [--smoke]

One call is one step of :class:`sitp.train.trainer.Trainer` with ``--compile`` (as
``scripts/bench_train_compile.py``: the GPT anchor, nanoGPT's CPU recipe of 4 layers,
4 heads, width 128, block 64, batch 12; the WaveNet-style CNN of chapter 3.3 on names
at batch 32), its :func:`~sitp.train.trainer.grad_step` compiled three ways:

* ``fusion``: ``remat=None``, the fusion pass's own choice (what "auto", the default,
  is for a step);
* ``save``: every value the backward reads is kept from the forward;
* ``mincut``: the minimum cut of :mod:`sitp.compile.remat` chooses what is kept,
  the rest is recomputed in the backward.

Per arm the record holds the compiled graph's report (``held_bytes``: bytes made in the
forward that the backward reads, a fused layer's Context counted as the buffers it
keeps; ``kept``/``recomputed``: the pass's counts; ``bytes_after``: the planned slots),
the peak of the bytes numpy allocated during one run of the compiled program and during
one whole step (``tracemalloc``, after the warm-up), and the step's time: the arms take
turns in one worker, ``--rounds`` rounds of ``--calls`` steps, through sitp.bench.ab.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench_train_compile, beside
from bench_train_compile import ANCHOR, make_trainer  # noqa: E402

BATCH = {
    "gpt": 12,
    "wavenet": 32,
}  # the models this script times (their batches are bench_train_compile's)
MODES = {"fusion": None, "save": "save", "mincut": "mincut"}
# the model compiled (torch.compile(model)): a forward program and a backward program that
# runs later (sitp.compile's Joint), where the forward saves what the backward reads
# ("auto" is "mincut" there)
SPLIT = {"split-save": "save", "split-mincut": "mincut"}


def workload(model: str, mode: str, smoke: bool = False):
    """One compiled Trainer step of ``model``, its grad_step compiled with ``remat=mode``."""
    import functools  # late: only the worker builds a run
    import tracemalloc  # late: as above

    import sitp  # late: the worker's library
    from sitp.train.trainer import grad_step  # late: as above

    trainer = make_trainer(model, smoke, mode in MODES, "bench-remat-")
    batch = 4 if smoke else BATCH[model]  # as make_trainer chose
    if mode in MODES:
        trainer.compiled = cf = sitp.compile(
            functools.partial(grad_step, trainer.model),
            name="train step",
            rerun_trace=True,
            remat=MODES[mode],
        )
    else:
        trainer.model = cf = sitp.compile(trainer.model, remat=SPLIT[mode])
    sitp.manual_seed(0)
    peaks = {}
    run = cf._run

    def traced_run(program, ts):  # the peak of one run of the compiled program
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        out = run(program, ts)
        peaks["program"] = tracemalloc.get_traced_memory()[1] - base
        return out

    def call():
        return trainer.train_step()

    def info():
        cf._run = traced_run
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        trainer.train_step()
        peaks["step"] = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        del cf._run
        e = cf.entries
        keys = ("held_bytes", "kept", "recomputed", "kept_bytes", "kernels", "bytes_after")
        return {
            "batch": batch,
            "compiled": all(x.program is not None for x in e) and len(e) == 1,
            "report": {k: e[0].report.get(k) for k in keys} if e else {},
            "peak_program_bytes": peaks.get("program"),
            "peak_step_bytes": peaks.get("step"),
        }

    call.info = info
    return call


def measure(args, threads: int) -> dict:
    from sitp.bench import ab  # late: the workers import this file

    here = f"{os.path.abspath(__file__)}:workload"
    out = {}
    with ab.workers(["sitp"], threads=threads) as w:
        for model in args.models:
            arms = {
                mode: ab.Arm(w["sitp"], here, dict(model=model, mode=mode, smoke=args.smoke),
                             warmup=3)
                for mode in list(MODES) + list(SPLIT)
            }  # fmt: skip
            ratios = [("save", "mincut"), ("fusion", "mincut"), ("split-save", "split-mincut")]
            res = ab.compare(
                arms, rounds=args.rounds, calls=args.calls, ratios=ratios, clock=args.clock
            )
            print(f"{model}, {threads} thread(s):\n{ab.table(res)}\n", flush=True)
            for mode in arms:
                print(f"  {mode}: {res['arms'][mode].get('info')}", flush=True)
            out[model] = res
    return out


def main(argv=None) -> int:
    import bench_train_compile as btc  # beside this script (sys.path above)

    ap = btc.parser(__doc__.splitlines()[0], "1", "gpt,wavenet")
    what = (
        "one Trainer.train_step with --compile, its grad_step compiled with "
        "remat=None (fusion), 'save' and 'mincut'"
    )
    return btc.run(ap, argv, what, BATCH, ANCHOR, measure)


if __name__ == "__main__":
    raise SystemExit(main())
