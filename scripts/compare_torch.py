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
get_batch), with numba and PyTorch limited to the same number of threads.
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import time

import numpy as np


def make_lambda(warmup: int, steps: int):
    from sitp.optim.lr_scheduler import _warmup_cosine

    return functools.partial(_warmup_cosine, num_warmup_steps=min(warmup, steps),
                             num_training_steps=steps, num_cycles=0.5, min_lr_ratio=0.1)


def torch_evaluate(torch, model, X, Y, batch_size=1024) -> float:
    """The same weighting as sitp.train.trainer.evaluate: mean loss per real target."""
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(X), batch_size):
            Xb, Yb = X[i:i + batch_size], Y[i:i + batch_size]
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
    tmodel.load_state_dict({k: torch.tensor(v.numpy().copy())
                            for k, v in smodel.state_dict().items()})
    warmup = min(100, steps // 10)
    sopt = make_optimizer(smodel, spec.lr, 0.01)
    ssched = make_scheduler(sopt, warmup, steps)
    topt = torch.optim.AdamW(tmodel.parameters(), lr=spec.lr, betas=(0.9, 0.99), eps=1e-8,
                             weight_decay=0.01)
    tsched = torch.optim.lr_scheduler.LambdaLR(topt, make_lambda(warmup, steps))

    Xtr, Ytr = splits.tensors["train"]
    tXtr, tYtr = torch.tensor(Xtr.numpy()), torch.tensor(Ytr.numpy())
    g = sitp.Generator().manual_seed(seed)
    batches = [sitp.randint(0, len(Xtr), (batch_size,), generator=g).numpy()
               for _ in range(steps)]

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
    max_w = max(float(np.abs(p.detach().numpy() - tp.detach().numpy()).max())
                for p, tp in zip(smodel.parameters(), tmodel.parameters()))
    return {"model": name, "params": sum(p.numel() for p in smodel.parameters()),
            "sitp": s_test, "torch": t_test, "diff": abs(s_test - t_test), "max_dw": max_w,
            "sitp_ms": 1e3 * s_time / steps, "torch_ms": 1e3 * t_time / steps,
            "last_batch_loss": s_last}


def gpt_throughput(steps: int, warmup: int, seed: int, torch, repeats: int = 5) -> dict:
    """Steps per second of a GPT training step (forward, backward, AdamW) at B=32, T=32.

    ``repeats`` rounds, each timing ``steps`` steps of sitp and then of PyTorch, so
    that both libraries see the same machine conditions; the medians are reported
    (the machines we measure on are shared and noisy), with each round's ratio.
    """
    import sitp
    from sitp.data import Vocab, build_token_stream, get_batch, load_names
    from sitp.models import MODELS

    words = load_names("offline")
    vocab = Vocab(words)
    stream = build_token_stream(words, vocab)
    g = sitp.Generator().manual_seed(seed)
    batches = [get_batch(stream, 32, 32, generator=g) for _ in range(steps + warmup)]
    spec = MODELS["gpt"]
    fields = dict(vocab_size=len(vocab), block_size=32, n_layer=4, n_head=4, n_embd=64)
    sitp.manual_seed(seed)
    smodel = spec.build(spec.make_config(**fields))
    tmodel = spec.build(spec.make_config("torch", **fields), "torch")
    tmodel.load_state_dict({k: torch.tensor(v.numpy().copy())
                            for k, v in smodel.state_dict().items()})
    sopt = sitp.optim.AdamW(smodel.parameters(), lr=1e-3)
    topt = torch.optim.AdamW(tmodel.parameters(), lr=1e-3)

    def s_step(X, Y):
        _, loss = smodel(X, Y)
        sopt.zero_grad()
        loss.backward()
        sopt.step()

    def t_step(X, Y):
        _, loss = tmodel(X, Y)
        topt.zero_grad()
        loss.backward()
        topt.step()

    t_batches = [(torch.tensor(X.numpy()), torch.tensor(Y.numpy())) for X, Y in batches]
    runs = (("sitp", s_step, batches), ("torch", t_step, t_batches))
    for _, step, data in runs:
        for X, Y in data[:warmup]:  # numba compiles (or loads its cache) here
            step(X, Y)
    rates = {"sitp": [], "torch": []}
    for _ in range(repeats):
        for lib, step, data in runs:
            t0 = time.perf_counter()
            for X, Y in data[warmup:]:
                step(X, Y)
            rates[lib].append(steps / (time.perf_counter() - t0))
    ratios = sorted(s / t for s, t in zip(rates["sitp"], rates["torch"]))
    return {"sitp": float(np.median(rates["sitp"])), "torch": float(np.median(rates["torch"])),
            "ratio": float(np.median(ratios)), "ratios": ratios, "repeats": repeats,
            "params": sum(p.numel() for p in smodel.parameters())}


def linear_gemms(torch, reps: int = 30) -> list[dict]:
    """The matrix products of one GPT block (1,024 rows = 32 x 32 tokens, width 64), forward
    and backward, timed with sitp.backends.cpu.blas.matmul and torch.mm on the same arrays (medians)."""
    from sitp.backends.cpu import blas

    rows, C = 32 * 32, 64
    shapes = []  # (name, M, K, N, A transposed)
    for layer, n_in, n_out in (("c_attn", C, 3 * C), ("attn c_proj", C, C),
                               ("c_fc", C, 4 * C), ("mlp c_proj", 4 * C, C)):
        shapes += [(f"{layer} forward", rows, n_in, n_out, False),
                   (f"{layer} dX", rows, n_out, n_in, False),
                   (f"{layer} dW", n_out, rows, n_in, True)]
    rng = np.random.default_rng(0)

    def median_time(f):
        f()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        return float(np.median(times))

    out = []
    for name, M, K, N, ta in shapes:
        a = (rng.standard_normal((K, M)).astype(np.float32).T if ta
             else rng.standard_normal((M, K)).astype(np.float32))      # dW = dY^T X: A transposed
        b = rng.standard_normal((K, N)).astype(np.float32)
        ta_t, tb_t = torch.from_numpy(np.ascontiguousarray(a.T)).T if ta else torch.from_numpy(a), \
            torch.from_numpy(b)
        s = median_time(lambda: blas.matmul(a, b))
        t = median_time(lambda: torch.mm(ta_t, tb_t))
        out.append({"name": name, "shape": f"{M}x{K}x{N}", "sitp_ms": 1e3 * s, "torch_ms": 1e3 * t,
                    "gflops": 2 * M * N * K / s / 1e9})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="bigram,mlp,wavenet,rnn,gru,gpt")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--data", default="offline")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for numba and torch (default: numba's default)")
    parser.add_argument("--bench-steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5,
                        help="rounds of the throughput benchmark (medians are reported)")
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--skip-bench", action="store_true")
    args = parser.parse_args(argv)

    import numba
    import torch

    import sitp  # noqa: F401
    from sitp.bench import cpu_model

    threads = args.threads or numba.get_num_threads()
    numba.set_num_threads(threads)
    torch.set_num_threads(threads)
    print(f"machine: {cpu_model()}, {os.cpu_count()} logical CPUs; threads: numba {threads}, "
          f"torch {torch.get_num_threads()}; torch {torch.__version__}; "
          f"load average {os.getloadavg()[0]:.1f}")
    if not args.skip_train:
        print(f"\nTest loss after {args.steps} steps, batch {args.batch_size}, "
              f"names {args.data!r}, seed {args.seed} (same init, same batches):\n")
        print("| model | params | sitp test | torch test | abs diff | max abs weight diff "
              "| sitp ms/step | torch ms/step |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name in args.models.split(","):
            r = compare_losses(name, args.steps, args.batch_size, args.seed, args.data, torch)
            print(f"| {r['model']} | {r['params']:,} | {r['sitp']:.4f} | {r['torch']:.4f} | "
                  f"{r['diff']:.4f} | {r['max_dw']:.1e} | {r['sitp_ms']:.1f} | "
                  f"{r['torch_ms']:.1f} |", flush=True)
    if not args.skip_bench:
        r = gpt_throughput(args.bench_steps, 3, args.seed, torch, args.repeats)
        print(f"\nGPT training throughput (n_layer 4, n_head 4, n_embd 64, {r['params']:,} "
              f"params; batch 32 x block 32; AdamW; median of {r['repeats']} rounds of "
              f"{args.bench_steps} timed steps, the libraries taking turns):\n")
        print("| library | steps/s | ms/step |")
        print("|---|---:|---:|")
        for lib in ("sitp", "torch"):
            print(f"| {lib} | {r[lib]:.2f} | {1e3 / r[lib]:.1f} |")
        print(f"\nsitp / torch = {r['ratio']:.2f} (median of the rounds' ratios; range "
              f"{r['ratios'][0]:.2f} to {r['ratios'][-1]:.2f}); load average after: "
              f"{os.getloadavg()[0]:.1f}")
        rows = linear_gemms(torch)
        print("\nThe matrix products of one block (float32; M x K x N; medians of 30):\n")
        print("| product | shape | sitp ms | torch ms | torch / sitp time | sitp GFLOP/s |")
        print("|---|---|---:|---:|---:|---:|")
        for g in rows:
            print(f"| {g['name']} | {g['shape']} | {g['sitp_ms']:.3f} | {g['torch_ms']:.3f} | "
                  f"{g['torch_ms'] / g['sitp_ms']:.2f} | {g['gflops']:.1f} |")
        total_s, total_t = sum(g["sitp_ms"] for g in rows), sum(g["torch_ms"] for g in rows)
        print(f"\nall twelve: sitp {total_s:.2f} ms, torch {total_t:.2f} ms "
              f"(torch / sitp = {total_t / total_s:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
