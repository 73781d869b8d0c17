"""sitp.compile against eager sitp, PyTorch eager and torch.compile (inductor), one thread.

Usage::

    python scripts/bench_compile.py [--reps 20] [--no-torch-compile] [--cold] [--cpu-time]
        [--json PATH [--append]]

Three blocks of a GPT's step, each written once with ops so that both libraries run the
same code: GELU(x W + b) (tanh form), layer norm of a residual sum, and the attention
softmax chain (scale, causal mask, softmax). Then a small GPT train step (forward and
backward; sitp's GPT is built from fused layers, some of which the compiler lowers),
its eager and compiled calls alternating so that a change of load falls on both. For each: the
median time of a call (ms); the compile time apart (the first two calls: the trace and
the passes, then numba's compilation at each kernel's first call; ``--cold`` makes
sources numba has not cached); the graph's ops before and the steps after the passes
(of which generated kernels); the bytes the calls read and write, estimated from the
graph (each operand's entries once, each result once). PyTorch runs in a child
process: numba's and torch's thread pools interfere when they share one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

B, T, C, H = 8, 64, 128, 4  # the rows of the blocks: B * T tokens of width C


def gelu_block(lib, x, w, b):
    h = x @ w + b
    return 0.5 * h * (1.0 + ((h + 0.044715 * h * h * h) * 0.7978845608028654).tanh())


def ln_residual(lib, x, r, g, b):
    y = x + r
    m = y.mean(-1, keepdim=True)
    d = y - m
    v = (d * d).mean(-1, keepdim=True)
    return d * (v + 1e-5).rsqrt() * g + b


def attn_softmax(lib, s, mask):
    s = s * (1.0 / 32**0.5)
    s = lib.where(mask, s, lib.full_like(s, float("-inf")))
    m = s.amax(-1, keepdim=True)
    e = (s - m).exp()
    return e / e.sum(-1, keepdim=True)


def inputs(lib, dtype):
    rng = np.random.default_rng(0)

    def t(*shape):
        return lib.tensor(rng.standard_normal(shape).astype(np.float32), dtype=dtype)

    mask = lib.tensor(np.tril(np.ones((T, T), bool)))
    return {
        "gelu(xW+b)": (gelu_block, (t(B * T, C), t(C, 4 * C), t(4 * C))),
        "layernorm(x+r)": (ln_residual, (t(B * T, C), t(B * T, C), t(C), t(C))),
        "attention softmax": (attn_softmax, (t(B, H, T, T), mask)),
    }


CLOCK = time.perf_counter  # --cpu-time: time.process_time, this process's CPU time


def median_ms(fn, reps):
    times = []
    for _ in range(reps):
        t0 = CLOCK()
        fn()
        times.append(CLOCK() - t0)
    return 1e3 * float(np.median(times))


def median_ms_pair(f, g, reps):
    """Median ms of calls of f and of g, the calls alternating (f, g, f, g, ...): a
    change in the machine's load during the run falls on both alike."""
    f(), g()
    tf, tg = [], []
    for _ in range(reps):
        for fn, times in ((f, tf), (g, tg)):
            t0 = CLOCK()
            fn()
            times.append(CLOCK() - t0)
    return 1e3 * float(np.median(tf)), 1e3 * float(np.median(tg))


def graph_bytes(g) -> int:
    """Bytes a graph's calls read and write: each operand view's entries, each result."""
    total = 0
    for n in g.nodes:
        if n.fn == "kernel":
            total += sum(v.nbytes for v in n.kernel.leaves)
        else:
            for r in n.refs():
                if hasattr(r, "dtype") and r.dtype is not None:
                    total += min(int(np.prod(r.shape)), r.value.size) * r.value.np_dtype.itemsize
        total += sum(v.nbytes for v in n.made() if v.kind != "ctx")
    return total


def run_sitp(reps):
    import sitp  # late: the child process for torch must not import numba's pool
    from sitp.bench import threads
    from sitp.compile.api import CompiledFunction
    from sitp.models.gpt import GPT, GPTConfig

    rows = {}
    with threads(1), sitp.no_grad():
        for name, (fn, args) in inputs(sitp, sitp.float32).items():
            f = lambda *a, fn=fn: fn(sitp, *a)  # noqa: E731
            raw = CompiledFunction(f, passes_on=())  # the captured graph, no passes
            raw(*args)
            cf = sitp.compile(f)
            t0 = time.perf_counter()
            cf(*args)  # the trace and the passes
            cf(*args)  # numba compiles each kernel at its first call
            compile_s = time.perf_counter() - t0
            got, want = cf(*args).numpy(), f(*args).numpy()
            assert np.allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True), name
            rep = cf.entries[0].report
            rows[name] = {
                "eager": median_ms(lambda: f(*args), reps),
                "compiled": median_ms(lambda: cf(*args), reps),
                "compile_s": compile_s,
                "ops": rep["ops_before"],
                "steps": rep["steps_after"],
                "kernels": rep["kernels"],
                "bytes_eager": graph_bytes(raw.graph),
                "bytes_compiled": graph_bytes(cf.graph),
            }
    # a small GPT's train step: forward, loss, backward (the optimizer step stays outside)
    with threads(1):
        sitp.manual_seed(0)
        cfg = GPTConfig(block_size=T, vocab_size=65, n_layer=2, n_head=H, n_embd=C, dropout=0.0)
        model = GPT(cfg)
        rng = np.random.default_rng(0)
        x = sitp.tensor(rng.integers(0, 65, (B, T)))
        y = sitp.tensor(rng.integers(0, 65, (B, T)))

        def step():
            _, loss = model(x, y)
            loss.backward()
            return loss

        def fresh(fn):  # the gradients start from None, as after zero_grad(set_to_none=True)
            return lambda: (model.zero_grad(set_to_none=True), fn())[1]

        raw = CompiledFunction(step, passes_on=())
        fresh(raw)()
        cs = sitp.compile(step)
        t0 = time.perf_counter()
        fresh(cs)()
        fresh(cs)()
        compile_s = time.perf_counter() - t0
        assert abs(fresh(cs)().item() - fresh(step)().item()) < 1e-5
        rep = cs.entries[0].report
        assert len(cs.entries) == 1 and cs.entries[0].program is not None
        eager_ms, compiled_ms = median_ms_pair(fresh(step), fresh(cs), reps)
        rows["GPT train step"] = {
            "eager": eager_ms,
            "compiled": compiled_ms,
            "compile_s": compile_s,
            "ops": rep["ops_before"],
            "steps": rep["steps_after"],
            "kernels": rep["kernels"],
            "bytes_eager": graph_bytes(raw.graph),
            "bytes_compiled": graph_bytes(cs.graph),
        }
    return rows


def run_torch(reps, use_compile):
    import torch  # late: only in the child process

    torch.set_num_threads(1)
    rows = {}
    with torch.no_grad():
        for name, (fn, args) in inputs(torch, torch.float32).items():
            f = lambda *a, fn=fn: fn(torch, *a)  # noqa: E731
            row = {"torch": median_ms(lambda: f(*args), reps)}
            if use_compile:
                cf = torch.compile(f)
                t0 = time.perf_counter()
                cf(*args)
                row["inductor_compile_s"] = time.perf_counter() - t0
                row["inductor"] = median_ms(lambda: cf(*args), reps)
            rows[name] = row
    return rows


def write_json(path, args, rows, ref, load, cpu) -> None:
    """Write the run to ``path``: machine, config and a list of runs (``--append`` adds
    this one to the runs already there), atomically."""
    config = {"B": B, "T": T, "C": C, "heads": H, "dtype": "float32", "threads": 1}
    run = {
        "reps": args.reps,
        "clock": "process_time" if args.cpu_time else "perf_counter",
        "cache": "cold" if args.cold else "warm",
        "loadavg_1min": round(load, 2),
        "rows": {name: {**r, **ref.get(name, {})} for name, r in rows.items()},
    }
    record = {
        "machine": cpu,
        "config": config,
        "statistic": "median ms of a call (eager, compiled, torch, inductor); "
        "compile_s and inductor_compile_s: the first calls, in s; bytes as graph_bytes counts",
        "runs": [],
    }
    if args.append and os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
        if old.get("machine") != cpu or old.get("config") != config:
            raise SystemExit(f"{path} holds runs of another machine or config; not appending")
        record["runs"] = old["runs"]
    record["runs"].append(run)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--no-torch-compile", action="store_true")
    ap.add_argument(
        "--cold",
        action="store_true",
        help="generate sources numba has not cached, so that the compile time includes numba's",
    )
    ap.add_argument(
        "--json", metavar="PATH", help="also write the run (machine, config, rows) here"
    )
    ap.add_argument(
        "--append",
        action="store_true",
        help="add this run to the runs already in --json PATH (same machine and config)",
    )
    ap.add_argument(
        "--cpu-time",
        action="store_true",
        help="time each call by this process's CPU time (time.process_time), not the wall "
        "clock: on a machine other jobs share, a call's wall time includes their turns",
    )
    ap.add_argument("--child", choices=["torch"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cpu_time:
        global CLOCK
        CLOCK = time.process_time
    if args.child:
        print(json.dumps(run_torch(args.reps, not args.no_torch_compile)))
        return 0
    from sitp.bench import cpu_model  # late: see run_sitp

    load = os.getloadavg()[0]  # other processes' demand for the cores, as the run starts

    flags = ["--child", "torch", "--reps", str(args.reps)] + (
        ["--cpu-time"] if args.cpu_time else []
    )
    if args.no_torch_compile:
        flags.append("--no-torch-compile")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, __file__, *flags], capture_output=True, text=True, env=env, check=True
    )
    ref = json.loads(out.stdout.strip().splitlines()[-1])
    if args.cold:  # a comment unique to this run: new sources, which numba has never compiled
        from sitp.compile import codegen  # late: see run_sitp

        generate, salt = codegen.generate, f"# bench_compile --cold {time.time_ns()}\n"
        codegen.generate = lambda kernel, target="cpu": generate(kernel, target) + salt
    rows = run_sitp(args.reps)
    print(f"CPU: {cpu_model()}; one thread; float32; B={B} T={T} C={C} heads={H}")
    cache = "cold: numba compiles each kernel" if args.cold else "warm: kernels from the disk cache"
    clock = "CPU time of this process" if args.cpu_time else "wall clock"
    print(
        f"medians of {args.reps} calls in ms ({clock}); compile time (the first two calls) "
        f"apart, in s ({cache})\n"
    )
    head = (
        f"{'block':<18} {'sitp':>8} {'compiled':>9} {'x':>5} {'torch':>8} {'inductor':>9}"
        f" {'compile s':>10} {'ind. s':>7} {'ops->steps (kernels)':>22} {'MB eager->compiled':>19}"
    )
    print(head)
    for name, r in rows.items():
        t = ref.get(name, {})
        print(
            f"{name:<18} {r['eager']:8.3f} {r['compiled']:9.3f} {r['eager'] / r['compiled']:5.2f}"
            f" {t.get('torch', float('nan')):8.3f} {t.get('inductor', float('nan')):9.3f}"
            f" {r['compile_s']:10.2f} {t.get('inductor_compile_s', float('nan')):7.2f}"
            f" {str(r['ops']) + ' -> ' + str(r['steps']) + ' (' + str(r['kernels']) + ')':>22}"
            f" {r['bytes_eager'] / 1e6:8.2f} -> {r['bytes_compiled'] / 1e6:7.2f}"
        )
    if args.json:
        write_json(args.json, args, rows, ref, load, cpu_model())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
