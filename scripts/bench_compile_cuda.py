"""Eager CUDA against ``sitp.compile`` on CUDA tensors (``sitp/compile/gpu.py``): a
pointwise chain with broadcasting, and a small MLP training step (forward, loss and
backward in one compiled function).

Usage::

    python scripts/bench_compile_cuda.py [--rounds 7] [--reps 20] [--smoke] [--json PATH]

Each arm is called ``--reps`` times per round, with ``sitp.cuda.synchronize()`` before
the clock stops, and the median of the rounds' per-call times is printed, with the
largest difference between the compiled and the eager result and the number of
generated ``@cuda.jit`` kernels launched. The device is printed first. Under numba's
CUDA simulator (no GPU) the script runs, at tiny sizes with ``--smoke``, as a check that
it works; its times are the simulator's Python threads, not a GPU's, and are not
figures to quote.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np


def _time(fn, reps, rounds, sync):
    fn()  # warm: the trace, numba's compilations
    fn()
    sync()
    per = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        per.append((time.perf_counter() - t0) / reps)
    return statistics.median(per)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, 2 rounds of 2 calls")
    ap.add_argument("--json")
    args = ap.parse_args()

    import sitp
    from sitp.bench.gpu import device_name

    if not (sitp.cuda.is_available() or sitp.cuda.is_simulated()):
        raise SystemExit("bench_compile_cuda: no GPU and the CUDA simulator is off")
    rounds, reps = (2, 2) if args.smoke else (args.rounds, args.reps)
    simulated = sitp.cuda.is_simulated()
    dev = "numba's CUDA simulator (no GPU)" if simulated else device_name()
    print(f"device: {dev}")
    rng = np.random.default_rng(0)

    def cuda_tensor(*shape):
        return sitp.tensor(rng.standard_normal(shape).astype(np.float32)).cuda()

    rows = []
    # 1. a pointwise chain with broadcasting: eager launches one kernel per op
    R, C = (4, 8) if args.smoke else (4096, 1024)
    x, b = cuda_tensor(R, C), cuda_tensor(C)

    def chain(x, b):
        return ((x - b).exp() * 0.5 + 1.0).tanh() * x

    cchain = sitp.compile(chain)
    rows.append(("pointwise", f"{R}x{C}", chain, cchain, (x, b), None))

    # 2. a small MLP training step: matmuls replayed, the rest fused
    B, D, H, O = (4, 3, 5, 2) if args.smoke else (256, 512, 1024, 64)
    X, Y = cuda_tensor(B, D), cuda_tensor(B, O)
    params = [cuda_tensor(D, H), cuda_tensor(H), cuda_tensor(H, O)]
    for p in params:
        p.requires_grad_(True)

    def step(x, y, w1, b1, w2):
        h = (x @ w1 + b1).tanh()
        loss = ((h @ w2 - y) ** 2).mean()
        loss.backward()
        return loss

    def zero():
        for p in params:
            p.grad = None

    cstep = sitp.compile(step)
    rows.append(("step", f"B={B} {D}-{H}-{O}", step, cstep, (X, Y, *params), zero))

    results = []
    print(f"{'case':<10}{'size':<20}{'eager ms':>10}{'compiled ms':>13}{'ratio':>8}"
          f"{'max |diff|':>12}{'kernels':>9}{'launches':>10}")  # fmt: skip
    for name, size, fn, cfn, inputs, before in rows:

        def run(f, inputs=inputs, before=before):
            if before is not None:
                before()
            return f(*inputs)

        eager = _time(lambda: run(fn), reps, rounds, sitp.cuda.synchronize)
        compiled = _time(lambda: run(cfn), reps, rounds, sitp.cuda.synchronize)
        e = cfn.entries[0]
        if e.program is None:
            raise SystemExit(f"bench_compile_cuda: {name} was not compiled: {e.reason}")
        ref = run(fn).cpu().detach().numpy()
        got = run(cfn).cpu().detach().numpy()
        diff = float(np.max(np.abs(ref - got)))
        launches = e.program.launches[0]
        kernels = e.report["kernels"]
        print(f"{name:<10}{size:<20}{1e3 * eager:>10.3f}{1e3 * compiled:>13.3f}"
              f"{eager / compiled:>8.2f}{diff:>12.2e}{kernels:>9}{launches:>10}")  # fmt: skip
        results.append(
            dict(
                case=name,
                size=size,
                eager_ms=1e3 * eager,
                compiled_ms=1e3 * compiled,
                max_abs_diff=diff,
                kernels=kernels,
                launches=launches,
            )  # fmt: skip
        )
    if simulated:
        print("(simulator times: Python threads, not a GPU; not figures to quote)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev, "simulated": simulated, "rounds": rounds, "reps": reps,
                       "results": results}, f, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
