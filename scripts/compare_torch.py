"""Train each ladder model with sitp and with PyTorch, side by side; then time the GPT.

Usage::

    python scripts/compare_torch.py                      # all models, 300 steps, offline names
    python scripts/compare_torch.py --models gpt --steps 1000 --threads 2
    python scripts/compare_torch.py --skip-train --bench-steps 30   # only the throughput

Part 1, losses. For every model the *same source file* (sitp.models.<name>, run by
PyTorch through sitp.models.port) is built in both libraries; PyTorch's copy gets
sitp's initial weights, both see the same minibatches (indices drawn once by a
sitp.Generator), and both train with AdamW (betas 0.9/0.99, weight decay 0.01) under
the same warmup-cosine schedule, as ``python -m sitp train`` does. The table gives
the test loss each library reaches, and their difference.

Part 2, throughput. Training steps per second of the GPT (n_layer 4, n_head 4,
n_embd 64) at batch 32 x block 32 on windows of the names stream (nanoGPT's
get_batch), timed by sitp.bench.ab: each library in a worker process of its own, on the
same number of threads pinned to the same cores, warmed, the two taking turns in
``--repeats`` rounds; medians with the range of the rounds. Then the twelve matrix
products of one block, the same way. ``--json PATH`` writes every figure (the losses
table, the throughput with the harness's record of machine and load, the products).
The losses table's ms/step come from one process that runs both libraries one after the
other: a rough guide, not the comparison.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def make_lambda(warmup: int, steps: int):
    from sitp.optim.lr_scheduler import _warmup_cosine

    return functools.partial(
        _warmup_cosine,
        num_warmup_steps=min(warmup, steps),
        num_training_steps=steps,
        num_cycles=0.5,
        min_lr_ratio=0.1,
    )


def torch_evaluate(torch, model, X, Y, batch_size=1024) -> float:
    """The same weighting as sitp.train.trainer.evaluate: mean loss per real target."""
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(X), batch_size):
            Xb, Yb = X[i : i + batch_size], Y[i : i + batch_size]
            n = int((Yb != -1).sum().item())
            if n:
                total += model(Xb, Yb)[1].item() * n
                count += n
    model.train()
    return total / count


def compare_losses(name: str, steps: int, batch_size: int, seed: int, data: str, torch) -> dict:
    import sitp
    from sitp.models import MODELS
    from sitp.train.trainer import evaluate, load_splits, make_optimizer, make_scheduler

    spec = MODELS[name]
    probe = spec.make_config()
    splits = load_splits(data, spec.data, probe.block_size)
    V = len(splits.vocab)
    sitp.manual_seed(seed)
    smodel = spec.build(spec.make_config(vocab_size=V))
    tmodel = spec.build(spec.make_config("torch", vocab_size=V), "torch")
    tmodel.load_state_dict(
        {k: torch.tensor(v.numpy().copy()) for k, v in smodel.state_dict().items()}
    )
    warmup = min(100, steps // 10)
    sopt = make_optimizer(smodel, spec.lr, 0.01)
    ssched = make_scheduler(sopt, warmup, steps)
    topt = torch.optim.AdamW(
        tmodel.parameters(), lr=spec.lr, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01
    )
    tsched = torch.optim.lr_scheduler.LambdaLR(topt, make_lambda(warmup, steps))

    Xtr, Ytr = splits.tensors["train"]
    tXtr, tYtr = torch.tensor(Xtr.numpy()), torch.tensor(Ytr.numpy())
    g = sitp.Generator().manual_seed(seed)
    batches = [sitp.randint(0, len(Xtr), (batch_size,), generator=g).numpy() for _ in range(steps)]

    t0 = time.perf_counter()
    for ix in batches:
        ix_s = sitp.tensor(ix)
        _, loss = smodel(Xtr[ix_s], Ytr[ix_s])
        sopt.zero_grad()
        loss.backward()
        sopt.step()
        ssched.step()
    s_time = time.perf_counter() - t0
    s_last = loss.item()

    t0 = time.perf_counter()
    for ix in batches:
        ix_t = torch.from_numpy(ix)
        _, tloss = tmodel(tXtr[ix_t], tYtr[ix_t])
        topt.zero_grad()
        tloss.backward()
        topt.step()
        tsched.step()
    t_time = time.perf_counter() - t0

    Xte, Yte = splits.tensors["test"]
    s_test = evaluate(smodel, Xte, Yte)
    t_test = torch_evaluate(torch, tmodel, torch.tensor(Xte.numpy()), torch.tensor(Yte.numpy()))
    max_w = max(
        float(np.abs(p.detach().numpy() - tp.detach().numpy()).max())
        for p, tp in zip(smodel.parameters(), tmodel.parameters())
    )
    return {
        "model": name,
        "params": sum(p.numel() for p in smodel.parameters()),
        "sitp": s_test,
        "torch": t_test,
        "diff": abs(s_test - t_test),
        "max_dw": max_w,
        "sitp_ms": 1e3 * s_time / steps,
        "torch_ms": 1e3 * t_time / steps,
        "last_batch_loss": s_last,
    }


# ------------------------------------------------------------------ the timed workloads
# Each runs in a worker process of sitp.bench.ab (one for sitp, one for PyTorch), which
# imports this file and calls the factory; each factory imports only its library.
THROUGHPUT = dict(block_size=32, n_layer=4, n_head=4, n_embd=64)  # the GPT of chapter 3.5


def import_lib(lib_name: str):
    if lib_name == "sitp":
        import sitp as lib  # late: each worker imports its own library
    else:
        import torch as lib  # late: as above
    return lib


def gpt_train_step(lib_name: str, work: str):
    """One training step (forward, backward, AdamW) of the GPT on the next of the batches
    the parent drew, from sitp's initial weights; the batches cycle."""
    from sitp.bench import train_step  # late: as below
    from sitp.models import MODELS  # late: the model file, run by either library

    lib = import_lib(lib_name)
    meta = json.loads((Path(work) / "meta.json").read_text())
    init = np.load(Path(work) / "init.npz")
    data = np.load(Path(work) / "batches.npz")
    spec = MODELS["gpt"]
    fields = dict(vocab_size=meta["vocab_size"], **THROUGHPUT)
    config = (
        spec.make_config(**fields) if lib_name == "sitp" else spec.make_config("torch", **fields)
    )
    model = spec.build(config) if lib_name == "sitp" else spec.build(config, "torch")
    model.load_state_dict({k: lib.tensor(init[k]) for k in init.files})
    opt = lib.optim.AdamW(model.parameters(), lr=1e-3)
    batches = [(lib.tensor(x), lib.tensor(y)) for x, y in zip(data["x"], data["y"])]
    step = train_step(model, opt, batches)
    step.info = {"params": sum(p.numel() for p in model.parameters())}
    return step


def sitp_blas():
    """sitp's GEMM module, sitp.kernels.cpu.blas."""
    from sitp.kernels.cpu import blas  # late: in the sitp worker only

    return blas


def gemm_call(lib_name: str, M: int, K: int, N: int, ta: bool):
    """One product of the shapes: sitp's blas.matmul, or torch.mm, on the same arrays."""
    rng = np.random.default_rng([M, K, N])
    a = (
        rng.standard_normal((K, M)).astype(np.float32).T
        if ta
        else rng.standard_normal((M, K)).astype(np.float32)
    )  # dW = dY^T X: A transposed
    b = rng.standard_normal((K, N)).astype(np.float32)
    if lib_name == "sitp":
        blas = sitp_blas()
        return lambda: blas.matmul(a, b)
    torch = import_lib("torch")
    ta_t = torch.from_numpy(np.ascontiguousarray(a.T)).T if ta else torch.from_numpy(a)
    tb_t = torch.from_numpy(b)
    return lambda: torch.mm(ta_t, tb_t)


# ------------------------------------------------------------------ the timings
def gpt_throughput(steps: int, warmup: int, seed: int, w, repeats: int = 5) -> dict:
    """Steps per second of a GPT training step (forward, backward, AdamW) at B=32, T=32.

    Through sitp.bench.ab: each library in its worker (``w``), warmed by ``warmup``
    steps, then ``repeats`` rounds in which each times ``steps`` steps, the libraries
    taking turns (sitp first in one round, PyTorch in the next). A round's figure is the
    median step; steps/s is one over the median of the rounds' figures, and the ratio's
    median and range are over the rounds.
    """
    import sitp
    from sitp.bench import ab
    from sitp.data import Vocab, build_token_stream, get_batch, load_names
    from sitp.models import MODELS

    words = load_names("offline")
    vocab = Vocab(words)
    stream = build_token_stream(words, vocab)
    g = sitp.Generator().manual_seed(seed)
    batches = [get_batch(stream, 32, 32, generator=g) for _ in range(steps + warmup)]
    spec = MODELS["gpt"]
    sitp.manual_seed(seed)
    smodel = spec.build(spec.make_config(vocab_size=len(vocab), **THROUGHPUT))
    with tempfile.TemporaryDirectory() as work:
        np.savez(Path(work) / "init.npz", **{k: v.numpy() for k, v in smodel.state_dict().items()})
        np.savez(
            Path(work) / "batches.npz",
            x=np.stack([x.numpy() for x, _ in batches]),
            y=np.stack([y.numpy() for _, y in batches]),
        )
        (Path(work) / "meta.json").write_text(json.dumps({"vocab_size": len(vocab)}))
        factory = f"{os.path.abspath(__file__)}:gpt_train_step"
        arms = {
            lib: ab.Arm(w[lib], factory, {"lib_name": lib, "work": work}, warmup=warmup)
            for lib in ("sitp", "torch")
        }
        res = ab.compare(arms, rounds=repeats, calls=steps, ratios=[("torch", "sitp")])
    a, r = (
        res["arms"],
        res["ratios"]["torch/sitp"],
    )  # torch's time over sitp's: sitp's speed over torch's
    return {
        "sitp": 1.0 / a["sitp"]["median"],
        "torch": 1.0 / a["torch"]["median"],
        "sitp_range": [1.0 / a["sitp"]["max"], 1.0 / a["sitp"]["min"]],
        "torch_range": [1.0 / a["torch"]["max"], 1.0 / a["torch"]["min"]],
        "ratio": r["median"],
        "ratios": sorted(r["rounds"]),
        "repeats": repeats,
        "steps": steps,
        "warmup": warmup,
        "params": a["sitp"]["info"]["params"],
        "harness": res,
    }


def linear_gemms(w, rounds: int = 5, calls: int = 6, limit=None) -> list[dict]:
    """The matrix products of one GPT block (1,024 rows = 32 x 32 tokens, width 64), forward
    and backward: sitp's blas.matmul and torch.mm on the same arrays, through sitp.bench.ab
    (medians over ``rounds`` alternating rounds of ``calls`` calls)."""
    from sitp.bench import ab

    rows, C = 32 * 32, 64
    shapes = []  # (name, M, K, N, A transposed)
    for layer, n_in, n_out in (
        ("c_attn", C, 3 * C),
        ("attn c_proj", C, C),
        ("c_fc", C, 4 * C),
        ("mlp c_proj", 4 * C, C),
    ):
        shapes += [
            (f"{layer} forward", rows, n_in, n_out, False),
            (f"{layer} dX", rows, n_out, n_in, False),
            (f"{layer} dW", n_out, rows, n_in, True),
        ]
    factory = f"{os.path.abspath(__file__)}:gemm_call"
    out = []
    for name, M, K, N, ta in shapes[:limit]:
        arms = {
            lib: ab.Arm(w[lib], factory, dict(lib_name=lib, M=M, K=K, N=N, ta=ta), warmup=2)
            for lib in ("sitp", "torch")
        }
        res = ab.compare(arms, rounds=rounds, calls=calls, ratios=[("torch", "sitp")])
        s, t = res["arms"]["sitp"], res["arms"]["torch"]
        r = res["ratios"]["torch/sitp"]
        out.append(
            {
                "name": name,
                "shape": f"{M}x{K}x{N}",
                "sitp_ms": 1e3 * s["median"],
                "torch_ms": 1e3 * t["median"],
                "sitp_range_ms": [1e3 * s["min"], 1e3 * s["max"]],
                "torch_range_ms": [1e3 * t["min"], 1e3 * t["max"]],
                "torch_over_sitp": [r["median"], r["min"], r["max"]],
                "gflops": 2 * M * N * K / s["median"] / 1e9,
            }
        )
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="bigram,mlp,wavenet,rnn,gru,gpt")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--data", default="offline")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads for numba and torch (default: every core this process may use)",
    )
    parser.add_argument(
        "--bench-steps",
        type=int,
        default=20,
        help="timed steps per library in each round of the throughput benchmark",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="rounds of the throughput benchmark (medians are reported)",
    )
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--skip-bench", action="store_true")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a few steps, two rounds and two of the products (the tests)",
    )
    args = parser.parse_args(argv)

    import numba
    import torch

    import sitp  # noqa: F401
    from sitp.bench import ab, cpu_model

    threads = args.threads or len(os.sched_getaffinity(0))
    numba.set_num_threads(threads)
    torch.set_num_threads(threads)
    print(
        f"machine: {cpu_model()}, {os.cpu_count()} logical CPUs; threads: numba {threads}, "
        f"torch {torch.get_num_threads()}; torch {torch.__version__}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    record = {
        "machine": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "threads": threads,
        "torch": torch.__version__,
        "sitp": sitp.__version__,
        "config": {k: v for k, v in vars(args).items() if k != "json"},
    }
    if not args.skip_train:
        print(
            f"\nTest loss after {args.steps} steps, batch {args.batch_size}, "
            f"names {args.data!r}, seed {args.seed} (same init, same batches):\n"
        )
        print(
            "| model | params | sitp test | torch test | abs diff | max abs weight diff "
            "| sitp ms/step | torch ms/step |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        record["losses"] = []
        for name in args.models.split(","):
            r = compare_losses(name, args.steps, args.batch_size, args.seed, args.data, torch)
            record["losses"].append(r)
            print(
                f"| {r['model']} | {r['params']:,} | {r['sitp']:.4f} | {r['torch']:.4f} | "
                f"{r['diff']:.4f} | {r['max_dw']:.1e} | {r['sitp_ms']:.1f} | "
                f"{r['torch_ms']:.1f} |",
                flush=True,
            )
        print(
            "\n(ms/step here: both libraries in this process, one after the other, as a "
            "rough guide; the timing below is the fair one)"
        )
    if not args.skip_bench:
        env = {"torch": {"SITP_MALLOC_TUNING": "0"}}  # PyTorch keeps glibc's malloc settings
        with ab.workers(["sitp", "torch"], threads=threads, env=env) as w:
            r = gpt_throughput(args.bench_steps, 3, args.seed, w, args.repeats)
            rows = linear_gemms(
                w, rounds=2 if args.smoke else 5, calls=6, limit=2 if args.smoke else None
            )
        print(
            f"\nGPT training throughput (n_layer 4, n_head 4, n_embd 64, {r['params']:,} "
            f"params; batch 32 x block 32; AdamW; each library in a worker process on "
            f"{threads} thread(s) pinned to cores {r['harness']['cores']}, warmed by 3 steps; "
            f"{r['repeats']} rounds of {args.bench_steps} timed steps, the libraries taking "
            f"turns; steps/s is one over the median step, with the range of the rounds):\n"
        )
        print("| library | steps/s | ms/step | range of the rounds, steps/s |")
        print("|---|---:|---:|---:|")
        for lib in ("sitp", "torch"):
            lo, hi = r[f"{lib}_range"]
            print(f"| {lib} | {r[lib]:.2f} | {1e3 / r[lib]:.1f} | {lo:.2f}-{hi:.2f} |")
        print(
            f"\nsitp / torch = {r['ratio']:.2f} (median of the rounds' ratios; range "
            f"{r['ratios'][0]:.2f} to {r['ratios'][-1]:.2f} over {r['repeats']} rounds)"
        )
        print(ab.load_line(r["harness"]))
        print(
            "\nThe matrix products of one block (float32; M x K x N; medians of 5 alternating "
            "rounds of 6 calls):\n"
        )
        print("| product | shape | sitp ms | torch ms | torch / sitp time (range) | sitp GFLOP/s |")
        print("|---|---|---:|---:|---:|---:|")
        for g in rows:
            m, lo, hi = g["torch_over_sitp"]
            print(
                f"| {g['name']} | {g['shape']} | {g['sitp_ms']:.3f} | {g['torch_ms']:.3f} | "
                f"{m:.2f} ({lo:.2f}-{hi:.2f}) | {g['gflops']:.1f} |"
            )
        total_s, total_t = sum(g["sitp_ms"] for g in rows), sum(g["torch_ms"] for g in rows)
        print(
            f"\nall {len(rows)}: sitp {total_s:.2f} ms, torch {total_t:.2f} ms "
            f"(torch / sitp = {total_t / total_s:.2f})"
        )
        record["throughput"], record["gemms"] = r, rows
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
