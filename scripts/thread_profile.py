"""Where a second thread helps the GPT step of 3.5, and where it does not (issue 34).

``scripts/compare_torch.py`` finds that a second thread speeds up the GPT training step
of chapter 3.5 (4 layers, 4 heads, width 64, batch 32 x block 32, AdamW) by about 1.5,
in sitp and in PyTorch alike, where two cores could give 2. This script splits sitp's
step into what runs in its kernels and what runs in Python, and times each part at one
thread and at two, so that the missing speed-up has names.

One process, ``NUMBA_NUM_THREADS=2``, pinned to two cores; numba's
``set_num_threads`` switches between one thread and two, round after round (the order
reversed every other round), so that both counts see the same process, memory and
load. Each outermost call of a CPU backend function (``sitp.kernels.cpu.ops``: matmul,
binary, reduce, ...), of a fused layer's forward or backward (``sitp.nn._functions``:
``Linear``, ``LayerNorm``, ``Attention``, ...) and of the optimizer's kernel is timed
with ``time.perf_counter`` and credited to its name; a call made inside another timed
call is part of the outer one. What is left of the step's wall time is the Python
around the calls: the model's modules, the autograd engine, the optimizer's loop,
making tensors. The timers cost about a microsecond a call, which lands in that
remainder at both thread counts.

For each part: milliseconds per step at one thread and at two (medians over the
rounds of each round's mean), the speed-up, and the share of the step's one-thread
time it holds; then Amdahl's law with the measured parts: the step's speed-up if every
kernel had scaled perfectly and the Python stayed as it is.

Usage::

    python scripts/thread_profile.py [--rounds 7] [--steps 20] [--json PATH] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ["NUMBA_NUM_THREADS"] = "2"  # a pool of two, whatever the caller set: 1 vs 2 is the point

THROUGHPUT = dict(block_size=32, n_layer=4, n_head=4, n_embd=64)  # the GPT of 3.5
SMOKE = dict(block_size=8, n_layer=1, n_head=2, n_embd=16)


class Timers:
    """Wraps functions so that each outermost call adds its seconds to its name."""

    def __init__(self):
        self.depth = 0
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._undo: list = []

    def wrap(self, owner, attr: str, name: str, static: bool = False) -> None:
        raw = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        real = raw.__func__ if isinstance(raw, staticmethod) else raw
        timers = self

        def timed(*args, **kwargs):
            if timers.depth:
                return real(*args, **kwargs)
            timers.depth = 1
            t0 = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t0
                timers.depth = 0
                timers.seconds[name] = timers.seconds.get(name, 0.0) + dt
                timers.calls[name] = timers.calls.get(name, 0) + 1

        self._undo.append((owner, attr, raw))
        setattr(owner, attr, staticmethod(timed) if static else timed)

    def reset(self) -> None:
        self.seconds, self.calls = {}, {}

    def restore(self) -> None:
        for owner, attr, raw in reversed(self._undo):
            setattr(owner, attr, raw)


def instrument(timers: Timers) -> None:
    """Time the CPU backend's functions, the fused layers and the optimizer's kernels."""
    from sitp.compile import capture  # the lists of what sitp.compile traces
    from sitp.kernels.cpu import ops as cpu
    from sitp.optim import adam

    for name in capture._OPS:
        if callable(getattr(cpu, name, None)):
            timers.wrap(cpu, name, name)
    for cls in capture.layer_classes():
        for which in ("forward", "backward"):
            timers.wrap(cls, which, f"{cls.__name__}.{which}", static=True)
    for name in ("adam_kernel", "adam_update"):
        if hasattr(adam, name):
            timers.wrap(adam, name, f"AdamW ({name})")


def build(config: dict, batch: int, steps: int, seed: int):
    """The GPT of 3.5 on names, AdamW, and a step function cycling through batches."""
    import sitp
    from sitp.bench import train_step
    from sitp.data import Vocab, build_token_stream, get_batch, load_names
    from sitp.models import MODELS

    words = load_names("offline")
    vocab = Vocab(words)
    stream = build_token_stream(words, vocab)
    g = sitp.Generator().manual_seed(seed)
    batches = [get_batch(stream, batch, config["block_size"], generator=g) for _ in range(steps)]
    spec = MODELS["gpt"]
    sitp.manual_seed(seed)
    model = spec.build(spec.make_config(vocab_size=len(vocab), **config))
    opt = sitp.optim.AdamW(model.parameters(), lr=1e-3)
    return train_step(model, opt, batches), sum(p.numel() for p in model.parameters())


def measure(step, timers: Timers, threads: int, steps: int) -> dict:
    """One round at ``threads``: seconds per step of the whole and of each part."""
    import numba

    numba.set_num_threads(threads)
    step()  # the first step after a switch wakes the pool: untimed
    timers.reset()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    total = (time.perf_counter() - t0) / steps
    parts = {k: v / steps for k, v in timers.seconds.items()}
    parts["Python around the calls"] = total - sum(parts.values())
    return {"step": total, "parts": parts, "calls": {k: v / steps for k, v in timers.calls.items()}}


def run(rounds: int, steps: int, config: dict, batch: int, seed: int = 0) -> dict:
    from sitp.bench import ab

    cores = sorted(os.sched_getaffinity(0))[:2]
    os.sched_setaffinity(0, cores)
    step, n_params = build(config, batch, steps, seed)
    timers = Timers()
    instrument(timers)
    try:
        for threads in (1, 2, 1, 2):  # warm both counts (numba compiles at first calls)
            measure(step, timers, threads, 2)
        by = {1: [], 2: []}
        load0 = os.getloadavg()[0]
        for r in range(rounds):
            for threads in (1, 2) if r % 2 == 0 else (2, 1):
                by[threads].append(measure(step, timers, threads, steps))
        load1 = os.getloadavg()[0]
    finally:
        timers.restore()
    names = sorted({k for rs in by.values() for m in rs for k in m["parts"]})

    def med(threads, key=None):
        vals = [m["step"] if key is None else m["parts"].get(key, 0.0) for m in by[threads]]
        return statistics.median(vals)

    parts = {
        k: {
            "ms_1t": 1e3 * med(1, k),
            "ms_2t": 1e3 * med(2, k),
            "calls": statistics.median(m["calls"].get(k, 0.0) for m in by[1]),
        }
        for k in names
    }
    step1, step2 = med(1), med(2)
    ratios = sorted(a["step"] / b["step"] for a, b in zip(by[1], by[2]))
    python = parts["Python around the calls"]["ms_1t"] / 1e3
    kernels = step1 - python
    return {
        "config": {**config, "batch": batch, "params": n_params},
        "rounds": rounds,
        "steps": steps,
        "step_ms": {"1t": 1e3 * step1, "2t": 1e3 * step2},
        "speedup": {"median": statistics.median(ratios), "min": ratios[0], "max": ratios[-1]},
        # Amdahl: kernels twice as fast, the Python around them as at one thread
        "amdahl_bound": step1 / (python + kernels / 2),
        "parts": parts,
        "machine": {
            "cpu": ab.cpu_model(),
            "isa": ab.simd_flags(),
            "cores": cores,
            "load_before": load0,
            "load_after": load1,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
    }


def table(res: dict) -> str:
    rows = sorted(res["parts"].items(), key=lambda kv: -kv[1]["ms_1t"])
    s1 = res["step_ms"]["1t"]
    out = [
        f"{'part':34s} {'calls':>6s} {'1 thread':>9s} {'2 threads':>9s} {'gain':>5s} {'share':>6s}"
    ]
    for k, p in rows:
        gain = p["ms_1t"] / p["ms_2t"] if p["ms_2t"] > 0 else float("nan")
        out.append(
            f"{k:34s} {p['calls']:6.0f} {p['ms_1t']:7.2f}ms {p['ms_2t']:7.2f}ms {gain:5.2f} "
            f"{p['ms_1t'] / s1:6.1%}"
        )
    sp = res["speedup"]
    out.append(
        f"{'the step':34s} {'':6s} {s1:7.2f}ms {res['step_ms']['2t']:7.2f}ms "
        f"{sp['median']:5.2f} (rounds {sp['min']:.2f}-{sp['max']:.2f})"
    )
    out.append(f"Amdahl, kernels x2 and the Python as it is: at most {res['amdahl_bound']:.2f}")
    m = res["machine"]
    out.append(
        f"{m['cpu']} ({m['isa']}), cores {m['cores']}, load {m['load_before']:.2f} -> "
        f"{m['load_after']:.2f}, {m['date']}"
    )
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--json", help="write the result to this JSON file")
    p.add_argument("--smoke", action="store_true", help="a tiny model, two rounds (tests)")
    a = p.parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2:
        print("thread_profile: needs two cores", file=sys.stderr)
        return 2
    config, batch, rounds, steps = THROUGHPUT, a.batch, a.rounds, a.steps
    if a.smoke:
        config, batch, rounds, steps = SMOKE, 4, 2, 2
    res = run(rounds, steps, config, batch)
    print(table(res))
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
        os.replace(tmp, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
