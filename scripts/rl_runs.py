"""Chapter 8.3's RL runs over seeds: GRPO with its clip and KL, its ablations, reward
hacking, and pass@k before and after.

For each seed, the demo's model (scripts/posttrain_demo.py: a 2-layer GPT pre-trained
on a task's plain lines, then fine-tuned on its conversations) is trained from the same
SFT weights by each RL variant, and measured by greedy held-out pass@1:

* on ``chain1``: ``grpo`` (2 updates per batch of samples, so the clip acts, and a KL
  penalty of 0.05 to the SFT model; the loss a mean over all reply tokens), the
  headline; ``grpo-seq`` (the same, each reply's mean first); ``reinforce`` (one update,
  no KL: REINFORCE with a group baseline); pass@k for k up to 64 of the SFT and the
  ``grpo`` models, from 64 samples per problem;
* on ``count``: GRPO rewarded by the strict checker and by the lenient one
  (``lenient_check``), each step recording both checkers' scores of its samples: reward
  hacking, produced; pass@k of the SFT and the strict-RL models.

    python scripts/rl_runs.py --seeds 0,1,2 --json docs/assets/part3/rl-runs.json
    python scripts/rl_runs.py --seeds 0 --small

Everything but the timings is fixed by the seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import sitp
from sitp.bench import cpu_model
from sitp.data.tokens import ByteTokenizer
from sitp.models.gpt import GPT, GPTConfig
from sitp.posttrain.chat import ChatTokenizer
from sitp.posttrain.evaluate import evaluate
from sitp.posttrain.sft import sft
from sitp.posttrain.tasks import get_task, lenient_check

sys.path.insert(0, str(Path(__file__).resolve().parent))
from posttrain_demo import clone, pretrain, report, rl_stage, write_json  # noqa: E402

KS = (1, 2, 4, 8, 16, 32, 64)
VARIANTS = {  # name: (epochs, kl, norm)
    "grpo": (2, 0.05, "token"),
    "grpo-seq": (2, 0.05, "sequence"),
    "reinforce": (1, 0.0, "token"),
}


def base_model(task, tok, seed, args):
    """The demo's SFT model of ``task`` for ``seed``, and its stages' pass@1."""
    sitp.manual_seed(seed)
    config = GPTConfig(vocab_size=tok.vocab_size, block_size=48, n_layer=2, n_head=4,
                       n_embd=64, rope=True)  # fmt: skip
    model = GPT(config)
    held = task.problems("heldout", 200, seed=0, at_most=True)
    sample = task.problems("train", 200, seed=0, at_most=True)
    max_new = max(len(tok.encode_text(task.reference(q))) for q in sample) + 1
    t0 = time.perf_counter()
    pretrain(model, tok, task, args.pretrain_steps, 32, 3e-3, seed)
    stages = [report("pretrain", model, tok, task, held, time.perf_counter() - t0, max_new)]
    t0 = time.perf_counter()
    convos = [task.conversation(p) for p in task.problems("train", 3000, seed=1, at_most=True)]
    sft(model, convos, tok, args.sft_steps, lr=3e-3, batch_size=32, seed=seed)
    stages.append(report("sft", model, tok, task, held, time.perf_counter() - t0, max_new))
    return model, held, max_new, stages


def pass_at_ks(model, tok, task, held, max_new, seed, n):
    ks = [k for k in KS if k <= n]
    out = evaluate(model, tok, task, held, n_samples=n, ks=ks, temperature=0.7,
                   max_new_tokens=max_new, generator=sitp.Generator().manual_seed(seed),
                   seed=seed)  # fmt: skip
    return {"k": ks, "pass@k": [out[f"pass@{k}"] for k in ks],
            "ci": [list(out[f"pass@{k}_ci"]) for k in ks], "correct": out["correct"]}  # fmt: skip


def run_variant(sft_model, tok, task, held, max_new, seed, args, epochs, kl, norm, reward,
                temperature):  # fmt: skip
    model = clone(sft_model)
    opts = SimpleNamespace(rl_steps=args.rl_steps, rl_lr=args.rl_lr, rl_kl=kl, rl_epochs=epochs,
                           rl_norm=norm, rl_temperature=temperature)  # fmt: skip
    t0 = time.perf_counter()
    history = rl_stage(model, tok, task, opts, max_new, seed, reward=reward)
    result = report("rl", model, tok, task, held, time.perf_counter() - t0, max_new)
    return model, {**result, "epochs": epochs, "kl_coef": kl, "norm": norm, "reward": reward,
                   "temperature": temperature, "history": history}  # fmt: skip


def run_seed(seed, args, tok):
    out = {"seed": seed}
    if "chain1" in args.parts:
        task = get_task("chain1")
        print(f"seed {seed}: chain1", flush=True)
        model, held, max_new, stages = base_model(task, tok, seed, args)
        out["chain1"] = {"stages": stages, "rl": {}}
        for name, (epochs, kl, norm) in VARIANTS.items():
            print(f"  {name}", flush=True)
            rl_model, result = run_variant(model, tok, task, held, max_new, seed, args, epochs,
                                           kl, norm, "strict", args.rl_temperature)  # fmt: skip
            out["chain1"]["rl"][name] = result
            if name == "grpo" and args.samples:
                out["chain1"]["pass_at_k"] = {
                    "sft": pass_at_ks(model, tok, task, held, max_new, seed, args.samples),
                    "grpo": pass_at_ks(rl_model, tok, task, held, max_new, seed, args.samples)}  # fmt: skip
    if "count" in args.parts:
        task = get_task("count")
        print(f"seed {seed}: count", flush=True)
        model, held, max_new, stages = base_model(task, tok, seed, args)
        budget = max_new + 6  # room for a reply longer than any right one: a list of counts
        out["count"] = {"stages": stages, "rl": {}, "temperature": args.count_temperature,
                        "lr": args.count_lr}  # fmt: skip
        for reward in ("strict", "lenient"):
            print(f"  {reward}", flush=True)
            opts = SimpleNamespace(**{**vars(args), "rl_lr": args.count_lr})
            rl_model, result = run_variant(model, tok, task, held, budget, seed, opts,
                                           *VARIANTS["grpo"], reward, args.count_temperature)  # fmt: skip
            greedy = evaluate(rl_model, tok, task, held, max_new_tokens=budget)["first_replies"]
            result["heldout_greedy"] = {
                "strict": sum(task.check(p, t) for p, t in zip(held, greedy)) / len(held),
                "lenient": sum(lenient_check(task, p, t) for p, t in zip(held, greedy)) / len(held),
                "replies": sorted(set(greedy))[:12]}  # fmt: skip
            out["count"]["rl"][reward] = result
            if reward == "strict" and args.samples:
                out["count"]["pass_at_k"] = {
                    "sft": pass_at_ks(model, tok, task, held, max_new, seed, args.samples),
                    "grpo": pass_at_ks(rl_model, tok, task, held, max_new, seed, args.samples)}  # fmt: skip
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--pretrain-steps", type=int, default=300)
    p.add_argument("--sft-steps", type=int, default=200)
    p.add_argument("--rl-steps", type=int, default=60)
    p.add_argument("--rl-lr", type=float, default=1e-4)
    p.add_argument("--rl-temperature", type=float, default=0.7)
    p.add_argument("--samples", type=int, default=64, help="samples per problem for pass@k")
    p.add_argument("--parts", default="chain1,count", help="chain1 (the variants), count")
    p.add_argument("--count-temperature", type=float, default=2.0,
                   help="sampling temperature of the count runs (exploration)")  # fmt: skip
    p.add_argument("--count-lr", type=float, default=3e-4)
    p.add_argument("--append", action="store_true", help="keep the runs already in --json")
    p.add_argument("--small", action="store_true")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()
    if args.small:
        args.pretrain_steps, args.sft_steps, args.rl_steps, args.samples = 20, 20, 3, 4
    tok = ChatTokenizer(ByteTokenizer())
    load_start = [round(x, 2) for x in os.getloadavg()]
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs", flush=True)
    runs = []
    if args.append and args.json and Path(args.json).exists():
        runs = json.loads(Path(args.json).read_text())["runs"]
    for seed in (int(s) for s in args.seeds.split(",")):
        t0 = time.perf_counter()
        runs.append(run_seed(seed, args, tok))
        runs[-1]["seconds"] = round(time.perf_counter() - t0, 1)
        if args.json:
            write_json(args.json, {
                "script": "scripts/rl_runs.py", "config": vars(args), "cpu": cpu_model(),
                "logical_cpus": os.cpu_count(), "loadavg_start": load_start,
                "loadavg_end": [round(x, 2) for x in os.getloadavg()],
                "variants": VARIANTS, "runs": runs})  # fmt: skip


if __name__ == "__main__":
    main()
