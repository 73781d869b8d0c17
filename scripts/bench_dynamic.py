"""What a symbolic batch size saves: a GPT train step compiled with ``dynamic=False``
(every batch size its own program and kernels) and with the default (a dynamic entry
after the first change), called at batch sizes 8, 5, 3 and 6, one thread.

Usage::

    python scripts/bench_dynamic.py [--reps 15] [--smoke] [--json PATH]

Each arm runs in a fresh worker process. Generated sources get a comment unique to the
run, so that numba compiles every kernel (its disk cache has never seen them): the
first call at each size is timed whole (the trace, the passes, numba's compilations,
the step), and the kernels numba compiled are counted. Then, at each size, the median
of ``--reps`` calls of the compiled step: the price of sizes read as arguments instead
of constants.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SIZES = (8, 5, 3, 6)


def worker(arm: str, reps: int, smoke: bool) -> dict:
    import hashlib

    import numpy as np

    import sitp
    from sitp.compile import codegen
    from sitp.models.gpt import GPT, GPTConfig

    # a new salt per run makes every source new, so that numba compiles it cold (and
    # leaves it in the cache); the smoke run (a test) keeps one salt per arm, so that its
    # later runs load the kernels from numba's disk cache, and adds no files each run
    salt = f"# bench_dynamic {arm} {'smoke' if smoke else time.time_ns()}\n"
    gen, gemm, load = codegen.generate, codegen.generate_gemm, codegen.load
    codegen.generate = lambda k, target="cpu": gen(k, target) + salt
    codegen.generate_gemm = lambda *a, **kw: gemm(*a, **kw) + salt
    compiled = []

    def counting(source, name, target="cpu"):
        h = hashlib.sha1(source.encode()).hexdigest()[:16]
        if (h, target) not in codegen._loaded:
            compiled.append(name)
        return load(source, name, target)

    codegen.load = counting
    sitp.manual_seed(0)
    T, C, L = (16, 32, 1) if smoke else (64, 64, 2)
    cfg = GPTConfig(block_size=T, vocab_size=65, n_layer=L, n_head=4, n_embd=C, dropout=0.0)
    model = GPT(cfg)
    rng = np.random.default_rng(0)

    def step(x, y):
        _, loss = model(x, y)
        loss.backward()
        return loss

    cs = sitp.compile(step, dynamic=False if arm == "static" else None)
    batches = {B: [sitp.tensor(rng.integers(0, 65, (B, T))) for _ in range(2)] for B in SIZES}
    first, steady, kernels = {}, {}, {}
    for B in SIZES:
        x, y = batches[B]
        compiled.clear()
        t0 = time.perf_counter()
        for _ in range(2):  # the trace (at a new size, the dynamic entry's check), the
            model.zero_grad(set_to_none=True)  # passes, numba's compilations; the program
            cs(x, y)
        first[B] = time.perf_counter() - t0
        kernels[B] = len(compiled)
    for B in SIZES:
        x, y = batches[B]
        ts = []
        for _ in range(reps):
            model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            cs(x, y)
            ts.append(time.perf_counter() - t0)
        steady[B] = float(np.median(ts))
    return {
        "arm": arm,
        "first_two_calls_s": {str(B): s for B, s in first.items()},
        "kernels_compiled": {str(B): n for B, n in kernels.items()},
        "step_ms": {str(B): 1e3 * s for B, s in steady.items()},
        "entries": len(cs.entries),
        "dims": {"T": T, "C": C, "n_layer": L},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.arm:
        print(json.dumps(worker(args.arm, args.reps, args.smoke)))
        return
    from sitp.bench import cpu_model

    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    rows = []
    for arm in ("static", "dynamic"):
        cmd = [sys.executable, __file__, "--arm", arm, "--reps", str(args.reps)]
        out = subprocess.run(cmd + ["--smoke"] * args.smoke, env=env, capture_output=True,
                             text=True, check=True)  # fmt: skip
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"CPU: {cpu_model()}; one thread; float32 GPT {rows[0]['dims']}; cold numba cache")
    print("first two calls at each batch size, s (kernels numba compiled); then the step, ms")
    print(f"{'arm':<8}" + "".join(f"{'B=' + str(B):>16}" for B in SIZES) + f"{'entries':>9}")
    for r in rows:
        first, kernels = r["first_two_calls_s"], r["kernels_compiled"]
        cells = "".join(f"{first[str(B)]:>10.2f} ({kernels[str(B)]:>3})" for B in SIZES)
        print(f"{r['arm']:<8}{cells}{r['entries']:>9}")
    for r in rows:
        steps = r["step_ms"]
        print(f"{r['arm']:<8}" + "".join(f"{steps[str(B)]:>16.2f}" for B in SIZES))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu_model(), "sizes": SIZES, "arms": rows}, f, indent=1)


if __name__ == "__main__":
    main()
