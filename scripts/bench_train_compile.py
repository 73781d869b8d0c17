"""The training step of ``sitp train``, eager against ``--compile``, through sitp.bench.ab.

Usage::

    python scripts/bench_train_compile.py [--threads 1,2] [--rounds 5] [--calls 10]
        [--models gpt,gru,rnn,wavenet] [--torch] [--torch-compile] [--json PATH] [--smoke]

The anchor is nanoGPT's CPU recipe for shakespeare_char: a GPT of 4 layers, 4 heads,
width 128, block 64, batch 12, no dropout, on the characters of tinyshakespeare (65
tokens). One call is one step of :class:`sitp.train.trainer.Trainer`, exactly what
``python -m sitp train`` runs: draw a batch, zero the gradients, forward, loss,
backward, AdamW step, schedule step; with ``compile`` the forward and backward are the
trainer's :func:`~sitp.train.trainer.grad_step` through :func:`sitp.compile`. The ladder
models of chapter 3 (the RNN and GRU of 3.4 and the WaveNet-style CNN of 3.3) are timed
the same way on names, at ``sitp train``'s defaults (batch 32), so that the compiler's
effect on models it has no lowering for is measured too.

``--torch`` adds PyTorch eager on the same GPT (the same model file through
sitp.models.port, the same AdamW groups, a random batch of the same shape each step),
``--torch-compile`` torch.compile of that model (inductor), in a worker of their own.

Every arm is warmed by three untimed calls (for a compiled arm, the trace, the passes
and numba's or inductor's compilation; their seconds are reported apart); then the arms
take turns, ``--rounds`` rounds of ``--calls`` calls, at each thread count in
``--threads``, pinned to the same cores (sitp.bench.ab). The JSON holds, per model and
thread count, each arm's median and range over the rounds, the ratios per round with
their range, the compiled graph's report (ops, steps, lowered nodes, generated
kernels), the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os

ANCHOR = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64, "dropout": 0.0}
BATCH = {"gpt": 12, "rnn": 32, "gru": 32, "wavenet": 32}
SMOKE = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "dropout": 0.0}


def make_trainer(model: str, smoke: bool, compile: bool, prefix: str):
    """A Trainer of ``model`` as ``sitp train`` makes one, in a new temporary directory: the
    anchor GPT on tinyshakespeare's characters, a ladder model on names (tiny with
    ``smoke``). This script's workers, bench_remat.py's and bench_tune.py's use it."""
    import tempfile  # late: only a worker builds a run

    from sitp.train.trainer import TrainConfig, Trainer  # late: the worker's library

    out = tempfile.mkdtemp(prefix=prefix)
    batch = 4 if smoke else BATCH[model]
    common = dict(steps=10**6, batch_size=batch, compile=compile, seed=0)
    if model == "gpt":
        cfg = TrainConfig(model="gpt", data="shakespeare", tokenizer="char", **common)
        return Trainer(cfg, out, SMOKE if smoke else ANCHOR)
    overrides = {"n_embd": 8, "n_embd2": 16} if smoke and model != "wavenet" else {}
    return Trainer(TrainConfig(model=model, data="offline", **common), out, overrides)


def sitp_workload(model: str, mode: str, smoke: bool = False):
    """One step of a Trainer: ``mode`` "eager" or "compiled" (``--compile``)."""
    import sitp  # late: the sitp worker's library

    trainer = make_trainer(model, smoke, mode == "compiled", "bench-train-compile-")
    batch = 4 if smoke else BATCH[model]  # as make_trainer chose
    sitp.manual_seed(0)

    def call():
        return trainer.train_step()

    def info():
        d = {"params": sum(p.numel() for p in trainer.model.parameters()), "batch": batch}
        if trainer.compiled is not None:
            e = trainer.compiled.entries
            d["signatures"] = len(e)
            d["compiled"] = all(x.program is not None for x in e)
            d["report"] = e[0].report if e else {}
            d["reasons"] = [str(b) for x in e for b in x.breaks] + [x.reason for x in e if x.reason]
        return d

    call.info = info
    return call


def torch_workload(mode: str, smoke: bool = False):
    """The anchor GPT in PyTorch: the same model file, AdamW groups and batch shape."""
    import torch  # late: the torch worker's library

    from sitp.models.port import load_module  # late: the model file for torch

    gpt = load_module("gpt", "torch")
    torch.manual_seed(0)
    cfg = gpt.GPTConfig(vocab_size=65, **(SMOKE if smoke else ANCHOR))
    model = gpt.GPT(cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.01},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99), eps=1e-8)
    net = torch.compile(model) if mode == "compiled" else model
    B, T = (4 if smoke else BATCH["gpt"]), cfg.block_size
    gen = torch.Generator().manual_seed(0)

    def call():
        x = torch.randint(0, 65, (B, T), generator=gen)
        y = torch.randint(0, 65, (B, T), generator=gen)
        opt.zero_grad(set_to_none=True)
        _, loss = net(x, y)
        loss.backward()
        opt.step()
        return loss.item()

    return call


def workload(lib: str, model: str, mode: str, smoke: bool = False):
    if lib == "torch":
        return torch_workload(mode, smoke)
    return sitp_workload(model, mode, smoke)


def measure(args, threads: int) -> dict:
    from sitp.bench import ab  # late: the workers import this file

    here = f"{os.path.abspath(__file__)}:workload"
    names = ["sitp"] + (["torch"] if args.torch or args.torch_compile else [])
    env = {"torch": {"SITP_MALLOC_TUNING": "0"}}
    out = {}
    with ab.workers(names, threads=threads, env=env) as w:
        for model in args.models:
            arms = {
                mode: ab.Arm(w["sitp"], here, dict(lib="sitp", model=model, mode=mode,
                                                    smoke=args.smoke), warmup=3)
                for mode in ("eager", "compiled")
            }  # fmt: skip
            if model == "gpt" and args.torch:
                arms["torch"] = ab.Arm(w["torch"], here, dict(lib="torch", model=model,
                                       mode="eager", smoke=args.smoke), warmup=3)  # fmt: skip
            if model == "gpt" and args.torch_compile:
                arms["torch.compile"] = ab.Arm(w["torch"], here, dict(lib="torch", model=model,
                                               mode="compiled", smoke=args.smoke), warmup=3)  # fmt: skip
            ratios = [("eager", "compiled")] + [
                ("compiled", t) for t in ("torch", "torch.compile") if t in arms
            ]
            res = ab.compare(
                arms, rounds=args.rounds, calls=args.calls, ratios=ratios, clock=args.clock
            )
            print(f"{model}, {threads} thread(s):\n{ab.table(res)}\n", flush=True)
            out[model] = res
    return out


def parser(description: str, threads: str, models: str) -> argparse.ArgumentParser:
    """The options of the training-step benchmarks (this script and bench_remat.py)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument(
        "--threads", default=threads, help=f"thread counts, comma-separated ({threads})"
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=10, help="steps per arm in each round (10)")
    ap.add_argument("--models", default=models)
    ap.add_argument(
        "--cpu-time",
        action="store_true",
        help="time each call by its worker's CPU seconds, not the wall clock (on a machine "
        "other jobs share; on several threads this adds the threads' seconds up)",
    )
    ap.add_argument("--json", metavar="PATH", help="write the results here (atomically)")
    ap.add_argument("--smoke", action="store_true", help="tiny models: seconds, for the tests")
    return ap


def run(ap, argv, what: str, batch: dict, anchor: dict, measure) -> int:
    """Parse ``argv``, time ``measure(args, threads)`` at each thread count, write the record."""
    args = ap.parse_args(argv)
    args.models = args.models.split(",")
    args.clock = "cpu" if args.cpu_time else "wall"
    for m in args.models:
        if m not in batch:
            ap.error(f"--models: no model {m!r}; choose among {', '.join(batch)}")
    record = {
        "what": what,
        "anchor": {**anchor, "batch_size": batch["gpt"], "vocab_size": 65},
        "batch": batch,
        "smoke": args.smoke,
        "clock": args.clock,
        "runs": {},
    }
    for t in (int(v) for v in args.threads.split(",")):
        record["runs"][str(t)] = measure(args, t)
    if args.json:
        from sitp.serialization import write_atomically

        write_atomically(args.json, (json.dumps(record, indent=1) + "\n").encode())
    return 0


def main(argv=None) -> int:
    ap = parser(__doc__.splitlines()[0], "1,2", "gpt,gru,rnn,wavenet")
    ap.add_argument("--torch", action="store_true", help="add PyTorch eager (the GPT)")
    ap.add_argument("--torch-compile", action="store_true", help="add torch.compile (the GPT)")
    what = (
        "one Trainer.train_step (batch, zero_grad, forward, backward, AdamW, "
        "schedule), eager against --compile; torch: the same GPT, AdamW and batch shape"
    )
    return run(ap, argv, what, BATCH, ANCHOR, measure)


if __name__ == "__main__":
    raise SystemExit(main())
