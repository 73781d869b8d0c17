"""Where a cached decode step's time goes in sitp (section 5.4), by class of operation.

Usage::

    python scripts/profile_decode.py --json docs/assets/part3/kv-cache-profile.json
    python scripts/profile_decode.py --steps 20          # a quick look

The model is bench_kv_cache.py's (section 5.3's modern GPT, 4 layers, width 128, block
256, random weights), on one thread, pinned to one core. A prompt fills the cache to
``--context`` positions; each step feeds one token there (the cache set back each time,
as the benchmark's step is) and draws the next one with top-k 10.

cProfile records, for every function, the time spent inside it when called from each
caller. Every call that the model files (``models/gpt.py``, ``models/engine.py``) make
into the library is one *operation*; its time, callees included, goes to its class
(matrix products, attention, norms, elementwise arithmetic, views and indexing, the cache
writes, sampling, module calls). What the model files' own lines take is the model's
Python. cProfile slows every Python call, so the absolute times are larger than an
unprofiled step's; the shares are the result, and the unprofiled step's time, measured
first, is recorded beside them.
"""

from __future__ import annotations

import argparse
import collections
import json
import linecache
import os
import statistics
import sys
import threading
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")  # before sitp: one thread

import numpy as np  # noqa: E402

import sitp  # noqa: E402
from sitp.bench import ab  # noqa: E402
from sitp.models.engine import sample_next, transpose_weights  # noqa: E402
from sitp.models.gpt import GPT, GPTConfig  # noqa: E402
from sitp.serialization import write_atomically  # noqa: E402

CONFIG = dict(
    block_size=256, vocab_size=65, n_layer=4, n_head=4, n_embd=128, rope=True, norm="rmsnorm",
    norm_params=False, qk_norm=True, mlp="relu2", bias=False, tie_weights=False,
    logit_softcap=15.0,
)  # fmt: skip

MODEL_FILES = ("models/gpt.py", "models/engine.py")

#: (class, function of a model file, words of its line): the innermost model-file frame
#: of a sample decides its class; the first row that matches wins.
CLASSES = [
    ("rotary embeddings", "apply_rotary", ""),
    ("cache writes and reads", "update", ""),
    ("sampling (top-k, softmax, draw)", "sampling_probs", ""),
    ("sampling (top-k, softmax, draw)", "sample_next", ""),
    ("matrix products (Linear)", "", "c_attn(|c_proj(|c_fc(|lm_head("),
    ("attention (SDPA)", "", "scaled_dot_product_attention"),
    ("norms (RMSNorm, QK-norm)", "", "ln_1(|ln_2(|ln_f(|rms_norm("),
    ("views (split, view, transpose)", "", ".split(|.view(|.transpose(|.reshape(|contiguous("),
    ("elementwise (residual adds, ReLU², soft-cap)", "", " + |relu(|tanh("),
    ("embedding", "", "wte("),
    ("masks and positions", "", "causal_mask|arange|rope_cos"),
]


def classify(func: str, line: str) -> str:
    for label, fn, words in CLASSES:
        if (fn and func == fn) or (words and any(w in line for w in words.split("|"))):
            return label
    return "the rest of the model's lines"


def build(seed=0):
    sitp.manual_seed(seed)
    return GPT(GPTConfig(**CONFIG)).eval()


def step_fn(model, L, batch=1):
    seq = sitp.tensor(np.random.default_rng(L).integers(0, 65, (batch, L + 1)))
    cache = model.make_kv_cache(batch)
    with sitp.no_grad():
        model(seq[:, :L], kv_cache=cache)

    def step():
        cache.pos = L
        with sitp.no_grad():
            logits = model(seq[:, L:], kv_cache=cache)[0][:, -1, :]
            sample_next(logits, top_k=10)

    return step


def profile(step, steps, interval=2e-4):
    """Shares of the step's time by class, from samples of where the step is.

    A thread wakes every ``interval`` seconds and looks at the main thread's stack: the
    innermost frame in a model file says which operation of the model (or the engine) is
    running, whatever library code or kernel runs below it. The main thread hands over
    the interpreter at its next bytecode after a request (``sys.setswitchinterval``), so a
    kernel's time is charged to the line that called it.
    """
    main = threading.main_thread().ident
    counts = collections.Counter()
    stop = threading.Event()

    def sampler():
        while not stop.is_set():
            time.sleep(interval)
            f = sys._current_frames().get(main)
            while f is not None and not f.f_code.co_filename.endswith(MODEL_FILES):
                f = f.f_back
            if f is None:
                counts[("(outside the model)", "")] += 1
                continue
            line = linecache.getline(f.f_code.co_filename, f.f_lineno)
            counts[(f.f_code.co_name, line)] += 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    thread = threading.Thread(target=sampler, daemon=True)
    t0 = time.process_time()
    thread.start()
    for _ in range(steps):
        step()
    stop.set()
    thread.join()
    seconds = time.process_time() - t0
    sys.setswitchinterval(old)
    by_class, lines = collections.Counter(), collections.Counter()
    for (func, line), n in counts.items():
        by_class[classify(func, line)] += n
        lines[f"{func}: {line.strip()}"] += n
    total = sum(by_class.values())
    rows = [{"class": k, "share": v / total, "samples": v} for k, v in by_class.most_common()]
    top = [{"line": k, "share": v / total} for k, v in lines.most_common(12)]
    return rows, top, total, seconds / steps


def unprofiled(step, steps):
    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        t = time.process_time()
        step()
        times.append(time.process_time() - t)
    return statistics.median(times)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--context", type=int, default=255)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--json")
    args = p.parse_args(argv)
    cores = ab.default_cores(1)
    if cores is not None:
        os.sched_setaffinity(0, cores)
    before = (ab.loadavg(), ab.proc_stat())
    t0 = time.process_time()
    res = {"config": CONFIG, "args": vars(args), "layouts": {}}
    for layout in ("as trained", "weights transposed"):
        model = build()
        if layout == "weights transposed":
            transpose_weights(model)
        step = step_fn(model, args.context, args.batch)
        step_s = unprofiled(step, args.steps)
        rows, top, samples, sampled_s = profile(step, args.steps)
        res["layouts"][layout] = {"step_s": step_s, "sampled_step_s": sampled_s,
                                  "samples": samples, "rows": rows, "top_lines": top}  # fmt: skip
        print(f"\n{layout}: a decode step at context {args.context}, batch {args.batch}: "
              f"{1e3 * step_s:.2f} ms (median of {args.steps}; {1e3 * sampled_s:.2f} ms while "
              f"sampled, {samples} samples)")  # fmt: skip
        for r in rows:
            print(f"  {r['class']:46s} {r['share']:6.1%}")
        print("  the busiest lines:")
        for r in top[:8]:
            print(f"  {r['share']:6.1%}  {r['line'][:90]}")
    after = (ab.loadavg(), ab.proc_stat())
    res.update(machine=ab.machine(), threads=1, cores=cores)
    res["load"] = {"loadavg_before": before[0], "loadavg_after": after[0],
                   **ab.load_shares(before[1], after[1], time.process_time() - t0)}  # fmt: skip
    print(ab.load_line(res))
    if args.json:
        write_atomically(args.json, (json.dumps(res, indent=1) + "\n").encode())
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
