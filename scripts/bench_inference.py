"""Section 5.4's serving features trained briefly and measured: grouped-query attention
and speculative decoding.

Usage::

    python scripts/bench_inference.py --json docs/assets/part3/kv-cache-features.json
    python scripts/bench_inference.py --smoke          # a few steps of everything (seconds)

Part 1 trains section 5.3's modern GPT (4 layers, 4 query heads, width 128, block 64, on
tinyshakespeare's characters) with 4, 2 and 1 key/value heads (multi-head, grouped-query,
multi-query), ``--seeds`` seeds each, and reports the validation loss (nats per character
on fixed batches of the last 10% of the text), the parameters, the KV cache's bytes per
token, and the cached decode speed at context ``--context`` (one thread).

Part 2 trains a draft model (1 layer, width 64) the same way and decodes ``--new-tokens``
tokens after a prompt with the multi-head model of seed 0, plainly and speculatively with
k proposals per round, at temperature 1 and greedily: the share of proposals kept, the
tokens each pass of the model yields against the formula (1 - a^(k+1)) / (1 - a) for a
share a kept independently, and the speed-up, all over ``--draws`` generator seeds. The
plain and the speculative runs alternate, timed by the CPU time of this process (numba on
one thread), the median of each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")  # before sitp: one thread, as the tables say

import numpy as np  # noqa: E402

import sitp  # noqa: E402
from sitp.bench import ab  # noqa: E402
from sitp.data.download import load_tinyshakespeare  # noqa: E402
from sitp.models.engine import Engine  # noqa: E402
from sitp.models.gpt import GPT, MODERN, GPTConfig  # noqa: E402
from sitp.serialization import write_atomically  # noqa: E402

TARGET = dict(block_size=64, n_layer=4, n_head=4, n_embd=128, **MODERN)
DRAFT = dict(TARGET, n_layer=1, n_embd=64)


def data():
    """tinyshakespeare's characters as int64 ids: the first 90% and the last 10%."""
    text = load_tinyshakespeare()
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    ids = np.fromiter((lookup[c] for c in text), dtype=np.int64, count=len(text))
    n = int(0.9 * len(ids))
    return ids[:n], ids[n:], len(chars)


def windows(ids, B, T, rng):
    """B random windows of T + 1 tokens: inputs and targets, (B, T) each."""
    starts = rng.integers(0, len(ids) - T - 1, B)
    x = np.stack([ids[s : s + T + 1] for s in starts])
    return sitp.tensor(x[:, :-1]), sitp.tensor(x[:, 1:])


def train(fields, vocab, train_ids, val_ids, args, seed):
    """A model trained for ``args.steps`` AdamW steps; returns it and its validation loss."""
    sitp.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=vocab, **fields))
    opt = sitp.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    rng = np.random.default_rng(seed)
    T = fields["block_size"]
    for _ in range(args.steps):
        x, y = windows(train_ids, args.batch_size, T, rng)
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    val_rng = np.random.default_rng(1234)  # the same validation batches for every model
    with sitp.no_grad():
        losses = [model(*windows(val_ids, args.batch_size, T, val_rng))[1].item()
                  for _ in range(args.val_batches)]  # fmt: skip
    return model, float(np.mean(losses))


def cpu_seconds(fn):
    t = time.process_time()
    out = fn()
    return time.process_time() - t, out


def decode_rate(model, L, calls):
    """Cached decode tokens/s at context L (one sequence), the median of ``calls``."""
    cache = model.make_kv_cache(1)
    seq = sitp.tensor(np.random.default_rng(L).integers(0, 65, (1, L + 1)))
    with sitp.no_grad():
        model(seq[:, :L], kv_cache=cache)
        times = []
        for _ in range(calls + 2):
            cache.pos = L
            times.append(cpu_seconds(lambda: model(seq[:, L:], kv_cache=cache))[0])
    return 1.0 / statistics.median(times[2:])


def part_gqa(vocab, train_ids, val_ids, args):
    rows = []
    for n_kv in (4, 2, 1):
        fields = dict(TARGET, n_kv_head=n_kv)
        vals, rates, models = [], [], []
        for seed in range(args.seeds):
            model, val = train(fields, vocab, train_ids, val_ids, args, seed)
            vals.append(val)
            rates.append(decode_rate(model, args.context, args.calls))
            models.append(model)
            print(f"n_kv_head {n_kv} seed {seed}: val {val:.4f}, decode {rates[-1]:.0f} tokens/s",
                  flush=True)  # fmt: skip
        c = models[0].config
        rows.append({
            "n_kv_head": n_kv,
            "params": sum(p.numel() for p in models[0].parameters()),
            "cache_bytes_per_token": 2 * c.n_layer * n_kv * (c.n_embd // c.n_head) * 4,
            "val": vals,
            "decode_tokens_per_s": rates,
        })  # fmt: skip
        if n_kv == 4:
            target = models[0]
    return rows, target


def part_speculative(target, vocab, train_ids, val_ids, args):
    draft, draft_val = train(DRAFT, vocab, train_ids, val_ids, args, seed=0)
    print(f"draft: val {draft_val:.4f}", flush=True)
    prompt = sitp.tensor(val_ids[None, :16])
    engine = Engine(target)
    rows = []
    for temperature in (1.0, 0.0):
        for k in args.ks:
            kept_share, per_round, speedups = [], [], []
            for draw in range(args.draws):

                def plain():
                    return engine.generate(prompt, args.new_tokens, temperature=temperature,
                                           generator=sitp.Generator().manual_seed(draw))  # fmt: skip

                def spec():
                    return engine.speculative(prompt, args.new_tokens, draft, k=k,
                                              temperature=temperature,
                                              generator=sitp.Generator().manual_seed(draw))  # fmt: skip

                if draw == 0:  # one untimed call of each: warm
                    plain()
                    spec()
                times = {plain: [], spec: []}
                for rep in range(args.repeats):  # alternate: plain first, then speculative first
                    for fn in (plain, spec) if rep % 2 == 0 else (spec, plain):
                        s, out = cpu_seconds(fn)
                        times[fn].append(s)
                        if fn is spec:
                            rounds = out[1]
                plain_s, spec_s = times[plain], times[spec]
                proposed = sum(n for n, _ in rounds)
                kept = sum(j for _, j in rounds)
                kept_share.append(kept / proposed)
                per_round.append(args.new_tokens / len(rounds))
                speedups.append(statistics.median(plain_s) / statistics.median(spec_s))
            a = float(np.mean(kept_share))
            rows.append({
                "k": k, "temperature": temperature, "kept_share": kept_share,
                "tokens_per_pass": per_round, "speedup": speedups,
                "formula_tokens_per_pass": (1 - a ** (k + 1)) / (1 - a) if a < 1 else k + 1,
            })  # fmt: skip
            print(f"T={temperature} k={k}: kept {a:.2f}, tokens/pass {np.mean(per_round):.2f} "
                  f"(formula {rows[-1]['formula_tokens_per_pass']:.2f}), speed-up "
                  f"{np.mean(speedups):.2f}", flush=True)  # fmt: skip
    t_step = 1.0 / decode_rate(target, args.context, args.calls)
    d_step = 1.0 / decode_rate(draft, args.context, args.calls)
    return {"draft_config": DRAFT, "draft_val": draft_val,
            "draft_params": sum(p.numel() for p in draft.parameters()),
            "step_s": {"target": t_step, "draft": d_step}, "rows": rows}  # fmt: skip


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--val-batches", type=int, default=20)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--context", type=int, default=60, help="context of the decode speed")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--ks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--draws", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--json")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args(argv)
    if args.smoke:
        args.steps, args.seeds, args.val_batches, args.calls = 2, 1, 1, 2
        args.ks, args.draws, args.repeats, args.new_tokens = [2], 1, 1, 8
    cores = ab.default_cores(1)
    if cores is not None:
        os.sched_setaffinity(0, cores)  # one core, as the harness pins its workers
    before = (ab.loadavg(), ab.proc_stat(), time.time())
    train_ids, val_ids, vocab = data()
    gqa, target = part_gqa(vocab, train_ids, val_ids, args)
    spec = part_speculative(target, vocab, train_ids, val_ids, args)
    after = (ab.loadavg(), ab.proc_stat(), time.time())
    ours = time.process_time()
    res = {
        "target_config": TARGET, "args": vars(args), "gqa": gqa, "speculative": spec,
        "machine": ab.machine(), "threads": 1, "cores": cores,
        "load": {"loadavg_before": before[0], "loadavg_after": after[0],
                 **ab.load_shares(before[1], after[1], ours), "seconds": after[2] - before[2]},
    }  # fmt: skip
    print(ab.load_line(res))
    if args.json:
        write_atomically(args.json, (json.dumps(res, indent=1) + "\n").encode())
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
