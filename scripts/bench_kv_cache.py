"""Tokens per second with and without the KV cache as the context grows (section 5.4).

Usage::

    python scripts/bench_kv_cache.py                       # contexts 16..256, one thread
    python scripts/bench_kv_cache.py --threads 2 --plot docs/assets/part3/kv-cache.png

The model is section 5.3's modern GPT (rotary, RMSNorm without gains, QK-norm,
ReLU², no biases, untied head, soft-capping): 4 layers, 4 heads, width 128,
block 256, 65 characters, with random weights (the time of a step does not
depend on them). It runs twice in one process, in sitp and in PyTorch, from the
same file (sitp.models.port), with both libraries limited to the same threads.
PyTorch is timed in a child interpreter of this run that never runs sitp's
kernels, so that numba's and PyTorch's thread pools never share a process
(one library's pool then competes with the other's for the same cores).

Table 1 is the cost of the next token at context L: with the cache, one forward
pass over one position whose query reads the L cached keys and values; without
it, a forward pass over all L + 1 positions. Each figure is the median over
``--repeats`` clean calls (``sitp.bench.median_time``), sampling included.
Table 2 runs the engine end to end: a prompt of 16 tokens extended to 256.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys

import numpy as np
import torch

import sitp
import sitp.bench
from sitp.bench import cpu_model, median_time, threads
from sitp.models.port import load_module

CONFIG = dict(
    block_size=256, vocab_size=65, n_layer=4, n_head=4, n_embd=128, rope=True, norm="rmsnorm",
    norm_params=False, qk_norm=True, mlp="relu2", bias=False, tie_weights=False,
    logit_softcap=15.0,
)  # fmt: skip


def build(name):
    gpt, engine = load_module("gpt", name), load_module("engine", name)
    return gpt.GPT(gpt.GPTConfig(**CONFIG)).eval(), engine


def step_fns(model, engine, lib, L):
    """(cached, uncached): each draws the token after a context of L tokens."""
    seq = lib.tensor(np.random.default_rng(L).integers(0, 65, (1, L + 1)))
    cache = model.make_kv_cache(1)
    with lib.no_grad():
        model(seq[:, :L], kv_cache=cache)  # the prefill, outside the timing

    def cached():
        cache.pos = L  # overwrite position L each call: the context stays L
        with lib.no_grad():
            logits = model(seq[:, L:], kv_cache=cache)[0][:, -1, :]
            engine.sample_next(logits, top_k=10)

    def uncached():
        with lib.no_grad():
            logits = model(seq)[0][:, -1, :]
            engine.sample_next(logits, top_k=10)

    return cached, uncached


def measure(name, args) -> dict:
    """Table 1's rates by context and Table 2's, for one library."""
    lib = sitp if name == "sitp" else torch
    model, engine = build(name)
    out = {"steps": {}, "engine": {}}
    # numba's and OpenBLAS's threads for sitp; torch.set_num_threads (in main) for PyTorch
    with threads(args.threads) if name == "sitp" else contextlib.nullcontext():
        for L in args.contexts:
            cached, uncached = step_fns(model, engine, lib, L)
            out["steps"][str(L)] = {
                label: 1.0 / median_time(fn, repeats=args.repeats, warmup=2, n_threads=args.threads)
                for label, fn in (("cached", cached), ("uncached", uncached))
            }
        prompt = lib.tensor(np.random.default_rng(0).integers(0, 65, (1, 16)))
        for use_cache in (True, False):

            def fn(use_cache=use_cache):
                return engine.Engine(model).generate(prompt, 240, top_k=10, use_cache=use_cache)

            rate = 240 / median_time(fn, repeats=3, warmup=1, n_threads=args.threads)
            out["engine"]["cached" if use_cache else "uncached"] = rate
    return out


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
    p.add_argument("--only", choices=["torch"], help=argparse.SUPPRESS)  # the child run
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    sitp.bench.CLOCK = args.clock
    torch.manual_seed(0)
    sitp.manual_seed(0)
    if args.only:
        print(json.dumps(measure("torch", args)))
        return
    argv = [a for a in (sys.argv[1:] if argv is None else argv)]
    child = subprocess.run([sys.executable, __file__, *argv, "--only", "torch"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    res = {
        "torch": json.loads(child.stdout.strip().splitlines()[-1]),
        "sitp": measure("sitp", args),
    }
    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores), {args.threads} thread(s), {args.clock} "
          f"clock; sitp {sitp.__version__}, PyTorch {torch.__version__}")  # fmt: skip
    print(f"GPT: {CONFIG}")
    print("\nTable 1: tokens/s for the next token at context L (median of clean calls)")
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
    print("\nTable 2: the engine end to end, a prompt of 16 tokens extended by 240 "
          "(top-k 10; median of 3)")  # fmt: skip
    print("| library | cached tokens/s | uncached tokens/s | speed-up |")
    print("|---|---:|---:|---:|")
    for name in ("sitp", "torch"):
        e = res[name]["engine"]
        print(f"| {name} | {e['cached']:.0f} | {e['uncached']:.0f} | "
              f"{e['cached'] / e['uncached']:.1f}x |")  # fmt: skip
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
