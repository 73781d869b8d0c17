"""nanoGPT's CPU recipe on tinyshakespeare characters, trained by sitp and by PyTorch.

Usage::

    python scripts/compare_shakespeare.py                     # the whole recipe, 2000 steps
    python scripts/compare_shakespeare.py --iters 200 --eval-every 100   # a quick look
    python scripts/compare_shakespeare.py --json src/sitp/examples/shakespeare-anchor.json
    python scripts/compare_shakespeare.py --smoke          # a tiny GPT, a few steps (tests)

nanoGPT's README trains a small GPT on the 65 characters of tinyshakespeare on a laptop
CPU: 4 layers, 4 heads, width 128, block 64, batch 12, 2000 iterations, no dropout, no
biases, AdamW at 1e-3 (betas 0.9/0.99, weight decay 0.1 on the matrices), 100 warmup
steps and a cosine decay to 1e-4, gradients clipped at norm 1. It reports a validation
loss of about 1.88.

This script builds that model from one file, ``sitp.models.gpt``, for both libraries
(PyTorch runs the same source through ``sitp.models.port``), gives PyTorch's copy sitp's
initial weights, draws every minibatch once (nanoGPT's ``get_batch``: random windows of
the training split, from a ``sitp.Generator``) and feeds the same batches to both. It
prints the validation loss of each (the mean over the whole validation split, cut into
windows of 64 characters: less noisy than nanoGPT's 20 random batches) at every
``--eval-every`` steps, the training speed of each, and a sample from sitp's model.

Each library trains in a worker process of its own (sitp.bench.ab): the parent draws the
batches and sitp's initial weights into a temporary directory, and each worker reads
them. In one process, numba's and PyTorch's thread pools would run after each other's
spinning threads and slow each other down. Both workers run the same number of threads,
pinned to the same cores. Each first runs one untimed step on a throwaway model
(:func:`warm_up`): the time per step is training, not numba compiling sitp's kernels at
their first call. Then the two take turns: ``--round-steps`` steps of one, then of the
other (the order reversed every other round), so that a change of the machine's load
falls on both. A round's figure is each library's median step; ms/step is the median over
the rounds, with their range, and sitp's speed over PyTorch's is the median of the
rounds' ratios, with their range. Evaluations are not timed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def lr_factor(step: int, warmup: int, steps: int, lr: float, min_lr: float) -> float:
    """nanoGPT's schedule as a multiplier of ``lr``: linear warmup, then half a cosine
    from ``lr`` down to ``min_lr`` at ``steps``."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    ratio = min(1.0, (step - warmup) / max(1, steps - warmup))
    return (min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)) / lr



def windows(data: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """The split cut into consecutive (input, target) windows of ``block`` tokens."""
    n = (len(data) - 1) // block
    x = data[: n * block].reshape(n, block)
    y = data[1 : n * block + 1].reshape(n, block)
    return x.astype(np.int64), y.astype(np.int64)


def evaluate(lib, model, xv: np.ndarray, yv: np.ndarray, batch: int = 256) -> float:
    """The mean loss per character over the whole validation split."""
    model.eval()
    total = 0.0
    with lib.no_grad():
        for i in range(0, len(xv), batch):
            xb, yb = lib.tensor(xv[i : i + batch]), lib.tensor(yv[i : i + batch])
            total += model(xb, yb)[1].item() * len(xb)
    model.train()
    return total / len(xv)


def train(lib, model, batches, args, xv, yv, label: str) -> dict:
    """nanoGPT's loop: AdamW, the schedule, clipping; evaluation outside the timed steps.
    Its two AdamW groups are the trainer's (matrices and embeddings decay)."""
    from sitp.train.trainer import param_groups

    opt = lib.optim.AdamW(
        param_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.99), eps=1e-8
    )
    sched = lib.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, args.warmup, args.iters, args.lr, args.min_lr)
    )
    curve, seconds = [], 0.0
    for step, (xb, yb) in enumerate(batches):
        if step % args.eval_every == 0:
            curve.append((step, evaluate(lib, model, xv, yv)))
            print(f"  {label} step {step:5d}: val {curve[-1][1]:.4f}", flush=True)
        t0 = time.perf_counter()
        _, loss = model(lib.tensor(xb), lib.tensor(yb))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        sched.step()
        seconds += time.perf_counter() - t0
    curve.append((len(batches), evaluate(lib, model, xv, yv)))
    print(f"  {label} step {len(batches):5d}: val {curve[-1][1]:.4f}", flush=True)
    return {"curve": curve, "val": curve[-1][1], "seconds": seconds,
            "ms_per_step": 1e3 * seconds / len(batches), "last_train_loss": loss.item()}


def warm_up(lib, gpt, meta, batch, xv, yv, args) -> None:
    """One untimed step and one evaluation on a throwaway model of the same shapes, so
    that numba's first-call compilation of sitp's kernels (cached on disk for the next
    run) is not counted as training time. The global RNG is restored after it, and the
    model that trains is built before it: the run is the same with or without it."""
    state = lib.random.get_rng_state()
    throwaway = gpt.GPT(gpt.GPTConfig(**meta["fields"]))
    train(lib, throwaway, [batch], argparse.Namespace(**{**vars(args), "eval_every": 10**9,
          "iters": 1}), xv, yv, "warm-up")  # fmt: skip
    lib.random.set_rng_state(state)


class Training:
    """One library's run of nanoGPT's loop, one step a call (the workload of an arm of
    sitp.bench.ab): evaluation every ``eval_every`` steps, untimed; each call returns the
    seconds of its step alone."""

    def __init__(self, lib, gpt, model, pairs, args, xv, yv, label):
        from sitp.train.trainer import param_groups  # late: a helper, run by both libraries

        self.lib, self.gpt, self.model, self.pairs, self.args = lib, gpt, model, pairs, args
        self.xv, self.yv, self.label = xv, yv, label
        self.opt = lib.optim.AdamW(
            param_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.99), eps=1e-8
        )
        self.sched = lib.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: lr_factor(s, args.warmup, args.iters, args.lr, args.min_lr)
        )
        self.curve, self.seconds, self.step, self.loss = [], 0.0, 0, None

    def __call__(self) -> dict:
        lib, args = self.lib, self.args
        if self.step % args.eval_every == 0:
            self.curve.append((self.step, evaluate(lib, self.model, self.xv, self.yv)))
            print(f"  {self.label} step {self.step:5d}: val {self.curve[-1][1]:.4f}", flush=True)
        xb, yb = self.pairs[self.step]
        t0 = time.perf_counter()
        _, loss = self.model(lib.tensor(xb), lib.tensor(yb))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(self.model.parameters(), args.grad_clip)
        self.opt.step()
        self.sched.step()
        seconds = time.perf_counter() - t0
        self.seconds += seconds
        self.step += 1
        self.loss = loss
        return {"seconds": seconds}

    def result(self) -> dict:
        lib, args = self.lib, self.args
        self.curve.append((self.step, evaluate(lib, self.model, self.xv, self.yv)))
        print(f"  {self.label} step {self.step:5d}: val {self.curve[-1][1]:.4f}", flush=True)
        out = {"curve": self.curve, "val": self.curve[-1][1], "seconds": self.seconds,
               "mean_ms_per_step": 1e3 * self.seconds / max(1, self.step),
               "last_train_loss": self.loss.item()}  # fmt: skip
        if self.label == "sitp" and args.sample:
            g = lib.Generator().manual_seed(args.seed)
            idx = lib.tensor([[self.newline]])
            T = self.block_size
            self.model.eval()
            with lib.no_grad():
                for _ in range(args.sample):
                    logits, _ = self.model(idx[:, -T:])
                    probs = logits[:, -1, :].softmax(-1)
                    idx = lib.cat([idx, lib.multinomial(probs, 1, generator=g)], dim=1)
            out["sample_ids"] = idx[0].tolist()
        return out


def workload(lib_name: str, work: str, args: dict):
    """The arm's workload: the model from sitp's initial weights, warmed on a throwaway
    copy, then one training step a call on the batches the parent drew to ``work``."""
    args = argparse.Namespace(**args)
    work = Path(work)
    meta = json.loads((work / "meta.json").read_text())
    batches = np.load(work / "batches.npz")
    val = np.load(work / "val.npz")
    init = np.load(work / "init.npz")
    if lib_name == "torch":
        import torch as lib  # late: each worker imports its own library
    else:
        import sitp as lib  # late: as above
    from sitp.models.port import load_module  # late: the same model file for both

    gpt = load_module("gpt", lib_name)
    model = gpt.GPT(gpt.GPTConfig(**meta["fields"]))
    model.load_state_dict({k: lib.tensor(init[k]) for k in init.files})
    pairs = list(zip(batches["x"], batches["y"]))
    t0 = time.perf_counter()
    warm_up(lib, gpt, meta, pairs[0], val["x"][:2], val["y"][:2], args)
    run = Training(lib, gpt, model, pairs, args, val["x"], val["y"], lib_name)
    run.newline, run.block_size = meta["newline"], meta["fields"]["block_size"]
    run.info = {"warm_up_s": time.perf_counter() - t0}
    return run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=12)
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--min-lr", type=float, default=1e-4)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--grad-clip", type=float, default=1.0)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for numba and torch (default: numba's default)")
    parser.add_argument("--sample", type=int, default=300, help="characters to sample (0: none)")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--round-steps", type=int, default=100,
                        help="steps of one library before the other takes its turn (100)")
    parser.add_argument("--smoke", action="store_true",
                        help="a tiny GPT for a few steps (the tests); overrides the sizes")
    args = parser.parse_args(argv)
    if args.smoke:
        args.iters, args.eval_every, args.round_steps, args.sample = 4, 2, 2, 5
        args.n_layer, args.n_head, args.n_embd, args.block_size, args.batch_size = 1, 2, 16, 16, 2
        args.warmup = 1

    import numba
    import torch

    import sitp
    from sitp import _target
    from sitp.bench import ab, cpu_model
    from sitp.data import load_tinyshakespeare
    from sitp.data.tokens import CharTokenizer
    from sitp.models.port import load_module

    threads = args.threads or len(os.sched_getaffinity(0))
    numba.set_num_threads(threads)
    torch.set_num_threads(threads)
    machine = (f"{cpu_model()} ({_target.isa_name()}, sitp compiled for {_target.cpu_name()}), "
               f"{os.cpu_count()} logical CPUs; threads: numba {threads}, "
               f"torch {torch.get_num_threads()}; torch {torch.__version__}")
    print(f"machine: {machine}; load average {os.getloadavg()[0]:.1f}")

    text = load_tinyshakespeare()
    tok = CharTokenizer(text)
    data = np.array(tok.encode(text), dtype=np.int64)
    n_train = int(0.9 * len(data))  # nanoGPT's prepare.py: the first 90% trains
    train_data, val_data = data[:n_train], data[n_train:]
    xv, yv = windows(val_data, args.block_size)
    B, T = args.batch_size, args.block_size
    g = sitp.Generator().manual_seed(args.seed)
    batches = []
    for _ in range(args.iters):  # nanoGPT's get_batch, drawn once for both libraries
        ix = sitp.randint(0, len(train_data) - T, (B,), generator=g).numpy()
        batches.append((np.stack([train_data[i : i + T] for i in ix]),
                        np.stack([train_data[i + 1 : i + 1 + T] for i in ix])))

    fields = dict(block_size=T, vocab_size=tok.vocab_size, n_layer=args.n_layer,
                  n_head=args.n_head, n_embd=args.n_embd, dropout=0.0, bias=False)
    s_gpt = load_module("gpt", "sitp")
    sitp.manual_seed(args.seed)
    smodel = s_gpt.GPT(s_gpt.GPTConfig(**fields))
    n_params = sum(p.numel() for p in smodel.parameters())
    print(f"\nGPT: {args.n_layer} layers, {args.n_head} heads, width {args.n_embd}, block {T}, "
          f"vocab {tok.vocab_size}, no biases, {n_params:,} parameters; batch {B}, "
          f"{args.iters} steps; val split {len(val_data):,} characters\n")

    results = {}
    with tempfile.TemporaryDirectory() as work:
        w = Path(work)
        np.savez(w / "init.npz", **{k: v.numpy() for k, v in smodel.state_dict().items()})
        np.savez(w / "batches.npz", x=np.stack([b[0] for b in batches]),
                 y=np.stack([b[1] for b in batches]))
        np.savez(w / "val.npz", x=xv, y=yv)
        (w / "meta.json").write_text(json.dumps(
            {"fields": fields, "threads": threads, "newline": tok.encode("\n")[0]}))
        # PyTorch's worker keeps glibc's malloc settings: sitp's tuning (applied when sitp
        # is imported, sitp's CPU memory module) is not PyTorch's to have
        env = {"torch": {"SITP_MALLOC_TUNING": "0"}}
        factory = f"{os.path.abspath(__file__)}:workload"
        rounds, rest = divmod(args.iters, args.round_steps)
        with ab.workers(["sitp", "torch"], threads=threads, env=env, echo=True) as wk:
            arms = {name: ab.Arm(wk[name], factory, {"lib_name": name, "work": work,
                                                     "args": vars(args)}, warmup=0)
                    for name in ("sitp", "torch")}  # fmt: skip
            harness = ab.compare(arms, rounds=max(1, rounds), calls=min(args.round_steps,
                                 args.iters), ratios=[("torch", "sitp")])  # fmt: skip
            for name in ("torch", "sitp") if rounds % 2 else ("sitp", "torch"):
                if rounds and rest:  # the steps left over: one more turn each, untimed by the rounds
                    wk[name].ask("time", key=arms[name].key, calls=rest)
            for name in ("sitp", "torch"):
                results[name] = wk[name].ask("result", key=arms[name].key)["result"]
                a = harness["arms"][name]
                results[name]["ms_per_step"] = 1e3 * a["median"]
                results[name]["ms_per_step_range"] = [1e3 * a["min"], 1e3 * a["max"]]
                results[name]["warm_up_s"] = a["info"]["warm_up_s"]

    s, t = results["sitp"], results["torch"]
    tokens = B * T
    print(f"\nAfter {args.iters} steps (same init, same batches; each library in its own "
          f"process, the two taking turns every {args.round_steps} steps); machine: {machine}\n")
    print("| library | val loss | ms/step (range of the rounds) | tokens/s | train time |")
    print("|---|---:|---:|---:|---:|")
    for name in ("sitp", "torch"):
        r = results[name]
        lo, hi = r["ms_per_step_range"]
        print(f"| {name} | {r['val']:.4f} | {r['ms_per_step']:.1f} ({lo:.1f}-{hi:.1f}) | "
              f"{1e3 * tokens / r['ms_per_step']:,.0f} | {r['seconds']:.0f} s |")
    speed = harness["ratios"]["torch/sitp"]
    print(f"\nval loss difference sitp - torch: {s['val'] - t['val']:+.4f}; "
          f"sitp / torch speed: {ab.ratio_text(harness, 'torch/sitp')}")
    print(ab.load_line(harness))

    sample = tok.decode(s.pop("sample_ids", []))
    if sample:
        print(f"\nA sample from sitp's model ({args.sample} characters, temperature 1):\n")
        print(sample)
    if args.json:
        out = {"machine": machine, "config": vars(args), "params": n_params,
               "results": results, "speed_ratio": speed["median"],
               "speed_ratio_range": [speed["min"], speed["max"]], "rounds": harness["rounds"],
               "sample": sample, "harness": harness}
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
