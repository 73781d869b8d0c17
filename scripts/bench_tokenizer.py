"""Time sitp's byte-level BPE beside Hugging Face ``tokenizers`` and tiktoken (section 5.1).

Usage::

    python scripts/bench_tokenizer.py             # the table, on the whole tinyshakespeare
    python scripts/bench_tokenizer.py --record    # also write the JSON and redraw the figure

On the whole corpus (tinyshakespeare through ``sitp.data``; set ``SITP_DATA_DIR`` to a
folder that holds ``tinyshakespeare.txt`` to work offline), at vocabularies
256 + {256, 512, 1024, 4096}, without special tokens:

* **training**: ``BPETokenizer.train(text, V)`` from the raw text (pre-split, counting,
  merges) beside ``tokenizers``' ``BpeTrainer(vocab_size=V)`` with the ``ByteLevel``
  pre-tokenizer (no prefix space, the 256 bytes as initial alphabet), fed the corpus's
  lines (``train_from_iterator``; it splits them on its own threads, sitp uses one).
  The two learn different merges: HF's pre-split is GPT-2's pattern, ours GPT-4's.
* **encoding**: ``encode_ordinary`` of the whole corpus, by our tokenizer with an empty
  chunk cache (a fresh object each call: what a first call costs) and warm (the same
  object again), beside ``tiktoken.Encoding`` built from our ranks, single-threaded
  ``encode_ordinary``. The ids are checked to be equal.
* **compression**: UTF-8 bytes per token, ours and HF's on its own merges.

Each time is the median of ``--runs`` rounds; in a round the two libraries run one
after the other, so that a change in the machine's load weighs on both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import tiktoken
import tokenizers
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from sitp import _target
from sitp.bench import cpu_model
from sitp.data import load_tinyshakespeare
from sitp.examples import tokenizer_figures
from sitp.tokenizers import GPT4_PATTERN, BPETokenizer

VOCAB_SIZES = (512, 768, 1280, 4352)  # 256 + {256, 512, 1024, 4096}


def hf_train(lines: list[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(lines, trainer=trainer)
    return tok


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def measure(text: str, vocab_size: int, runs: int) -> dict:
    lines = text.splitlines(keepends=True)
    num_bytes = len(text.encode("utf-8"))
    train_s, hf_s, cold_s, warm_s, tik_s = [], [], [], [], []
    for _ in range(runs):
        t, tok = timed(lambda: BPETokenizer.train(text, vocab_size))
        train_s.append(t)
        t, hf = timed(lambda: hf_train(lines, vocab_size))
        hf_s.append(t)
        enc = tiktoken.Encoding(
            name=f"sitp-{vocab_size}",
            pat_str=GPT4_PATTERN,
            mergeable_ranks=tok.mergeable_ranks(),
            special_tokens={},
        )
        fresh = BPETokenizer(tok.merges, pattern=tok.pattern)
        t, ids = timed(lambda: fresh.encode_ordinary(text))
        cold_s.append(t)
        t, _ = timed(lambda: fresh.encode_ordinary(text))
        warm_s.append(t)
        t, tik_ids = timed(lambda: enc.encode_ordinary(text))
        tik_s.append(t)
        if ids != tik_ids:
            raise AssertionError(f"vocab {vocab_size}: sitp's ids differ from tiktoken's")
    assert hf.get_vocab_size() == vocab_size == tok.vocab_size
    hf_tokens = sum(len(e.ids) for e in hf.encode_batch(lines))
    med = statistics.median
    return {
        "vocab_size": vocab_size,
        "train_s": med(train_s),
        "hf_train_s": med(hf_s),
        "encode_cold_MBps": num_bytes / med(cold_s) / 1e6,
        "encode_warm_MBps": num_bytes / med(warm_s) / 1e6,
        "tiktoken_MBps": num_bytes / med(tik_s) / 1e6,
        "bytes_per_token": num_bytes / len(ids),
        "hf_bytes_per_token": num_bytes / hf_tokens,
    }


def table(rows: list[dict]) -> str:
    head = (
        f"{'vocab':>6} | {'train s':>7} {'HF s':>6} {'ratio':>6} | {'cold MB/s':>9} "
        f"{'warm MB/s':>9} {'tiktoken':>8} {'cold/tik':>8} | {'B/token':>7} {'HF B/tok':>8}"
    )
    out = [head, "-" * len(head)]
    for r in rows:
        out.append(
            f"{r['vocab_size']:>6} | {r['train_s']:>7.3f} {r['hf_train_s']:>6.3f} "
            f"{r['train_s'] / r['hf_train_s']:>6.2f} | {r['encode_cold_MBps']:>9.2f} "
            f"{r['encode_warm_MBps']:>9.2f} {r['tiktoken_MBps']:>8.2f} "
            f"{r['encode_cold_MBps'] / r['tiktoken_MBps']:>8.2f} | "
            f"{r['bytes_per_token']:>7.3f} {r['hf_bytes_per_token']:>8.3f}"
        )
    return "\n".join(out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds per vocabulary size")
    parser.add_argument(
        "--record",
        action="store_true",
        help="write src/sitp/examples/tokenizer-bench.json and redraw the chapter's figure",
    )
    args = parser.parse_args(argv)
    text = load_tinyshakespeare()
    BPETokenizer.train(text[:10_000], 300).encode_ordinary(text[:10_000])  # compile / load
    cpu = f"{cpu_model()} ({_target.isa_name()}), {os.cpu_count()} cores"
    machine = (
        f"{cpu}; sitp on 1 thread, HF tokenizers "
        f"{tokenizers.__version__} on its own threads, tiktoken "
        f"{tiktoken.__version__} on 1"
    )
    rows = [measure(text, v, args.runs) for v in VOCAB_SIZES]
    print(f"tinyshakespeare, {len(text.encode()):,} bytes; medians of {args.runs} runs")
    print(machine)
    print(table(rows))
    if args.record:
        bench = {"cpu": cpu, "machine": machine, "runs": args.runs, "rows": rows}
        tokenizer_figures.BENCH_JSON.write_text(json.dumps(bench, indent=1) + "\n")
        curve = tokenizer_figures.compression_curve(text)
        path = tokenizer_figures.draw(
            curve, bench, tokenizer_figures.ASSETS / "tokenizer-merges.png"
        )
        print("wrote", tokenizer_figures.BENCH_JSON, "and", path)


if __name__ == "__main__":
    main()
