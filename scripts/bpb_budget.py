"""What the modern options and BPE buy in bits per byte, at the same wall-clock budget.

Usage::

    SITP_DATA_DIR=../shared/data python scripts/bpb_budget.py              # 4 x 120 s
    python scripts/bpb_budget.py --budget 60 --configs "gpt2, char" "modern, char"
    python scripts/bpb_budget.py --smoke --json /tmp/bpb.json               # seconds

Four GPTs train on tinyshakespeare for ``--budget`` seconds of wall clock each:

* ``gpt2, char``: nanoGPT's CPU recipe, as ``scripts/compare_shakespeare.py`` trains it
  (GPT-2's architecture without biases; 4 layers, 4 heads, width 128; AdamW at 1e-3,
  betas 0.9/0.99, weight decay 0.1 on the matrices; gradients clipped at norm 1) on the
  65 characters;
* ``modern, char``: every option of section 5.3 on (the ``all`` row of
  ``scripts/ablate_gpt.py``: rotary, RMSNorm without gains, no biases, QK-norm, ReLU²,
  an untied head, a soft cap of 15, Muon at 0.02 for the blocks' matrices), same data;
* ``modern, BPE 512`` and ``modern, BPE 1024``: the same modern model on the tokens of
  a byte-level BPE (``sitp.tokenizers``) of 512 and 1,024 tokens, trained here on the
  training split only.

The split is nanoGPT's: the first 90% of the characters train, the last 10% are held
out, and each tokenizer encodes the two parts separately, so every model is evaluated
on the same 111,540 bytes. The validation loss is summed over every token of that part
(each predicted from the tokens before it in its window, the first one from the last
training token) and divided by its bytes: bits per byte, the unit of section 5.2.

Every model sees the same text per step: a batch of 12 windows of 64 bytes. For the
characters that is a block of 64 tokens; a BPE token covers 2-3 bytes, so its block is
64 bytes' worth of tokens (64 divided by the tokenizer's bytes per token on the
training split, rounded). The model reads the same context and the same amount of text
per step, and a BPE step costs less (fewer positions), so at a fixed budget it takes
more steps. The learning rate follows the wall clock: a linear warmup over the first 5%
of the budget, then half a cosine to a tenth at its end.

Each config trains in an interpreter of its own (this script with ``--child``), after
two untimed steps on a throwaway model that load numba's compiled kernels, so that one
run's compilation, caches and threads do not land in another's time (``--smoke``, a
check that the script runs, keeps them all in one). The table names
the CPU and the load average, and ``--json`` (by default, for a full run,
``src/sitp/examples/bpb-budget.json``, which section 5.3 reads) keeps it all.

The budget is wall-clock seconds on a quiet machine. On a shared one, other jobs take
turns with the training threads, and numba's parallel kernels wait at every barrier for
a thread that is not running, so a run's speed follows the load of the moment;
``--threads 1 --clock cpu`` counts the CPU seconds of a one-thread training process
instead, which is the wall clock of one quiet core.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np

import sitp
from sitp import _target
from sitp.bench import cpu_model
from sitp.data import CharTokenizer, get_batch, load_tinyshakespeare
from sitp.models.gpt import GPT, MODERN, GPTConfig, muon_and_adamw
from sitp.tokenizers import BPETokenizer
from sitp.train.trainer import param_groups

RECORD = Path(__file__).resolve().parents[1] / "src" / "sitp" / "examples" / "bpb-budget.json"

# name -> (tokenizer: "char" or a BPE vocabulary size, architecture fields, optimizer)
CONFIGS = {
    "gpt2, char": ("char", {"bias": False}, "adamw"),
    "modern, char": ("char", MODERN, "muon"),
    "modern, BPE 512": (512, MODERN, "muon"),
    "modern, BPE 1024": (1024, MODERN, "muon"),
}


def lr_factor(progress: float, warmup: float = 0.05, min_ratio: float = 0.1) -> float:
    """The learning rate's multiplier at ``progress`` (elapsed / budget, 0 to 1): linear
    warmup over the first ``warmup`` of the budget, then half a cosine to ``min_ratio``."""
    if progress < warmup:
        return max(progress / warmup, 0.01)
    ratio = min(1.0, (progress - warmup) / (1 - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * ratio))


# ------------------------------------------------------------------------------ child
def make_model(meta):
    model = GPT(GPTConfig(**meta["fields"]))
    if meta["optimizer"] == "muon":
        opts = list(muon_and_adamw(model, lr=meta["lr"], muon_lr=meta["muon_lr"]))
    else:
        groups = param_groups(model, meta["weight_decay"])
        opts = [sitp.optim.AdamW(groups, lr=meta["lr"], betas=(0.9, 0.99), eps=1e-8)]
    return model, opts


def step(model, opts, X, Y, clip):
    _, loss = model(X, Y)
    for o in opts:
        o.zero_grad(set_to_none=True)
    loss.backward()
    sitp.nn.utils.clip_grad_norm_(model.parameters(), clip)
    for o in opts:
        o.step()
    return loss.item()


def evaluate(model, stream, block, batch=128) -> float:
    """Nats summed over every target of ``stream[1:]``, in windows of ``block`` tokens."""
    n = len(stream) - 1
    starts = list(range(0, n, block))
    full = [s for s in starts if s + block <= n]
    total = 0.0
    model.eval()
    with sitp.no_grad():
        for i in range(0, len(full), batch):
            idx = np.array(full[i : i + batch])[:, None] + np.arange(block)
            _, loss = model(sitp.tensor(stream[idx]), sitp.tensor(stream[idx + 1]))
            total += loss.item() * idx.size
        if starts and starts[-1] + block > n:  # the tail, shorter than a block
            s = starts[-1]
            x, y = stream[None, s:n], stream[None, s + 1 : n + 1]
            total += model(sitp.tensor(x), sitp.tensor(y))[1].item() * x.size
    model.train()
    return total


def child(args) -> int:
    work = Path(args.work)
    meta = json.loads((work / f"{args.child}.meta.json").read_text())
    data = np.load(work / f"{args.child}.npz")
    train_ids, val_stream = data["train"].astype(np.int64), data["val"].astype(np.int64)
    numba.set_num_threads(meta["threads"])
    B, T = meta["batch_size"], meta["fields"]["block_size"]

    g = sitp.Generator().manual_seed(0)  # two untimed steps: numba's kernels load here
    scratch, scratch_opts = make_model(meta)
    for _ in range(2):
        step(scratch, scratch_opts, *get_batch(train_ids, B, T, generator=g), meta["clip"])
    del scratch, scratch_opts

    sitp.manual_seed(meta["seed"])
    model, opts = make_model(meta)
    base_lrs = [[group["lr"] for group in o.param_groups] for o in opts]
    g = sitp.Generator().manual_seed(meta["seed"] + 1)
    clock = time.process_time if meta["clock"] == "cpu" else time.perf_counter
    losses, steps, elapsed = [], 0, 0.0
    start, wall_start = clock(), time.perf_counter()
    while elapsed < meta["budget"]:
        f = lr_factor(elapsed / meta["budget"])
        for o, lrs in zip(opts, base_lrs):
            for group, lr in zip(o.param_groups, lrs):
                group["lr"] = lr * f
        X, Y = get_batch(train_ids, B, T, generator=g)
        losses.append(step(model, opts, X, Y, meta["clip"]))
        steps += 1
        elapsed = clock() - start
    wall = time.perf_counter() - wall_start
    nats = evaluate(model, val_stream, T)
    result = {
        "params": sum(p.numel() for p in model.parameters()),
        "steps": steps,
        "seconds": elapsed,  # on the budget's clock
        "wall_seconds": wall,
        "tokens_per_s": steps * B * T / elapsed,
        "bytes_per_s": steps * B * T * meta["train_bytes_per_token"] / elapsed,
        "train_loss": float(np.mean(losses[-20:])),
        "val_loss": nats / (len(val_stream) - 1),  # nats per token
        "val_bpb": nats / math.log(2) / meta["val_bytes"],
    }
    (work / f"{args.child}.json").write_text(json.dumps(result))
    return 0


# ----------------------------------------------------------------------------- parent
def tokenize(name, train_text, val_text):
    """(tokenizer label, vocabulary size, train ids, val ids, train bytes per token)."""
    kind = CONFIGS[name][0]
    if kind == "char":
        tok = CharTokenizer(train_text + val_text)
        train, val = tok.encode(train_text), tok.encode(val_text)
        label = "characters"
    else:
        tok = BPETokenizer.train(train_text, vocab_size=kind)  # the training split only
        train, val = tok.encode_ordinary(train_text), tok.encode_ordinary(val_text)
        label = f"BPE {kind}"
    if tok.decode(val) != val_text:
        raise RuntimeError(f"{label} does not decode the validation text back")
    return (
        label,
        tok.vocab_size,
        np.array(train),
        np.array(val),
        len(train_text.encode()) / len(train),
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds of training per config (default 120; --smoke: 2)",
    )
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument(
        "--context-bytes",
        type=int,
        default=64,
        help="the context of every model, in bytes of text (a block of 64 characters)",
    )
    p.add_argument("--batch-size", type=int, default=12)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW's learning rate")
    p.add_argument("--muon-lr", type=float, default=0.02)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=None, help="numba threads (default: numba's)")
    p.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="what the budget counts: wall-clock seconds, or the CPU seconds of the "
        "training process (steadier on a shared machine; use with --threads 1)",
    )
    p.add_argument(
        "--corpus-chars",
        type=int,
        default=None,
        help="use only the first N characters of the corpus",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run for tests: 1 layer, width 32, 2 s, 200,000 characters, every "
        "config in this process",
    )
    p.add_argument(
        "--json",
        type=Path,
        default=None,
        help=f"write the results here (default for a full run: {RECORD})",
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    if args.smoke:
        args.n_layer, args.n_head, args.n_embd = 1, 2, 32
        args.corpus_chars = args.corpus_chars or 200_000
    args.budget = args.budget if args.budget is not None else (2.0 if args.smoke else 120.0)
    out = args.json if args.json is not None else (None if args.smoke else RECORD)

    threads = args.threads or numba.get_num_threads()
    load_start = os.getloadavg()
    machine = (
        f"{cpu_model()} ({_target.isa_name()}), {os.cpu_count()} logical CPUs; "
        f"numba {threads} threads; sitp {sitp.__version__}"
    )
    print(
        f"machine: {machine}; load average {load_start[0]:.2f} {load_start[1]:.2f} "
        f"{load_start[2]:.2f}",
        flush=True,
    )

    text = load_tinyshakespeare()[: args.corpus_chars]
    cut = int(0.9 * len(text))  # nanoGPT's prepare.py: the first 90% trains
    train_text, val_text = text[:cut], text[cut:]
    val_bytes = len(val_text.encode("utf-8"))
    print(
        f"tinyshakespeare: {len(text):,} characters; train {cut:,}, held out "
        f"{len(val_text):,} ({val_bytes:,} bytes); GPT {args.n_layer} layers, "
        f"{args.n_head} heads, width {args.n_embd}; batch {args.batch_size} windows of "
        f"{args.context_bytes} bytes; {args.budget:g} s of training per config "
        f"({args.clock} clock)\n",
        flush=True,
    )

    rows = []
    with tempfile.TemporaryDirectory() as work:
        for k, name in enumerate(args.configs):
            label, V, train, val, bpt = tokenize(name, train_text, val_text)
            kind, arch, optimizer = CONFIGS[name]
            block = (
                args.context_bytes if kind == "char" else max(4, round(args.context_bytes / bpt))
            )
            fields = dict(
                block_size=block,
                vocab_size=V,
                n_layer=args.n_layer,
                n_head=args.n_head,
                n_embd=args.n_embd,
                dropout=0.0,
                **arch,
            )
            meta = {
                "fields": fields,
                "optimizer": optimizer,
                "lr": args.lr,
                "muon_lr": args.muon_lr,
                "weight_decay": args.weight_decay,
                "clip": args.grad_clip,
                "seed": args.seed,
                "threads": threads,
                "batch_size": args.batch_size,
                "budget": args.budget,
                "clock": args.clock,
                "train_bytes_per_token": bpt,
                "val_bytes": val_bytes,
            }
            tag = f"config{k}"
            Path(work, f"{tag}.meta.json").write_text(json.dumps(meta))
            # the held-out tokens, after the last training token (the first target's context)
            np.savez(
                Path(work, f"{tag}.npz"),
                train=train.astype(np.uint16),
                val=np.concatenate([train[-1:], val]).astype(np.uint16),
            )
            if args.smoke:  # one process for all: a test's seconds, not clean timings
                child(argparse.Namespace(child=tag, work=work))
            else:
                command = [sys.executable, __file__, "--child", tag, "--work", work]
                subprocess.run(command, check=True)
            r = json.loads(Path(work, f"{tag}.json").read_text())
            r.update(
                config=name,
                tokenizer=label,
                vocab_size=V,
                block_size=block,
                optimizer=optimizer,
                bytes_per_token=bpt,
                val_tokens=len(val),
                load_average=os.getloadavg()[0],
            )
            rows.append(r)
            print(
                f"  {name}: {r['steps']:,} steps, val {r['val_bpb']:.4f} bits per byte "
                f"(load average {r['load_average']:.2f})",
                flush=True,
            )

    load_end = os.getloadavg()
    print(
        f"\nval bits per byte after {args.budget:g} s of training each ({args.clock} clock), "
        f"on the same "
        f"{val_bytes:,} held-out bytes; {machine}; load average at the end "
        f"{load_end[0]:.2f}\n"
    )
    print(
        "| config | tokens | block | bytes/token | params | steps | tokens/s | bytes/s | val bpb |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['config']} | {r['tokenizer']} | {r['block_size']} | "
            f"{r['bytes_per_token']:.2f} | {r['params']:,} | {r['steps']:,} | "
            f"{r['tokens_per_s']:,.0f} | {r['bytes_per_s']:,.0f} | {r['val_bpb']:.4f} |"
        )
    if out is not None:
        record = {
            "machine": machine,
            "cpu": cpu_model(),
            "threads": threads,
            "load_average": {"start": list(load_start), "end": list(load_end)},
            "config": {
                k: (str(v) if isinstance(v, Path) else v)
                for k, v in vars(args).items()
                if k not in ("child", "work", "json")
            },
            "corpus_chars": len(text),
            "val_bytes": val_bytes,
            "rows": rows,
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=1) + "\n")
        print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
