"""Large elementwise ops and reductions: nanoseconds per entry, sitp against PyTorch (issue 34).

``scripts/op_overhead.py`` times ops on a few dozen entries, where the cost is the call.
This script times the same kinds of op on the tensors of the spelled-out GPT of
``scripts/plain_torch_bench.py`` (batch 16, block 32, width 64 and its MLP's 256, four
heads), where the cost is the loop over memory: ``x`` is (16, 32, 256), 131,072 float32
entries (512 KiB, within the L2 cache of both machines the book names), and ``att`` the
attention scores, (16, 4, 32, 32), 65,536 entries. The ops are those such a program
spends its kernel time in: sums and products (one of them with a broadcast bias), a
select with a random mask, ``masked_fill`` with the causal mask, a comparison,
``tanh``, ``exp``, ``pow(x, 3)``, ``softmax`` over the last dim of the masked scores,
a sum over the last dim, and the tanh formula of GELU written out.

The timing is :mod:`sitp.bench.ab`'s: sitp and PyTorch each in a worker of its own, one
thread, pinned to the same core, warmed, taking turns for ``--rounds`` rounds; a call
runs the op ``--inner`` times; the figure is nanoseconds per entry of the result. With
``--before DIR`` a third arm runs sitp from the source tree ``DIR/src``
(``git archive <commit> src | tar -x -C DIR``), timed in the same rounds.

Usage::

    python scripts/elementwise_bench.py
    python scripts/elementwise_bench.py --json src/sitp/examples/elementwise-intel.json \\
        --before /tmp/sitp_before --label-before bc21f55~1 --label bc21f55
"""

from __future__ import annotations

import argparse
import json
import math
import os

# name -> the op as the program writes it
OPS = {
    "add": "x + y",
    "add_bias": "x + bias  (bias of 256, broadcast)",
    "mul_scalar": "x * 0.5",
    "where": "torch.where(m, x, y)  (m a random mask)",
    "gt": "x > y",
    "masked_fill": "att.masked_fill(causal == 0, -inf)  (causal (32, 32), broadcast)",
    "tanh": "x.tanh()",
    "exp": "x.exp()",
    "pow3": "x.pow(3.0)",
    "softmax": "F.softmax(att_masked, -1)",
    "sum_last": "x.sum(-1)",
    "gelu_tanh": "0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x.pow(3))))",
}
X_SHAPE, ATT_SHAPE = (16, 32, 256), (16, 4, 32, 32)


def workload(lib: str, op: str, inner: int = 20):
    """A callable that runs ``op`` (a key of OPS) ``inner`` times with library ``lib``; its
    ``info`` is the number of entries of the op's result."""
    if lib == "torch":
        import torch
        import torch.nn.functional as F
    else:
        import sitp as torch
        import sitp.nn.functional as F
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(*X_SHAPE, generator=g), torch.randn(*X_SHAPE, generator=g)
    bias = torch.randn(X_SHAPE[-1], generator=g)
    m = torch.rand(*X_SHAPE, generator=g) > 0.5
    att = torch.randn(*ATT_SHAPE, generator=g)
    causal = torch.tril(torch.ones(ATT_SHAPE[-1], ATT_SHAPE[-1]))
    att_masked = att.masked_fill(causal == 0, float("-inf"))
    c = math.sqrt(2.0 / math.pi)
    fns = {
        "add": lambda: x + y,
        "add_bias": lambda: x + bias,
        "mul_scalar": lambda: x * 0.5,
        "where": lambda: torch.where(m, x, y),
        "gt": lambda: x > y,
        "masked_fill": lambda: att.masked_fill(causal == 0, float("-inf")),
        "tanh": lambda: x.tanh(),
        "exp": lambda: x.exp(),
        "pow3": lambda: x.pow(3.0),
        "softmax": lambda: F.softmax(att_masked, -1),
        "sum_last": lambda: x.sum(-1),
        "gelu_tanh": lambda: 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * x.pow(3.0)))),
    }
    one = fns[op]
    entries = one().numel()
    rng = range(inner)

    def run():
        for _ in rng:
            one()

    run.info = {"entries": entries}
    return run


def compare(args) -> dict:
    from sitp.bench import ab

    here = os.path.abspath(__file__)
    names = ["sitp", "torch"] + (["sitp_before"] if args.before else [])
    env = {"sitp_before": ab.source_tree_env(args.before)} if args.before else {}
    results = {}
    with ab.workers(names, threads=1, env=env) as w:
        for op in args.only or OPS:
            kw = {"op": op, "inner": args.inner}
            arms = {  # the "before" arm is sitp too, from another source tree
                name: ab.Arm(
                    w[name], f"{here}:workload", {"lib": name.split("_")[0], **kw}, warmup=3
                )
                for name in names
            }
            ratios = [("sitp", "torch")]
            if args.before:
                ratios += [("sitp_before", "sitp")]
            res = ab.compare(
                arms, rounds=args.rounds, calls=args.calls, ratios=ratios, pause=0.05,
                clock=args.clock,
            )  # fmt: skip
            results[op] = res
            print(_row(op, res, args.inner), flush=True)
    return results


def _ns(res, arm, inner):
    a = res["arms"][arm]
    entries = a["info"]["entries"]
    return {k: a[k] / inner / entries * 1e9 for k in ("median", "min", "max")}


def _row(op, res, inner):
    cells = []
    for arm in ("sitp_before", "sitp", "torch"):
        if arm in res["arms"]:
            u = _ns(res, arm, inner)
            cells.append(f"{arm} {u['median']:6.3f} ({u['min']:.3f}-{u['max']:.3f})")
    r = res["ratios"]["sitp/torch"]
    return f"{op:12s} ns/entry  " + "  ".join(cells) + f"  sitp/torch {r['median']:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--inner", type=int, default=20)
    ap.add_argument("--only", nargs="*", help=f"a subset of {list(OPS)}")
    ap.add_argument("--before", help="a third arm: the sitp in DIR/src (git archive REV src | tar -x -C DIR)")
    ap.add_argument("--label-before", default="before", help="what --before is (a commit)")
    ap.add_argument("--label", default="working tree", help="what this sitp is (a commit)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="cpu")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args()
    res = compare(args)
    first = next(iter(res.values()))
    record = {
        "what": "nanoseconds per result entry of large float32 ops (x (16, 32, 256), att "
        "(16, 4, 32, 32)), one thread; per arm the median over rounds of each round's "
        "median call, and the range of the rounds",
        "ops": {op: OPS[op] for op in res},
        "label": args.label,
        "label_before": args.label_before if args.before else None,
        "clock": args.clock,
        "rounds": args.rounds,
        "ns_per_entry": {
            op: {
                **{arm: _ns(r, arm, args.inner) for arm in r["arms"]},
                "entries": r["arms"]["sitp"]["info"]["entries"],
                **{k: v for k, v in r["ratios"].items()},
            }
            for op, r in res.items()
        },
        "machine": first["machine"],
        "versions": first.get("versions"),
        "load_per_op": {op: r.get("load") for op, r in res.items()},
    }
    if args.json:
        from sitp.serialization import write_atomically

        write_atomically(args.json, (json.dumps(record, indent=1) + "\n").encode())
        print("wrote", args.json)


if __name__ == "__main__":
    main()
