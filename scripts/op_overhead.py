"""Per-op overhead: microseconds per call of small ops, sitp against PyTorch (issue 34).

On tensors of a few dozen entries an op's arithmetic takes nanoseconds; what a call
costs is the library's own work around it: Python dispatch, dtype promotion, shape and
stride checks, making the result, launching the kernel, recording the autograd graph.
This script measures that cost per op, and where it goes.

Part 1 (the comparison) times each op on (4, 8) float32 operands, (8, 8) for the
matrix product, with the fair harness :mod:`sitp.bench.ab`: each library in its own
worker process, one thread, pinned to the same core, warmed, the arms taking turns in
``--rounds`` rounds (``--clock cpu``: each worker's CPU seconds instead of the wall clock,
for a machine that other jobs keep busy). One timed call runs the op ``--inner`` times in a loop; the figure
is its seconds over ``--inner``, in microseconds (the loop's own cost, a few tens of
nanoseconds, is in both libraries' figures). Each op is timed three ways: plain
operands; operands with ``requires_grad=True`` (the forward only, recording the graph);
and a short chain, forward and backward. With ``--before DIR`` a third arm runs sitp
from the source tree ``DIR/src`` (``git archive <commit> src | tar -x -C DIR``), so
that an old and a new version are timed interleaved on the same machine.

Part 2 (the profile) runs ``a + b`` in this process under cProfile, without and with
grad, and adds up the time spent in each layer's functions (dispatch, dtype promotion,
the launcher, result construction, the numba call, autograd); cProfile slows every
Python call, so the shares are a guide and the absolute figures of part 1 are the
measurement. It also times the pieces of ``a + b`` one by one (best of several repeats).

Usage::

    python scripts/op_overhead.py                       # prints the table
    python scripts/op_overhead.py --json src/sitp/examples/op-overhead-intel.json \\
        --before /tmp/sitp_before --label-before 112cf03 --clock cpu
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import timeit

# ---------------------------------------------------------------- the workloads
# name -> (what it runs, as text for the record, whether operands require grad, chain?)
OPS = {
    "add": "a + b",
    "mul_scalar": "a * 2.0",
    "tanh": "a.tanh()",
    "sum_last": "a.sum(-1)",
    "matmul": "a @ w",
    "slice_view": "a[:, 1:3]",
    "view": "a.view(8, 4)",
    "transpose": "a.t()",
    "masked_fill": "a.masked_fill(mask, 0)",
    "softmax": "F.softmax(a, -1)",
    "pow": "a.pow(2)",
}
CHAIN = "loss = F.softmax((a @ w + b).tanh() * 2.0, -1).pow(2).sum(); loss.backward()"


def _ops(lib):
    if lib == "torch":
        import torch
        import torch.nn.functional as F
    else:
        import sitp as torch
        import sitp.nn.functional as F
    return torch, F


def workload(lib: str, op: str, grad: bool = False, inner: int = 200):
    """A callable that runs ``op`` ``inner`` times on small operands of library ``lib``
    (``"sitp"`` or ``"torch"``); ``op`` is a key of OPS, or ``"chain"`` (forward and
    backward of CHAIN, grads reset to None before each)."""
    torch, F = _ops(lib)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(4, 8, generator=g)
    b = torch.randn(4, 8, generator=g)
    w = torch.randn(8, 8, generator=g)
    mask = a > 0
    if grad or op == "chain":
        a.requires_grad_(True)
        b.requires_grad_(True)
        w.requires_grad_(True)
    fns = {
        "add": lambda: a + b,
        "mul_scalar": lambda: a * 2.0,
        "tanh": lambda: a.tanh(),
        "sum_last": lambda: a.sum(-1),
        "matmul": lambda: a @ w,
        "slice_view": lambda: a[:, 1:3],
        "view": lambda: a.view(8, 4),
        "transpose": lambda: a.t(),
        "masked_fill": lambda: a.masked_fill(mask, 0),
        "softmax": lambda: F.softmax(a, -1),
        "pow": lambda: a.pow(2),
    }
    if op == "chain":

        def one():
            a.grad = b.grad = w.grad = None
            F.softmax((a @ w + b).tanh() * 2.0, -1).pow(2).sum().backward()

    else:
        one = fns[op]
    rng = range(inner)

    def run():
        for _ in rng:
            one()

    return run


def cases():
    """(name, op, grad) for every timed case."""
    out = [(op, op, False) for op in OPS]
    out += [(op + "+grad", op, True) for op in OPS if op != "slice_view"] + [
        ("slice_view+grad", "slice_view", True)
    ]
    out.append(("chain fwd+bwd", "chain", True))
    return out


def compare(args) -> dict:
    from sitp.bench import ab

    here = os.path.abspath(__file__)
    names = ["sitp", "torch"] + (["sitp_before"] if args.before else [])
    env = {"sitp_before": ab.source_tree_env(args.before)} if args.before else {}
    results = {}
    with ab.workers(names, threads=1, env=env) as w:
        for name, op, grad in cases():
            kw = {"op": op, "grad": grad, "inner": args.inner}
            arms = {
                "sitp": ab.Arm(w["sitp"], f"{here}:workload", {"lib": "sitp", **kw}, warmup=3),
                "torch": ab.Arm(w["torch"], f"{here}:workload", {"lib": "torch", **kw}, warmup=3),
            }
            ratios = [("sitp", "torch")]
            if args.before:
                arms["sitp_before"] = ab.Arm(
                    w["sitp_before"], f"{here}:workload", {"lib": "sitp", **kw}, warmup=3
                )
                ratios += [("sitp_before", "torch"), ("sitp_before", "sitp")]
            res = ab.compare(
                arms,
                rounds=args.rounds,
                calls=args.calls,
                ratios=ratios,
                pause=0.05,
                clock=args.clock,
            )
            results[name] = res
            print(_row(name, res, args.inner), flush=True)
    return results


def _us(res, arm, inner):
    a = res["arms"][arm]
    return {k: a[k] / inner * 1e6 for k in ("median", "min", "max")}


def _row(name, res, inner):
    cells = []
    for arm in ("sitp_before", "sitp", "torch"):
        if arm in res["arms"]:
            u = _us(res, arm, inner)
            cells.append(f"{arm} {u['median']:6.2f} ({u['min']:.2f}-{u['max']:.2f})")
    r = res["ratios"]["sitp/torch"]
    return f"{name:18s} " + "  ".join(cells) + f"  sitp/torch {r['median']:.2f}"


# ---------------------------------------------------------------- the profile
LAYERS = [  # (layer, path fragment); the first match names a function's layer
    ("methods (Tensor.__add__, _binary)", "sitp/methods/"),
    ("dtype promotion (_operands)", "sitp/_tensor/creation.py"),
    ("backend dispatch (dispatch.of)", "sitp/_tensor/dispatch.py"),
    ("result construction (Tensor._make)", "sitp/_tensor/tensor.py"),
    ("shapes and strides (strides.py)", "sitp/strides.py"),
    ("autograd: Function.apply, Context, Node", "sitp/autograd/function.py"),
    ("autograd: grad mode flag", "sitp/autograd/grad_mode.py"),
    ("autograd: Binary.forward (saving for backward)", "sitp/autograd/derivatives.py"),
    ("CPU launcher (kernels/cpu/ops.py)", "sitp/kernels/cpu/ops.py"),
    ("launch layout (kernels/layout.py: collapse, strides_of)", "sitp/kernels/layout.py"),
    ("numba dispatch and the kernel (kernels/cpu/kernels.py)", "sitp/kernels/cpu/kernels.py"),
]


def _layer(filename, funcname):
    for layer, frag in LAYERS:
        if frag in filename.replace(os.sep, "/"):
            return layer
    if "numba" in filename or "Dispatcher" in funcname:
        return "numba dispatch and the kernel (kernels/cpu/kernels.py)"
    if filename == "~":
        return "builtins (numpy.empty, getattr, tuple, ...)"
    return "other"


def profile(n=20000) -> dict:
    import sitp
    from sitp.bench.layers import layer_shares

    a, b = sitp.randn(4, 8), sitp.randn(4, 8)
    ag, bg = a.clone().requires_grad_(), b.clone().requires_grad_()
    out = {}
    for name, fn in (("a + b", lambda: a + b), ("a + b, requires_grad", lambda: ag + bg)):
        shares, total, _calls, st = layer_shares(
            fn,
            n,
            lambda fname, func: None if fname.endswith("op_overhead.py") else _layer(fname, func),
            warmup=2000,
        )  # (the script's own lambda and loop left out)
        funcs = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:12]
        out[name] = {
            "calls": n,
            "total_us_under_cprofile": total / n * 1e6,
            "share_by_layer": shares,
            "top_functions": [
                {
                    "function": f"{os.path.relpath(k[0]) if k[0] != '~' else ''}:{k[1]}({k[2]})",
                    "calls_per_op": v[1] / n,
                    "tottime_share": round(v[2] / total, 3),
                }
                for k, v in funcs
            ],
        }
    return out


def pieces(rounds=15, number=3000) -> dict:
    """Microseconds per call of the pieces of ``a + b``, without and with grad: each piece
    timed ``number`` times per round, the pieces taking turns, the best round kept (the
    least disturbed by the machine's other work)."""
    import numpy as np

    import sitp
    from sitp._tensor import dispatch
    from sitp._tensor.creation import _operands
    from sitp._tensor.tensor import Tensor
    from sitp.autograd import derivatives as D
    from sitp.autograd.function import Context
    from sitp.kernels.cpu import kernels as K
    from sitp.kernels.cpu import ops

    a, b = sitp.randn(4, 8), sitp.randn(4, 8)
    ag, bg = a.clone().requires_grad_(), b.clone().requires_grad_()
    out_np = np.empty(32, np.float32)
    z = np.zeros(1, np.int64)
    f = K.BINARY["add"]

    def forward_only():  # Binary.forward with its Context, without Function.apply
        ctx = Context()
        ctx.needs_input_grad = (True, True, False)
        return D.Binary.forward(ctx, ag, bg, "add")

    items = {
        "a + b": lambda: a + b,
        "a + b, requires_grad": lambda: ag + bg,
        "Binary.apply, requires_grad": lambda: D.Binary.apply(ag, bg, "add"),
        "Context and Binary.forward (no apply)": forward_only,
        "backend: dispatch.of(a, b).binary": lambda: dispatch.of(a, b).binary("add", a, b),
        "launcher ops.binary": lambda: ops.binary("add", a, b),
        "launcher: ops._new (result)": lambda: ops._new(a._shape, a.dtype, a),
        "launcher: ops._launch_args": lambda: ops._launch_args(
            a._shape, (a, a._strides), (b, b._strides)
        ),
        "numba call of zip_fast_kernel alone": lambda: K.zip_fast_kernel(
            f, a._storage, z, 1, b._storage, z, 1, 32, out_np
        ),
        "numpy.empty(32)": lambda: np.empty(32, np.float32),
        "Tensor._make": lambda: Tensor._make(out_np, (4, 8), (8, 1), 0, a.dtype),
        "dtype promotion _operands": lambda: _operands(a, b),
        "dispatch.of(a, b)": lambda: dispatch.of(a, b),
        "an empty lambda": lambda: None,
    }
    best = dict.fromkeys(items, float("inf"))
    for fn in items.values():
        for _ in range(500):
            fn()
    for _ in range(rounds):
        for k, fn in items.items():
            best[k] = min(best[k], timeit.timeit(fn, number=number) / number * 1e6)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=7)
    ap.add_argument("--inner", type=int, default=200)
    ap.add_argument("--before", help="a third arm: the sitp in DIR/src (git archive REV src | tar -x -C DIR)")
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: each worker's CPU seconds (on a machine other jobs keep busy)",
    )
    ap.add_argument("--label-before", default="before", help="what --before is (a commit)")
    ap.add_argument("--label", default="working tree", help="what this sitp is (a commit)")
    ap.add_argument("--skip-compare", action="store_true")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args()
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    record = {
        "what": "microseconds per call of small ops (4x8 float32; 8x8 for the matrix), one "
        "thread; per arm the median over rounds of each round's median call, and the range "
        "of the rounds",
        "ops": {**OPS, "chain": CHAIN},
        "inner": args.inner,
        "label": args.label,
        "label_before": args.label_before if args.before else None,
        "note": "the machine is shared (2 vCPUs) and noisy: compare medians, read the ranges",
        "clock": args.clock,
    }
    if not args.skip_compare:
        res = compare(args)
        table = {}
        for name, r in res.items():
            row = {arm: _us(r, arm, args.inner) for arm in r["arms"]}
            row["sitp/torch"] = r["ratios"]["sitp/torch"]
            if args.before:
                row["sitp_before/torch"] = r["ratios"]["sitp_before/torch"]
                row["speedup (before/after)"] = r["ratios"]["sitp_before/sitp"]
            table[name] = row
        first = next(iter(res.values()))
        record.update(
            {
                "us_per_call": table,
                "machine": first["machine"],
                "versions": first["versions"],
                "threads": first["threads"],
                "rounds": args.rounds,
                "calls": args.calls,
                "load_per_case": {n: r["load"] for n, r in res.items()},
            }
        )
        from sitp.bench import ab

        print(ab.load_line(first))
    record["profile"] = profile()
    record["profile_note"] = (
        "cProfile of sitp alone in this process: the share of its time (tottime) in each "
        "layer's functions; the profiler slows every Python call, so shares are a guide and "
        "us_per_call is the measurement"
    )
    record["pieces_us"] = pieces()
    record["pieces_note"] = (
        "each piece of a + b timed alone in this process (3000 calls per round, the pieces "
        "taking turns, best of 15 rounds); the launcher's pieces add up to less than the "
        "launcher: the rest is its own Python"
    )
    for k, v in record["profile"].items():
        print(f"\n{k}: {v['total_us_under_cprofile']:.2f} us/op under cProfile")
        for layer, s in v["share_by_layer"].items():
            print(f"  {100 * s:5.1f}%  {layer}")
    print("\npieces of a + b (best round of 15, us):")
    for k, v in record["pieces_us"].items():
        print(f"  {v:6.2f}  {k}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
