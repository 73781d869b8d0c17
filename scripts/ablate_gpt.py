"""The ablation of section 5.3: each modern option alone, on the same data and budget.

Usage::

    SITP_DATA_DIR=../shared/data python scripts/ablate_gpt.py            # every option
    python scripts/ablate_gpt.py --steps 50 --options gpt2 rope          # a quick look
    python scripts/ablate_gpt.py --seeds 1 2 3 4 1337 --threads 1 \
        --json src/sitp/examples/ablate-gpt-seeds.json                   # 5.3's record

Every run trains a GPT on the characters of tinyshakespeare (90% train, 10%
validation, as nanoGPT's shakespeare_char) from the same seed, on the same
sequence of batches (one ``sitp.Generator`` seeded alike for every run), for the
same number of steps, with AdamW (betas 0.9/0.99, weight decay 0.1 on the 2-D
parameters) under a warmup-cosine schedule. The baseline is GPT-2's recipe
(``GPTConfig()``'s defaults); each other row changes one config field, and the
last row changes all of them at once. ``muon`` keeps GPT-2's architecture and
trains the blocks' matrices with Muon (``sitp.models.gpt.muon_and_adamw``).
The validation loss is the mean over the same ``--eval-batches`` batches of
the validation text for every run. The table also gives each run's parameters
and its median milliseconds per step; the CPU is printed first.

``--seeds`` repeats the whole ablation once per seed (seeds outer, options inner,
so a stopped run still holds every option for the seeds it finished); ``--json``
then records every run with its seed, the load average before and after it, and
the machine, and is rewritten after each run. The milliseconds per step are wall
time: on a machine shared with other jobs they measure the load as much as the
option, which is why the load averages are kept beside them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path

import numba
import numpy as np

import sitp
from sitp.bench import cpu_model
from sitp.bench.ab import loadavg, machine
from sitp.data import get_batch, load_tinyshakespeare
from sitp.data.tokens import CharTokenizer
from sitp.models.gpt import GPT, MODERN, GPTConfig, muon_and_adamw
from sitp.serialization import write_atomically
from sitp.train.trainer import param_groups

# each option of section 5.3 as the config fields it sets
OPTIONS = {
    "gpt2": {},
    "rope": {"rope": True},
    "rmsnorm": {"norm": "rmsnorm"},
    "rmsnorm, no gain": {"norm": "rmsnorm", "norm_params": False},
    "no bias": {"bias": False},
    "qk-norm": {"qk_norm": True},
    "relu2": {"mlp": "relu2"},
    "untied": {"tie_weights": False},
    "softcap 15": {"logit_softcap": 15.0},
    "muon": {},
    "all": MODERN,
}
USES_MUON = {"muon", "all"}


def lr_factor(step: int, steps: int, warmup: int, min_ratio: float = 0.1) -> float:
    """Linear warmup to 1, then cosine down to ``min_ratio`` at the last step."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def run(option, data, args, seed: int) -> dict:
    train_ids, val_ids, V = data
    fields = dict(
        block_size=args.block, vocab_size=V, n_layer=args.layers, n_head=args.heads,
        n_embd=args.width, **OPTIONS[option],
    )  # fmt: skip
    load_before = loadavg()
    sitp.manual_seed(seed)
    model = GPT(GPTConfig(**fields))
    if option in USES_MUON:
        opts = list(muon_and_adamw(model, lr=args.lr, muon_lr=args.muon_lr, weight_decay=0.0))
    else:
        opts = [sitp.optim.AdamW(param_groups(model, 0.1), lr=args.lr, betas=(0.9, 0.99))]
    base_lrs = [[g["lr"] for g in o.param_groups] for o in opts]
    g = sitp.Generator().manual_seed(seed + 1)  # the same batches for every option
    times, losses = [], []
    model.train()
    for step in range(args.steps):
        t0 = time.perf_counter()
        f = lr_factor(step, args.steps, args.warmup)
        for o, lrs in zip(opts, base_lrs):
            for group, lr in zip(o.param_groups, lrs):
                group["lr"] = lr * f
        X, Y = get_batch(train_ids, args.batch, args.block, generator=g)
        _, loss = model(X, Y)
        for o in opts:
            o.zero_grad()
        loss.backward()
        for o in opts:
            o.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    model.eval()
    ge = sitp.Generator().manual_seed(12345)  # the same validation batches for every option
    with sitp.no_grad():
        val = [
            model(*get_batch(val_ids, args.batch, args.block, generator=ge))[1].item()
            for _ in range(args.eval_batches)
        ]
    return {
        "option": option,
        "seed": seed,
        "params": sum(p.numel() for p in model.parameters()),
        "train": float(np.mean(losses[-20:])),
        "val": float(np.mean(val)),
        "ms_per_step": 1000 * statistics.median(times),
        "seconds": sum(times),
        "load_average": {"before": load_before, "after": loadavg()},
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--options", nargs="+", default=list(OPTIONS), choices=list(OPTIONS))
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--warmup", type=int, default=60)
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--muon-lr", type=float, default=0.02)
    p.add_argument("--eval-batches", type=int, default=50)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--seeds", type=int, nargs="+", help="one ablation per seed (for --seed)")
    p.add_argument("--threads", type=int, default=None, help="numba threads (default: numba's)")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args(argv)
    seeds = args.seeds or [args.seed]
    if args.threads:
        numba.set_num_threads(args.threads)
    threads = numba.get_num_threads()
    load_start = loadavg()

    text = load_tinyshakespeare()
    tok = CharTokenizer(text)
    ids = np.array(tok.encode(text), dtype=np.int64)
    n = int(0.9 * len(ids))
    data = ids[:n], ids[n:], tok.vocab_size
    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores), sitp {sitp.__version__}")
    print(f"numba threads {threads}; load average at the start {load_start}")
    print(
        f"tinyshakespeare characters: {len(ids):,} (train {n:,}, val {len(ids) - n:,}), "
        f"V = {tok.vocab_size}; GPT {args.layers} layers, {args.heads} heads, width "
        f"{args.width}, block {args.block}, batch {args.batch}, {args.steps} steps "
        f"(warmup {args.warmup}, cosine to 0.1x), AdamW lr {args.lr}, Muon lr "
        f"{args.muon_lr}; val over {args.eval_batches} batches"
    )
    rows = []
    record = {
        "args": {k: v for k, v in vars(args).items() if k != "json"} | {"seeds": seeds},
        "machine": machine() | {"threads": threads, "sitp": sitp.__version__},
        "load_average": {"start": load_start, "end": None},
        "rows": rows,
    }
    for seed in seeds:
        if len(seeds) > 1:
            print(f"seed {seed}")
        print("| option | params | train loss | val loss | vs gpt2 | ms/step |")
        print("|---|---:|---:|---:|---:|---:|")
        base = None
        for option in args.options:
            row = run(option, data, args, seed)
            base = row["val"] if option == "gpt2" else base
            delta = f"{row['val'] - base:+.3f}" if base is not None else ""
            print(
                f"| {option} | {row['params']:,} | {row['train']:.3f} | {row['val']:.3f} | "
                f"{delta} | {row['ms_per_step']:.0f} |",
                flush=True,
            )
            rows.append(row)
            if args.json:
                record["load_average"]["end"] = loadavg()
                write_atomically(args.json, (json.dumps(record, indent=1) + "\n").encode())
    print(f"load average at the end {loadavg()}")


if __name__ == "__main__":
    main()
