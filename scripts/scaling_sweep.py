"""Scaling laws on a CPU: GPTs of five sizes, each trained on four token budgets.

Usage::

    NUMBA_NUM_THREADS=1 python scripts/scaling_sweep.py        # the sweep, resumable
    python scripts/scaling_sweep.py --smoke --json /tmp/s.json  # seconds: a check that it runs
    NUMBA_NUM_THREADS=1 python scripts/scaling_sweep.py --tokenizer bpe   # the BPE arm

The corpus is section 5.5's synthetic language (:class:`sitp.data.synthetic.MarkovLanguage`:
an order-3 Markov chain over 32 letters whose entropy per letter is known exactly),
sampled once into 5.2's token shards in the sitp cache. Every run reads the training
shards in order from the start (:class:`~sitp.data.tokens.ShardStream`), so a run of D
tokens sees D tokens once, and a longer run sees the same tokens as a shorter one and
then more; none repeats a token. The final loss is the mean over the whole validation
shard, in windows of the training block (:func:`~sitp.data.tokens.estimate_bpb`), and
beside it the record keeps the generator's own loss on the same windows and the exact
floor of such windows (:meth:`~sitp.data.synthetic.MarkovLanguage.window_floor`).

The models are section 3.5's GPT without biases (learned positions, LayerNorm, GELU,
tied embeddings), trained with AdamW (betas 0.9/0.95, weight decay 0.1 on the
matrices, gradients clipped at norm 1), a learning rate of 3e-3 warmed up over the
first 5% of the steps and then decayed along half a cosine to a tenth at the run's last
step: each run's schedule ends where its budget does (Chinchilla's point against
reading losses off a longer run's curve). N is the non-embedding parameter count
(Kaplan et al.'s); C = 6 N D.

Each finished point is appended to the JSON (written atomically), and a second start
with the same ``--json`` skips the points already there: an interrupted sweep loses at
most the run in progress. The run order is by compute, cheapest first, so a sweep cut
short has the whole grid at the smaller budgets. One thread per run (``--threads``);
the record keeps the wall time, the process's CPU time and the load average of each
point, since on a shared machine the first two differ.

``--tokenizer bpe`` is a second arm: the same language read through 5.1's byte-level
BPE (:class:`~sitp.data.synthetic.LetterBPE`, ``--vocab-size`` ids: the 32 letters and
96 merges by default), trained on the text of the training part only, which is then
encoded into shards of its own. The same five sizes train on the same budgets in
tokens, so each point has the compute (C = 6 N D) and the number of steps of the
character run it faces, and reads more letters, about 1.5 a token. Its losses are
converted to bits per letter with the validation part's own tokens per letter
(:func:`~sitp.data.tokens.estimate_bpb`: a letter is one byte), the axis of the
character arm and of the entropy rate. It has its own record (``RECORD_BPE``).
Why 128 ids: four times the alphabet, enough merges for tokens of 1.5 letters on
average, while the tied head's 6 V d FLOPs a token, which C leaves out as it does for
the letters, stay under half of 6 N at the smallest size (256 ids would be 90%).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numba
import numpy as np

import sitp
from sitp import _target
from sitp.bench import cpu_model
from sitp.data.download import cache_dir
from sitp.data.synthetic import LanguageConfig, LetterBPE, MarkovLanguage, write_language_shards
from sitp.data.tokens import ShardStream, estimate_bpb
from sitp.models.gpt import GPT, GPTConfig
from sitp.serialization import write_atomically
from sitp.train.trainer import param_groups

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "assets" / "part3" / "scaling-sweep.json"
RECORD_BPE = ROOT / "docs" / "assets" / "part3" / "scaling-sweep-bpe.json"

# name -> (n_layer, n_head, n_embd): non-embedding parameters about 12 n_layer n_embd^2
SIZES = {
    "XS": (1, 2, 24),
    "S": (2, 2, 32),
    "M": (2, 4, 48),
    "L": (3, 4, 64),
    "XL": (4, 4, 88),
}
BUDGETS = [125_000, 375_000, 1_125_000, 3_375_000]  # tokens: a factor of 3 apart
# (size, tokens) -> how many seeds run there (one elsewhere): the middle size at every
# budget and every size at the second budget
SEEDED = {**{("M", tokens): 3 for tokens in BUDGETS}, **{(name, 375_000): 3 for name in SIZES}}

SMOKE = {
    "language": {"vocab_size": 8, "order": 2, "lag_weights": (1.0, 0.7), "seed": 0},
    "sizes": {"t1": (1, 2, 8), "t2": (1, 2, 16)},
    "budgets": [1024, 2048],
    "seeded": {("t1", 1024): 2},
    "batch_size": 4,
    "block_size": 16,
    "train_tokens": 8192,
    "val_tokens": 2048,
    "shard_size": 4096,
}
FULL = {
    "language": {},  # LanguageConfig's defaults: 32 letters, order 3
    "sizes": SIZES,
    "budgets": BUDGETS,
    "seeded": SEEDED,
    "batch_size": 32,
    "block_size": 32,
    "train_tokens": 2**22,  # 4,194,304: every budget reads fresh tokens
    "val_tokens": 2**17,  # 131,072
    "shard_size": 2**20,
}
# what the BPE arm changes: its sizes of the two parts count letters, enough for the
# largest budget in tokens at about 1.5 letters a token
BPE = {
    "smoke": {"train_tokens": 8192, "vocab_size": 16},
    "full": {"train_tokens": 2**23, "vocab_size": 128},  # and SEEDED: seeds at the same points
}


def non_embedding_params(model) -> int:
    """Parameters outside the token and position embeddings (and the head tied to them)."""
    embeddings = {id(model.transformer.wte.weight), id(model.lm_head.weight)}
    if "wpe" in model.transformer:
        embeddings.add(id(model.transformer.wpe.weight))
    return sum(p.numel() for p in model.parameters() if id(p) not in embeddings)


def lr_at(step, steps, lr, warmup_frac=0.05, min_ratio=0.1):
    """Linear warmup over the first 5% of the steps, then half a cosine to a tenth."""
    warmup = max(1, int(warmup_frac * steps))
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def make_model(shape, vocab_size, block_size):
    n_layer, n_head, n_embd = shape
    config = GPTConfig(vocab_size=vocab_size, block_size=block_size, n_layer=n_layer,
                       n_head=n_head, n_embd=n_embd, bias=False)  # fmt: skip
    return GPT(config)


def run_point(shards, shape, tokens, seed, setup, lengths_V=None) -> dict:
    """Trains one model on the first ``tokens`` training tokens; returns its record.

    ``lengths_V`` (letters per token id) adds the letters the run read.
    """
    B, T, lr = setup["batch_size"], setup["block_size"], setup["lr"]
    steps = max(1, tokens // (B * T))
    sitp.manual_seed(seed)
    model = make_model(shape, shards.vocab_size, T)
    opt = sitp.optim.AdamW(param_groups(model, 0.1), lr=lr, betas=(0.9, 0.95), eps=1e-8)
    stream = ShardStream(shards, "train", B, T, loop=False)
    losses, letters = [], 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr)
        x_BT, y_BT = next(stream)
        _, loss = model(x_BT, y_BT)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        sitp.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if lengths_V is not None:
            letters += int(lengths_V[x_BT.numpy()].sum())
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    val_loss, val_bpb = estimate_bpb(model, shards, "val", setup["eval_batch"], T)
    N = non_embedding_params(model)
    D = steps * B * T
    row = {
        "N": N,
        "params": sum(p.numel() for p in model.parameters()),
        "D": D,
        "C": 6 * N * D,
        "steps": steps,
        "seed": seed,
        "val_loss": val_loss,  # nats per token
        "val_bits": val_bpb,  # bits per letter: a letter is one byte
        "val_bpb": val_bpb,
        "train_loss": float(np.mean(losses[-max(1, steps // 20) :])),
        "wall_s": wall,
        "cpu_s": cpu,
        "load_average": os.getloadavg()[0],
    }
    if lengths_V is not None:
        row["letters"] = letters
    return row


def oracle_loss(lang, shards, batch_size, block_size) -> float:
    """The generator's own mean loss on the validation windows that the models are scored on."""
    total, count = 0.0, 0
    for x_BT, y_BT in ShardStream(shards, "val", batch_size, block_size, loop=False):
        total += lang.log_loss(x_BT.numpy(), y_BT.numpy()).sum()
        count += y_BT.numel()
    return total / count


def bpe_oracle(lang, shards, tok, batch_size, block_size) -> float:
    """The generator's own loss per letter on the validation windows of the BPE arm.

    A window of T + 1 tokens shows the letters of its tokens; the letters of its first
    token are context only, and every later letter is scored given the letters before
    it in the window (up to the chain's order), as :meth:`MarkovLanguage.log_loss`
    scores a window of letters. Nats per letter. The token edges say a little more (a
    piece is cut where the merges cut it), which this leaves out: it is the floor of a
    reader of the window's letters, not quite of a reader of its tokens.
    """
    (shard,) = shards.split("val")
    tokens_N = np.asarray(shards.open(shard), dtype=np.int64)
    ids = np.full(256, -1, np.int64)  # a letter's byte -> its id
    ids[np.frombuffer(lang.alphabet.encode("ascii"), np.uint8)] = np.arange(lang.V)
    x_L = ids[np.frombuffer(tok.decode_bytes(tokens_N), np.uint8)]
    loss_KL = lang.losses_by_context(x_L)  # row j - 1: seeing the j letters before
    first_N = np.zeros(tokens_N.size + 1, np.int64)  # token t: letters first[t]:first[t+1]
    np.cumsum(tok.lengths_V[tokens_N], out=first_N[1:])
    T = block_size
    windows = sum(batch_size for _ in ShardStream(shards, "val", batch_size, T, loop=False))
    total, count = 0.0, 0
    for w in range(windows):  # window w: tokens w T .. w T + T, as ShardStream cuts them
        start, scored, end = first_N[w * T], first_N[w * T + 1], first_N[w * T + T + 1]
        pos_S = np.arange(scored, end)
        total += loss_KL[np.minimum(pos_S - start, lang.k) - 1, pos_S].sum()
        count += end - scored
    return total / count


def plan(setup):
    """(size, tokens, seed) of every point, cheapest compute first."""
    points = []
    for name, shape in setup["sizes"].items():
        n_layer, _, n_embd = shape
        for tokens in setup["budgets"]:
            for seed in range(setup["seeded"].get((name, tokens), 1)):
                points.append((12 * n_layer * n_embd**2 * tokens, name, tokens, seed))
    return [p[1:] for p in sorted(points)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, default=None,
                   help=f"the record (default {RECORD}; with --tokenizer bpe, {RECORD_BPE})")  # fmt: skip
    p.add_argument("--smoke", action="store_true", help="a tiny language, two tiny models")
    p.add_argument("--threads", type=int, default=1, help="numba threads per run")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--data-dir", type=Path, default=None, help="where the shards go")
    p.add_argument("--max-points", type=int, default=None, help="stop after this many new points")
    p.add_argument("--tokenizer", choices=("char", "bpe"), default="char",
                   help="the letters as tokens, or 5.1's BPE trained on the training text")  # fmt: skip
    p.add_argument("--vocab-size", type=int, default=None,
                   help="bpe: letters + merges (default 128; 16 with --smoke)")  # fmt: skip
    args = p.parse_args(argv)
    bpe = args.tokenizer == "bpe"
    setup = dict(SMOKE if args.smoke else FULL)
    setup.update(lr=args.lr, eval_batch=8 if args.smoke else 64)
    if bpe:
        setup.update(BPE["smoke" if args.smoke else "full"])
        setup["vocab_size"] = args.vocab_size or setup["vocab_size"]
    elif args.vocab_size is not None:
        p.error("--vocab-size is for --tokenizer bpe")
    out = args.json or (None if args.smoke else RECORD_BPE if bpe else RECORD)
    if out is None:
        p.error("--smoke writes only where --json says")
    numba.set_num_threads(args.threads)

    lang = MarkovLanguage(LanguageConfig(**setup["language"]))
    arm = f"-bpe{setup['vocab_size']}" if bpe else ""
    data_dir = args.data_dir or cache_dir() / "tokens" / f"markov-{lang.fingerprint()}{arm}"
    t0 = time.perf_counter()
    tok = None
    if bpe:  # trained on the letters of the training part only (seed 0's runs of the chain)
        text = "\n".join(lang.documents(setup["train_tokens"], seed=0))
        tok = LetterBPE.train(text, lang.alphabet, setup["vocab_size"])
    shards = write_language_shards(lang, data_dir, setup["train_tokens"], setup["val_tokens"],
                                   shard_size=setup["shard_size"], tokenizer=tok)  # fmt: skip
    print(f"{shards} ({'reused' if shards.reused else 'written'} in "
          f"{time.perf_counter() - t0:.1f} s)", flush=True)  # fmt: skip
    T = setup["block_size"]
    H = lang.block_entropies()
    source = {
        "config": {
            k: list(v) if isinstance(v, tuple) else v for k, v in vars(lang.config).items()
        },  # fmt: skip
        "fingerprint": lang.fingerprint(),
        "entropy_rate": lang.entropy_rate(),
        "block_entropies": H,
    }
    if bpe:
        source["tokenizer"] = {
            "name": tok.name,
            "vocab_size": tok.vocab_size,
            "letters": lang.V,
            "pattern": tok.bpe.pattern,
            "merges": [tok.decode([i]) for i in range(lang.V, tok.vocab_size)],
            "train_letters_per_token": shards.num_bytes("train") / shards.num_tokens("train"),
            "val_letters_per_token": shards.num_bytes("val") / shards.num_tokens("val"),
        }
        source["val_oracle_letter_loss"] = bpe_oracle(lang, shards, tok, setup["eval_batch"], T)
        source["train_letters"] = shards.num_bytes("train")
        source["val_letters"] = shards.num_bytes("val")
    else:
        source["window_floor"] = lang.window_floor(T)
        source["val_oracle_loss"] = oracle_loss(lang, shards, setup["eval_batch"], T)
    source["train_tokens"] = shards.num_tokens("train")
    source["val_tokens"] = shards.num_tokens("val")
    train = {k: setup[k] for k in ("batch_size", "block_size", "lr", "eval_batch")}
    train.update(optimizer="AdamW(betas=(0.9, 0.95), weight_decay=0.1 on matrices)",
                 schedule="5% linear warmup, cosine to 0.1 lr at the last step",
                 clip=1.0, model="GPTConfig(bias=False): learned positions, LayerNorm, "
                 "GELU, tied embeddings")  # fmt: skip
    machine = (f"{cpu_model()} ({_target.isa_name()}), {os.cpu_count()} logical CPUs; "
               f"numba {args.threads} thread(s) per run; sitp {sitp.__version__}")  # fmt: skip
    command = "python scripts/scaling_sweep.py"
    command += f" --tokenizer bpe --vocab-size {setup['vocab_size']}" if bpe else ""
    record = {
        "command": command + (" --smoke" if args.smoke else ""),
        "machine": machine,
        "cpu": cpu_model(),
        "source": source,
        "train": train,
        "sizes": {
            k: {"n_layer": v[0], "n_head": v[1], "n_embd": v[2]} for k, v in setup["sizes"].items()
        },  # fmt: skip
        "points": [],
    }
    if out.exists():  # resume: keep the points of the same sweep
        old = json.loads(out.read_text())
        same = (old.get("source", {}).get("fingerprint") == source["fingerprint"]
                and old["source"].get("tokenizer") == source.get("tokenizer")
                and old.get("train") == train and old.get("sizes") == record["sizes"])  # fmt: skip
        if not same:
            print(f"{out} holds another sweep (language, tokenizer, training or sizes differ); "
                  f"move it away or pass another --json", file=sys.stderr)  # fmt: skip
            return 2
        record["points"] = old["points"]
    done = {(r["size"], r["tokens"], r["seed"]) for r in record["points"]}
    print(f"language: V={lang.V}, order {lang.k}; entropy rate {source['entropy_rate']:.4f} "
          f"nats/letter", flush=True)  # fmt: skip
    if bpe:
        print(f"{tok}: {source['tokenizer']['val_letters_per_token']:.3f} letters a token "
              f"(validation); the generator's loss per letter on the validation windows "
              f"{source['val_oracle_letter_loss']:.4f} nats", flush=True)  # fmt: skip
    else:
        print(f"floor of windows of {T}: {source['window_floor']:.4f}; generator's loss on the "
              f"validation windows {source['val_oracle_loss']:.4f}", flush=True)  # fmt: skip
    print(f"machine: {machine}; {len(done)} points already recorded", flush=True)
    new = 0
    for name, tokens, seed in plan(setup):
        if (name, tokens, seed) in done:
            continue
        if args.max_points is not None and new >= args.max_points:
            break
        row = run_point(shards, setup["sizes"][name], tokens, seed, setup,
                        tok.lengths_V if bpe else None)  # fmt: skip
        row.update(size=name, tokens=tokens)
        record["points"].append(row)
        write_atomically(out, (json.dumps(record, indent=1) + "\n").encode())
        new += 1
        print(f"  {name:>3} N={row['N']:>7,} D={row['D']:>9,} seed {seed}: val "
              f"{row['val_loss']:.4f} nats/token ({row['val_bits']:.4f} bits/letter), "
              f"{row['steps']} steps, "
              f"{row['wall_s']:.1f} s wall / {row['cpu_s']:.1f} s CPU, "
              f"load {row['load_average']:.2f}", flush=True)  # fmt: skip
    print(f"wrote {out}: {len(record['points'])} points ({new} new)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
