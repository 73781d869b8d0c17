"""sitp.compile against eager sitp, PyTorch eager and torch.compile (inductor), one thread.

Usage::

    python scripts/bench_compile.py [--reps 20] [--rounds 5] [--no-torch-compile] [--cold]
        [--cpu-time] [--json PATH [--append]] [--smoke] [--blocks NAME,...]

Three blocks of a GPT's step, each written once with ops so that both libraries run the
same code: GELU(x W + b) (tanh form), layer norm of a residual sum, and the attention
softmax chain (scale, causal mask, softmax). Then a small GPT train step (forward and
backward; sitp's GPT is built from fused layers, some of which the compiler lowers; the
same model file runs in PyTorch through sitp.models.port).

Four arms per block, timed by sitp.bench.ab: eager sitp and sitp.compile in one worker
process, PyTorch eager and torch.compile in another (numba's and torch's thread pools
interfere when they share a process), each worker on one thread pinned to the same core.
Every arm is warmed by two untimed calls; for the compiled arms these are the compile
time, reported apart (sitp: the trace and the passes, then numba's compilation at each
kernel's first call, ``--cold`` making sources numba has not cached; inductor: its
compilation at the first call). Then ``--rounds`` rounds, the arms taking turns (the
order reversed every other round, so that a change of load falls on all), each timing
``--reps`` calls. For each block: each arm's median over the rounds of its rounds'
medians, in ms, with the range of the rounds; the time ratios of the arms per round, their
median and range; the graph's ops before and the steps after the passes (of which
generated kernels); the bytes the calls read and write, estimated from the graph (each
operand's entries once, each result once); the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
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


def inputs(lib, dtype, dims):
    B, T, C, H = (dims[k] for k in "BTCH")
    rng = np.random.default_rng(0)

    def t(*shape):
        return lib.tensor(rng.standard_normal(shape).astype(np.float32), dtype=dtype)

    mask = lib.tensor(np.tril(np.ones((T, T), bool)))
    return {
        "gelu(xW+b)": (gelu_block, (t(B * T, C), t(C, 4 * C), t(4 * C))),
        "layernorm(x+r)": (ln_residual, (t(B * T, C), t(B * T, C), t(C), t(C))),
        "attention softmax": (attn_softmax, (t(B, H, T, T), mask)),
    }


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



# ------------------------------------------------------------------ the arms' workloads
# Each arm runs in a worker process of sitp.bench.ab, which imports this file and calls
# workload(); the imports of a library sit inside, so the torch worker never imports
# numba for the blocks, and the sitp worker never imports torch.


def salt_sources(salt: str) -> None:
    """--cold: a comment unique to this run, appended to every generated source, so that
    numba compiles each kernel anew (its disk cache has never seen the source)."""
    from sitp.compile import codegen  # late: in the sitp worker only

    if salt and not getattr(codegen, "_bench_salt", None):
        generate = codegen.generate
        codegen.generate = lambda kernel, target="cpu": generate(kernel, target) + salt
        codegen._bench_salt = salt


def sitp_graph_info(raw, cf) -> dict:
    """The compiled function's report, and the bytes of the graph before and after the passes."""
    rep = cf.entries[0].report
    assert len(cf.entries) == 1 and cf.entries[0].program is not None
    return {
        "ops": rep["ops_before"],
        "steps": rep["steps_after"],
        "kernels": rep["kernels"],
        "bytes_eager": graph_bytes(raw.graph),
        "bytes_compiled": graph_bytes(cf.graph),
    }


def block_workload(lib, lib_name, block, mode, dims, salt):
    fn, args = inputs(lib, lib.float32, dims)[block]
    f = lambda *a: fn(lib, *a)  # noqa: E731
    if mode == "compiled":
        if lib_name == "sitp":
            salt_sources(salt)
        target = lib.compile(f)
    else:
        target = f

    def call():
        with lib.no_grad():
            return target(*args)

    def info():  # after the warm-up: the compiled result checked against eager
        with lib.no_grad():
            got, want = target(*args).numpy(), f(*args).numpy()
        assert np.allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True), (lib_name, block)
        if lib_name != "sitp":
            return {}
        from sitp.compile.api import CompiledFunction  # late: in the sitp worker only

        raw = CompiledFunction(f, passes_on=())  # the captured graph, no passes
        with lib.no_grad():
            raw(*args)
        return sitp_graph_info(raw, target)

    if mode == "compiled":
        call.info = info
    return call


def gpt_workload(lib, lib_name, mode, dims, salt):
    """A small GPT's train step: forward, loss, backward (the optimizer step stays
    outside); the gradients start from None each call, as after zero_grad(set_to_none=True)."""
    from sitp.models.port import load_module  # late: the same model file for both libraries

    B, T, C, H = (dims[k] for k in "BTCH")
    gpt = load_module("gpt", lib_name)
    lib.manual_seed(0)
    cfg = gpt.GPTConfig(block_size=T, vocab_size=65, n_layer=2, n_head=H, n_embd=C, dropout=0.0)
    model = gpt.GPT(cfg)
    rng = np.random.default_rng(0)
    x = lib.tensor(rng.integers(0, 65, (B, T)))
    y = lib.tensor(rng.integers(0, 65, (B, T)))

    def step():
        _, loss = model(x, y)
        loss.backward()
        return loss

    if mode == "compiled":
        if lib_name == "sitp":
            salt_sources(salt)
        target = lib.compile(step)
    else:
        target = step

    def call():
        model.zero_grad(set_to_none=True)
        return target()

    def info():
        model.zero_grad(set_to_none=True)
        want = step().item()
        assert abs(call().item() - want) < 1e-4, (lib_name, "GPT train step")
        if lib_name != "sitp":
            return {}
        from sitp.compile.api import CompiledFunction  # late: in the sitp worker only

        raw = CompiledFunction(step, passes_on=())
        model.zero_grad(set_to_none=True)
        raw()
        return sitp_graph_info(raw, target)

    if mode == "compiled":
        call.info = info
    return call


def workload(lib_name: str, block: str, mode: str, dims: dict, salt: str = ""):
    """The call an arm times: ``block`` in ``lib_name`` ("sitp" or "torch"), ``mode``
    "eager" or "compiled" (sitp.compile; torch.compile with inductor)."""
    if lib_name == "sitp":
        import sitp as lib  # late: each worker imports its own library
    else:
        import torch as lib  # late: as above

    if block == "GPT train step":
        return gpt_workload(lib, lib_name, mode, dims, salt)
    return block_workload(lib, lib_name, block, mode, dims, salt)


# ------------------------------------------------------------------ the run
BLOCKS = ["gelu(xW+b)", "layernorm(x+r)", "attention softmax", "GPT train step"]
SMOKE = {"B": 2, "T": 8, "C": 16, "H": 2}  # --smoke: seconds, for the tests
ARMS = {  # arm -> (worker, mode)
    "eager": ("sitp", "eager"),
    "compiled": ("sitp", "compiled"),
    "torch": ("torch", "eager"),
    "inductor": ("torch", "compiled"),
}
RATIOS = [("eager", "compiled"), ("compiled", "torch"), ("compiled", "inductor")]


def measure(args, dims, salt) -> tuple[dict, dict]:
    """Every block's arms through sitp.bench.ab; (rows, the harness's record)."""
    from sitp.bench import ab  # late: the workers import this file without sitp

    arm_names = [a for a in ARMS if not (args.no_torch_compile and a == "inductor")]
    rows, loads = {}, {}
    env = {"torch": {"SITP_MALLOC_TUNING": "0"}}  # PyTorch keeps glibc's malloc settings
    with ab.workers(["sitp", "torch"], threads=1, env=env) as w:
        for block in args.blocks:
            arms = {
                name: ab.Arm(
                    w[ARMS[name][0]],
                    f"{os.path.abspath(__file__)}:workload",
                    dict(lib_name=ARMS[name][0], block=block, mode=ARMS[name][1], dims=dims,
                         salt=salt if ARMS[name] == ("sitp", "compiled") else ""),
                    warmup=2,  # the compiled arms: the trace and the passes, then the compilers
                )
                for name in arm_names
            }  # fmt: skip
            ratios = [(x, y) for x, y in RATIOS if x in arms and y in arms]
            res = ab.compare(
                arms, rounds=args.rounds, calls=args.reps, ratios=ratios, clock=args.clock
            )
            a = res["arms"]
            row = {name: 1e3 * a[name]["median"] for name in arm_names}
            row["compile_s"] = sum(a["compiled"]["warmup_s"])
            row.update(a["compiled"]["info"])
            if "inductor" in a:
                row["inductor_compile_s"] = sum(a["inductor"]["warmup_s"])
            row["range_ms"] = {n: [1e3 * a[n]["min"], 1e3 * a[n]["max"]] for n in arm_names}
            row["ratios"] = {
                k: {s: v[s] for s in ("median", "min", "max")} for k, v in res["ratios"].items()
            }
            rows[block] = row
            loads[block] = res["load"]
            print(f"{block}:\n{ab.table(res)}\n", flush=True)
    harness = {
        k: res[k] for k in ("harness", "machine", "threads", "cores", "versions", "order")
    }
    harness["load"] = loads
    return rows, harness


def write_json(path, args, dims, rows, harness, load, cpu) -> None:
    """Write the run to ``path``: machine, config and a list of runs (``--append`` adds
    this one to the runs already there), atomically."""
    config = {"B": dims["B"], "T": dims["T"], "C": dims["C"], "heads": dims["H"],
              "dtype": "float32", "threads": 1}  # fmt: skip
    run = {
        "reps": args.reps,
        "rounds": args.rounds,
        "clock": "process_time" if args.cpu_time else "perf_counter",
        "cache": "cold" if args.cold else "warm",
        "loadavg_1min": round(load, 2),
        "rows": rows,
        "harness": harness,
    }
    record = {
        "machine": cpu,
        "config": config,
        "statistic": "median ms of a call (eager, compiled, torch, inductor): the median over "
        "the rounds of each round's median of reps calls, the four arms alternating "
        "(sitp.bench.ab); range_ms: the rounds' min and max; compile_s and "
        "inductor_compile_s: the first two calls, in s; bytes as graph_bytes counts",
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
    ap.add_argument("--reps", type=int, default=20, help="calls per arm in each round (20)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds, the arms alternating (5)")
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
        help="time each call by its worker's CPU time (time.process_time), not the wall "
        "clock: on a machine other jobs share, a call's wall time includes their turns",
    )
    ap.add_argument("--smoke", action="store_true", help="tiny blocks and GPT (the tests)")
    ap.add_argument(
        "--blocks",
        type=lambda v: v.split(","),
        default=BLOCKS,
        help="the blocks to time, comma-separated (default: all four)",
    )
    args = ap.parse_args(argv)
    for b in args.blocks:
        if b not in BLOCKS:
            ap.error(f"--blocks: no block {b!r}; the blocks are {', '.join(BLOCKS)}")
    args.clock = "cpu" if args.cpu_time else "wall"
    from sitp.bench import cpu_model  # late: the workers import this file without sitp

    dims = SMOKE if args.smoke else {"B": B, "T": T, "C": C, "H": H}
    load = os.getloadavg()[0]  # other processes' demand for the cores, as the run starts
    salt = f"# bench_compile --cold {time.time_ns()}\n" if args.cold else ""
    rows, harness = measure(args, dims, salt)
    print(f"CPU: {cpu_model()}; one thread; float32; B={dims['B']} T={dims['T']} "
          f"C={dims['C']} heads={dims['H']}")  # fmt: skip
    cache = "cold: numba compiles each kernel" if args.cold else "warm: kernels from the disk cache"
    clock = "CPU time of its worker" if args.cpu_time else "wall clock"
    print(
        f"medians over {args.rounds} rounds of the median of {args.reps} calls, in ms ({clock}; "
        f"each arm in a worker, the arms alternating); compile time (the first two calls) "
        f"apart, in s ({cache})\n"
    )
    head = (
        f"{'block':<18} {'sitp':>8} {'compiled':>9} {'x':>5} {'torch':>8} {'inductor':>9}"
        f" {'compile s':>10} {'ind. s':>7} {'ops->steps (kernels)':>22} {'MB eager->compiled':>19}"
    )
    print(head)
    nan = float("nan")
    for name, r in rows.items():
        print(
            f"{name:<18} {r['eager']:8.3f} {r['compiled']:9.3f} {r['eager'] / r['compiled']:5.2f}"
            f" {r.get('torch', nan):8.3f} {r.get('inductor', nan):9.3f}"
            f" {r['compile_s']:10.2f} {r.get('inductor_compile_s', nan):7.2f}"
            f" {str(r['ops']) + ' -> ' + str(r['steps']) + ' (' + str(r['kernels']) + ')':>22}"
            f" {r['bytes_eager'] / 1e6:8.2f} -> {r['bytes_compiled'] / 1e6:7.2f}"
        )
    print(f"\ntime ratios, median (min-max) over {args.rounds} rounds:")
    for name, r in rows.items():
        cells = [
            f"{k} {v['median']:.2f} ({v['min']:.2f}-{v['max']:.2f})" for k, v in r["ratios"].items()
        ]
        print(f"{name:<18} " + "; ".join(cells))
    if args.json:
        write_json(args.json, args, dims, rows, harness, load, cpu_model())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
