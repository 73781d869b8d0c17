"""A GPT training step on a GPU: sitp's own GPT (its fused GPU layers), eager and through
``sitp.compile``, nanoGPT's model file run with sitp bound to the name ``torch``, and the
same file on PyTorch's CUDA build.

Usage::

    python scripts/bench_gpu_train.py [--config char|anchor] [--rounds 5] [--reps 3]
                                      [--smoke] [--json PATH]

``char`` is nanoGPT's Shakespeare-character recipe (6 layers, 6 heads, width 384, block
256, batch 64, 65 tokens); ``anchor`` is its CPU recipe (4 layers, 4 heads, width 128,
block 64, batch 12). Every arm gets random tokens, the same for all, and runs forward,
``zero_grad``, backward and an AdamW step; the clock stops after the device has
synchronised. Each arm is warmed with two steps (numba's CUDA compilations, cuBLAS's
plans), then the arms take turns, ``--reps`` steps per turn, for ``--rounds`` rounds;
the figure is the median per-step time, with the range of the rounds. Arithmetic is
float32 everywhere; PyTorch runs with its defaults (TF32 off for matrix products).
``--smoke`` runs tiny sizes under numba's CUDA simulator, as a check that the script
works; its times are not a GPU's.

``--profile`` runs five steps of sitp's GPT under cProfile and prints where the host's
time goes (on a GPU, launch overhead against waiting for kernels).
``--launches`` (under the simulator, ``NUMBA_ENABLE_CUDASIM=1``) counts the kernel launches
of one training step of sitp's GPT at the anchor's depth (4 layers, 4 heads, a tiny width
and batch: the count does not depend on them), by kernel: what a step costs a GPU in
launches, each a trip through numba's dispatcher in Python.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from plain_torch_bench import _load_torch_style_gpt

CONFIGS = {
    "char": dict(n_layer=6, n_head=6, n_embd=384, block=256, batch=64, vocab=65),
    "anchor": dict(n_layer=4, n_head=4, n_embd=128, block=64, batch=12, vocab=65),
    "smoke": dict(n_layer=1, n_head=2, n_embd=8, block=8, batch=2, vocab=11),
}


def arm(lib, which, cfg, tokens):
    """One training step per call, on the GPU, of ``which``: 'own' (sitp's GPT),
    'compiled' (the same, its forward and backward through ``sitp.compile`` as
    ``sitp train --compile`` runs them) or 'file' (nanoGPT's model file)."""
    lib.manual_seed(0)
    if which in ("own", "compiled"):
        from sitp.models.gpt import GPT, GPTConfig

        model = GPT(
            GPTConfig(
                vocab_size=cfg["vocab"],
                block_size=cfg["block"],
                n_layer=cfg["n_layer"],
                n_head=cfg["n_head"],
                n_embd=cfg["n_embd"],
            )
        )
    else:
        ns = _load_torch_style_gpt(lib.__name__)  # nanoGPT's model file, lib as torch
        conf = ns["GPTConfig"](
            block_size=cfg["block"],
            vocab_size=cfg["vocab"],
            n_layer=cfg["n_layer"],
            n_head=cfg["n_head"],
            n_embd=cfg["n_embd"],
            dropout=0.0,
            bias=True,
        )
        model = ns["GPT"](conf)
    model.to("cuda")
    opt = lib.optim.AdamW(model.parameters(), lr=3e-4)
    x = lib.tensor(tokens[:, :-1]).to("cuda")
    y = lib.tensor(tokens[:, 1:]).to("cuda")

    def step():
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    if which != "compiled":
        return step
    from sitp.train.trainer import compile_step

    compiled = compile_step(model)
    state = list(model.parameters()) + [b for b in model.buffers() if b is not None]
    one = lib.tensor(1.0, device="cuda")

    def compiled_step():
        opt.zero_grad(set_to_none=True)
        loss = compiled(x, y, one, state)
        opt.step()
        return loss

    return compiled_step


def count_launches() -> None:
    """Launches of one GPT training step, by kernel (the simulator's kernels counted when
    configured, ``kernel[grid, block]``); the step is warmed twice first."""
    import collections

    from numba.cuda.simulator import kernel as K

    import sitp

    counts = collections.Counter()
    configure = K.FakeCUDAKernel.__getitem__

    def counted(self, config):
        counts[self.fn.__name__] += 1
        return configure(self, config)

    K.FakeCUDAKernel.__getitem__ = counted
    cfg = dict(n_layer=4, n_head=4, n_embd=8, block=4, batch=1, vocab=11)
    step = arm(sitp, "own", cfg, np.random.default_rng(0).integers(0, 11, (1, 5)))
    step()
    step()
    counts.clear()
    step()
    print(f"launches in one training step of sitp's GPT ({cfg}): {sum(counts.values())}")
    for name, n in counts.most_common():
        print(f"  {name:<28}{n:>6}")


def profile(cfg, tokens, steps=5, top=30) -> None:
    """Where a step of sitp's GPT spends its time on the host: ``steps`` warmed steps under
    cProfile, the functions with the most time of their own. On a GPU, time in numba's
    dispatcher and in sitp's op layer is launch overhead; a kernel's own time shows as
    the synchronisation that waits for it."""
    import cProfile
    import pstats

    import sitp

    step = arm(sitp, "own", cfg, tokens)
    step()
    step()
    sitp.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step()
    sitp.cuda.synchronize()
    prof.disable()
    print(f"cProfile of {steps} steps of sitp's GPT, config {cfg}")
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=("char", "anchor"), default="char")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--launches", action="store_true", help="count a step's launches (simulator)")
    ap.add_argument("--profile", action="store_true", help="cProfile 5 steps of sitp's GPT")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.launches:
        import sitp

        if not sitp.cuda.is_simulated():
            raise SystemExit("bench_gpu_train --launches: set NUMBA_ENABLE_CUDASIM=1")
        return count_launches()

    import sitp
    from sitp.bench.gpu import device_name

    simulated = sitp.cuda.is_simulated()
    if not (sitp.cuda.is_available() or simulated):
        raise SystemExit("bench_gpu_train: no GPU and the CUDA simulator is off")
    name = "smoke" if args.smoke else args.config
    cfg = CONFIGS[name]
    rounds, reps = (2, 1) if args.smoke else (args.rounds, args.reps)
    dev = "numba's CUDA simulator (no GPU)" if simulated else device_name()
    print(f"device: {dev}; config {name}: {cfg}")
    tokens = np.random.default_rng(0).integers(0, cfg["vocab"], (cfg["batch"], cfg["block"] + 1))
    if args.profile:
        return profile(cfg, tokens, steps=1 if args.smoke else 5)

    arms = {
        "sitp GPT (fused layers)": (arm(sitp, "own", cfg, tokens), sitp.cuda.synchronize),
        "sitp GPT, sitp.compile": (arm(sitp, "compiled", cfg, tokens), sitp.cuda.synchronize),
        "nanoGPT file on sitp": (arm(sitp, "file", cfg, tokens), sitp.cuda.synchronize),
    }
    try:
        import torch

        if torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = False
            arms["nanoGPT file on PyTorch"] = (
                arm(torch, "file", cfg, tokens),
                torch.cuda.synchronize,
            )
        else:
            print("PyTorch sees no GPU: its arm is left out")
    except ImportError:
        print("PyTorch is not importable: its arm is left out")

    first = {}
    for label, (step, sync) in arms.items():
        t0 = time.perf_counter()
        loss = step()
        first[label] = float(loss.item())
        step()
        sync()
        print(f"  warm-up {label}: {time.perf_counter() - t0:.1f} s, first loss {first[label]:.4f}")
    times = {label: [] for label in arms}
    for _ in range(rounds):
        for label, (step, sync) in arms.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(reps):
                step()
            sync()
            times[label].append((time.perf_counter() - t0) / reps)
    tokens_per_step = cfg["batch"] * cfg["block"]
    ref = statistics.median(times.get("nanoGPT file on PyTorch", [float("nan")]))
    print(f"\n{'arm':<28}{'ms/step':>10}{'range':>20}{'tokens/s':>12}{'vs torch':>10}")
    rows = []
    for label, ts in times.items():
        med = statistics.median(ts)
        print(
            f"{label:<28}{1e3 * med:>10.2f}{f'{1e3 * min(ts):.2f}-{1e3 * max(ts):.2f}':>20}"
            f"{tokens_per_step / med:>12,.0f}{ref / med:>10.2f}"
        )
        rows.append(
            dict(
                arm=label,
                ms=1e3 * med,
                ms_min=1e3 * min(ts),
                ms_max=1e3 * max(ts),
                tokens_per_s=tokens_per_step / med,
                first_loss=first[label],
            )  # fmt: skip
        )
    if simulated:
        print("(simulator times: Python threads, not a GPU; not figures to quote)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev, "simulated": simulated, "config": cfg, "rounds": rounds,
                       "reps": reps, "results": rows}, f, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
