"""Tokens per second with and without the KV cache as the context grows (section 5.4).

Usage::

    python scripts/bench_kv_cache.py                       # contexts 16..255, one thread
    python scripts/bench_kv_cache.py --threads 2 --plot docs/assets/part3/kv-cache.png
    python scripts/bench_kv_cache.py --smoke               # two short contexts (the tests)

The model is section 5.3's modern GPT (rotary, RMSNorm without gains, QK-norm,
ReLU², no biases, untied head, soft-capping): 4 layers, 4 heads, width 128,
block 256, 65 characters, with random weights (the time of a step does not
depend on them), its Linear weights stored transposed for decoding
(``engine.transpose_weights``; ``--layout trained`` keeps them as trained). It
runs in sitp and in PyTorch from the same file (sitp.models.port), timed by
sitp.bench.ab: each library in a worker process of its own (numba's and
PyTorch's thread pools never share one), both on the same threads pinned to the
same cores, every workload warmed by two untimed calls, and the four arms of a
context (sitp and PyTorch, with and without the cache) taking turns for
``--rounds`` rounds, the order reversed every other round, so that a change of
the machine's load falls on all of them.

Table 1 is the cost of the next token at context L: with the cache, one forward
pass over one position whose query reads the L cached keys and values; without
it, a forward pass over all L + 1 positions. Each figure is one over the median over the
rounds of each round's median of ``--repeats`` calls, sampling included; the ratios
below it are medians of the rounds' ratios, with their range.
Table 2 runs the engine end to end: a prompt of 16 tokens extended to 256, one call a
round, after one untimed call. Table 3 is the cached step for a batch of ``--batch``
sequences at the longest context, in tokens per second for the whole batch.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

CONFIG = dict(
    block_size=256, vocab_size=65, n_layer=4, n_head=4, n_embd=128, rope=True, norm="rmsnorm",
    norm_params=False, qk_norm=True, mlp="relu2", bias=False, tie_weights=False,
    logit_softcap=15.0,
)  # fmt: skip


MODELS = {}  # (lib_name, layout) -> (model, engine module): built once per worker


def import_lib(lib_name: str):
    if lib_name == "sitp":
        import sitp as lib  # late: each worker imports its own library
    else:
        import torch as lib  # late: as above
    return lib


def build(lib_name: str, layout: str = "transposed"):
    """The model (random weights, seed 0) and the engine module, once per worker."""
    if (lib_name, layout) not in MODELS:
        from sitp.models.port import load_module  # late: the same file for both libraries

        lib = import_lib(lib_name)
        lib.manual_seed(0)
        gpt, engine = load_module("gpt", lib_name), load_module("engine", lib_name)
        model = gpt.GPT(gpt.GPTConfig(**CONFIG)).eval()
        if layout == "transposed":  # the engine's decode layout, in both libraries
            engine.transpose_weights(model)
        MODELS[lib_name, layout] = model, engine
    return MODELS[lib_name, layout]


def step_workload(lib_name: str, L: int, cached: bool, batch: int = 1, layout="transposed"):
    """The call that draws the next token of ``batch`` sequences after a context of L
    tokens, with the cache or without."""
    lib = import_lib(lib_name)
    model, engine = build(lib_name, layout)
    seq = lib.tensor(np.random.default_rng(L).integers(0, 65, (batch, L + 1)))
    cache = model.make_kv_cache(batch)
    with lib.no_grad():
        model(seq[:, :L], kv_cache=cache)  # the prefill, outside the timing

    def with_cache():
        cache.pos = L  # overwrite position L each call: the context stays L
        with lib.no_grad():
            logits = model(seq[:, L:], kv_cache=cache)[0][:, -1, :]
            engine.sample_next(logits, top_k=10)

    def without():
        with lib.no_grad():
            logits = model(seq)[0][:, -1, :]
            engine.sample_next(logits, top_k=10)

    return with_cache if cached else without


def engine_workload(lib_name: str, use_cache: bool, new_tokens: int, layout="transposed"):
    """The engine end to end: a prompt of 16 tokens extended by ``new_tokens``."""
    lib = import_lib(lib_name)
    model, engine = build(lib_name, layout)
    prompt = lib.tensor(np.random.default_rng(0).integers(0, 65, (1, 16)))
    return lambda: engine.Engine(model).generate(prompt, new_tokens, top_k=10, use_cache=use_cache)


def measure(args) -> dict:
    """Table 1's rates by context and Table 2's, through sitp.bench.ab."""
    from sitp.bench import ab  # late: the workers import this file without sitp

    res = {"sitp": {"steps": {}, "engine": {}}, "torch": {"steps": {}, "engine": {}}}
    res["ratios"], res["harness"] = {}, {}
    me = os.path.abspath(__file__)
    env = {"torch": {"SITP_MALLOC_TUNING": "0"}}  # PyTorch keeps glibc's malloc settings
    with ab.workers(["sitp", "torch"], threads=args.threads, env=env) as w:
        for L in args.contexts:
            arms = {
                f"{lib} {label}": ab.Arm(w[lib], f"{me}:step_workload",
                                         dict(lib_name=lib, L=L, cached=label == "cached",
                                              layout=args.layout))
                for lib in ("sitp", "torch") for label in ("cached", "uncached")
            }  # fmt: skip
            ratios = [("torch cached", "sitp cached"), ("sitp uncached", "sitp cached"),
                      ("torch uncached", "torch cached")]  # fmt: skip
            r = ab.compare(arms, rounds=args.rounds, calls=args.repeats, ratios=ratios,
                           clock=args.clock)  # fmt: skip
            for name, a in r["arms"].items():
                lib, label = name.split()
                res[lib]["steps"][str(L)] = res[lib]["steps"].get(str(L), {})
                res[lib]["steps"][str(L)][label] = 1.0 / a["median"]
                res[lib]["steps"][str(L)][label + "_range"] = [1.0 / a["max"], 1.0 / a["min"]]
            res["ratios"][str(L)] = r["ratios"]
            res["harness"][str(L)] = {k: r[k] for k in ("load", "order")}
        arms = {
            f"{lib} {label}": ab.Arm(w[lib], f"{me}:engine_workload",
                                     dict(lib_name=lib, use_cache=label == "cached",
                                          new_tokens=args.new_tokens, layout=args.layout),
                                     warmup=1)
            for lib in ("sitp", "torch") for label in ("cached", "uncached")
        }  # fmt: skip
        r = ab.compare(arms, rounds=args.engine_rounds, calls=1, clock=args.clock,
                       ratios=[("torch cached", "sitp cached")])  # fmt: skip
        for name, a in r["arms"].items():
            lib, label = name.split()
            res[lib]["engine"][label] = args.new_tokens / a["median"]
        res["ratios"]["engine"] = r["ratios"]
        res["harness"]["engine"] = {k: r[k] for k in ("load", "order")}
        L, n = args.contexts[-1], args.batch
        arms = {
            f"{lib} batch": ab.Arm(w[lib], f"{me}:step_workload",
                                   dict(lib_name=lib, L=L, cached=True, batch=n,
                                        layout=args.layout))
            for lib in ("sitp", "torch")
        }  # fmt: skip
        r = ab.compare(arms, rounds=args.rounds, calls=args.repeats, clock=args.clock,
                       ratios=[("torch batch", "sitp batch")])  # fmt: skip
        for name, a in r["arms"].items():
            lib = name.split()[0]
            res[lib]["batch"] = {"batch": n, "L": L, "cached": n / a["median"],
                                 "cached_range": [n / a["max"], n / a["min"]]}  # fmt: skip
        res["ratios"]["batch"] = r["ratios"]
        res["harness"]["batch"] = {k: r[k] for k in ("load", "order")}
        res["harness"].update({k: r[k] for k in ("machine", "threads", "cores", "versions")})
    return res


def ratio(res, where, pair) -> str:
    r = res["ratios"][where][pair]
    return f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})"


def one_thread_roofs() -> dict:
    """The roofs of ``python -m sitp.bench roofline`` on one thread: the micro-kernel's
    peak in GFLOP/s, the triad's bandwidth in GB/s from DRAM and from L2 (best of seven)."""
    from sitp.bench.roofline import measure_roofs  # late: the workers import this file

    return measure_roofs(1)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--contexts", type=int, nargs="+", default=[16, 32, 64, 128, 255])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu: time by CPU time used (for a machine that other jobs keep busy)",
    )
    p.add_argument("--plot", help="draw tokens/s against context into this PNG")
    p.add_argument("--rounds", type=int, default=5, help="rounds of Table 1, the arms alternating")
    p.add_argument("--engine-rounds", type=int, default=3, help="rounds of Table 2 (one call each)")
    p.add_argument("--batch", type=int, default=8, help="the batch of Table 3")
    p.add_argument(
        "--layout",
        choices=["transposed", "trained"],
        default="transposed",
        help="the Linear weights' layout in both libraries (transpose_weights)",
    )
    p.add_argument("--json", help="also write every figure, with the harness's record, here")
    p.add_argument("--smoke", action="store_true", help="contexts 8 and 16, short runs (the tests)")
    p.add_argument(
        "--roofs",
        action="store_true",
        help="also measure this machine's one-thread roofs (python -m sitp.bench roofline's "
        "peak and triad), for 5.4's roofline of the decode step",
    )
    args = p.parse_args(argv)
    args.new_tokens = 240
    if args.smoke:
        args.contexts, args.repeats, args.rounds, args.engine_rounds = [8, 16], 2, 2, 2
        args.new_tokens, args.batch = 8, 2
    from sitp.bench import ab, cpu_model  # late: the workers import this file without sitp

    res = measure(args)
    if args.roofs:
        res["roofs"] = one_thread_roofs()
    h = res["harness"]
    sitp_v, torch_v = h["versions"]["sitp"].get("sitp"), h["versions"]["torch"].get("torch")
    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores), {args.threads} thread(s), {args.clock} "
          f"clock; sitp {sitp_v}, PyTorch {torch_v}")  # fmt: skip
    print(f"GPT: {CONFIG}")
    print(
        f"\nTable 1: tokens/s for the next token at context L (median of {args.rounds} "
        f"alternating rounds of {args.repeats} calls)"
    )
    print("| L | sitp cached | sitp uncached | cached/uncached | torch cached | torch uncached "
          "| cached/uncached | sitp/torch cached |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for L in args.contexts:
        s, t = res["sitp"]["steps"][str(L)], res["torch"]["steps"][str(L)]
        print(
            f"| {L} | {s['cached']:.0f} | {s['uncached']:.0f} | {s['cached'] / s['uncached']:.1f}x "
            f"| {t['cached']:.0f} | {t['uncached']:.0f} | {t['cached'] / t['uncached']:.1f}x | "
            f"{s['cached'] / t['cached']:.2f} |"
        )
    print(f"\nsitp/torch speed with the cache, median (min-max) over {args.rounds} rounds: "
          + "; ".join(f"L={L} {ratio(res, str(L), 'torch cached/sitp cached')}"
                      for L in args.contexts))  # fmt: skip
    print("cache speed-ups, sitp: "
          + "; ".join(f"L={L} {ratio(res, str(L), 'sitp uncached/sitp cached')}"
                      for L in args.contexts))  # fmt: skip
    print("cache speed-ups, torch: "
          + "; ".join(f"L={L} {ratio(res, str(L), 'torch uncached/torch cached')}"
                      for L in args.contexts))  # fmt: skip
    print(ab.load_line({**h, "load": h[str(args.contexts[-1])]["load"]}))
    print(f"\nTable 2: the engine end to end, a prompt of 16 tokens extended by {args.new_tokens} "
          f"(top-k 10; median of {args.engine_rounds} alternating rounds)")  # fmt: skip
    print("| library | cached tokens/s | uncached tokens/s | speed-up |")
    print("|---|---:|---:|---:|")
    for name in ("sitp", "torch"):
        e = res[name]["engine"]
        print(f"| {name} | {e['cached']:.0f} | {e['uncached']:.0f} | "
              f"{e['cached'] / e['uncached']:.1f}x |")  # fmt: skip
    print(f"sitp/torch speed with the cache: {ratio(res, 'engine', 'torch cached/sitp cached')}")
    b = res["sitp"]["batch"]
    print(f"\nTable 3: a batch of {b['batch']} sequences, the next token at context {b['L']} with "
          f"the cache (tokens/s for the batch; median of {args.rounds} alternating rounds)")  # fmt: skip
    print("| library | tokens/s |")
    print("|---|---:|")
    for name in ("sitp", "torch"):
        print(f"| {name} | {res[name]['batch']['cached']:.0f} |")
    print(f"sitp/torch speed, batch {b['batch']}: {ratio(res, 'batch', 'torch batch/sitp batch')}")
    print(ab.load_line({**h, "load": h["batch"]["load"]}))
    if args.roofs:
        r = res["roofs"]
        print(f"\nroofs, one thread: peak {r['peak_1']:.1f} GFLOP/s, triad {r['dram_1']:.1f} GB/s "
              f"from DRAM and {r['l2_1']:.1f} GB/s from L2")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": CONFIG, "args": vars(args), **res}, f, indent=1)
            f.write("\n")
    if args.plot:
        import matplotlib  # late: optional, only for the figure

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # late: optional, only for the figure

        fig, ax = plt.subplots(figsize=(6, 3.6))
        for name, marker in (("sitp", "o"), ("torch", "s")):
            for label, line in (("cached", "-"), ("uncached", "--")):
                rates = [res[name]["steps"][str(L)][label] for L in args.contexts]
                ax.plot(args.contexts, rates, marker + line, label=f"{name}, {label}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context length L (tokens)")
        ax.set_ylabel("tokens per second")
        ax.set_title(f"The next token's speed, {args.threads} thread(s)")
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=150)
        print(f"\nwrote {args.plot}")


if __name__ == "__main__":
    main()
