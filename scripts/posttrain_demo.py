"""Chapter 8's pipeline in a few minutes on a CPU: pretrain -> SFT -> RL, pass@1 at each stage.

A tiny GPT (byte tokens plus the five chat tokens) is pre-trained on plain text
lines of a task ("What is 3+4+5? 3+4=7, 7+5=12. Answer: 12"), fine-tuned on the same task's train
problems as conversations (loss on the assistant's tokens only), then trained with
GRPO rewarded by the task's checker (two updates per batch of samples, so the clip acts,
and a KL penalty to the SFT model: ``--rl-epochs 1 --rl-kl 0`` is REINFORCE with a group
baseline). After each stage it prints held-out pass@1
(greedy, Wilson 95 % interval), so the effect of each stage is measured on
problems no stage trained on.

    python scripts/posttrain_demo.py                 # chain1, the default sizes
    python scripts/posttrain_demo.py --task addition2 --block-size 32 --save runs/pt
    python scripts/posttrain_demo.py --json src/sitp/examples/posttrain-demo.json
    python scripts/posttrain_demo.py --seeds 0 1 2 3 4 \
        --json src/sitp/examples/posttrain-demo-seeds.json   # one record per seed, mean, sd

The figures vary with the machine's speed only in their timings; the numbers are
fixed by the seeds.
"""

import argparse
import json
import os
import random
import time
from pathlib import Path

import numpy as np

import sitp
from sitp.bench import cpu_model
from sitp.data.tokens import ByteTokenizer
from sitp.models.gpt import GPT, GPTConfig
from sitp.posttrain.chat import ChatTokenizer, completion_text, render_prompt
from sitp.posttrain.cli import save
from sitp.posttrain.evaluate import evaluate
from sitp.posttrain.rl import grpo_step
from sitp.posttrain.sft import sft
from sitp.posttrain.tasks import get_task, lenient_check


def pretrain(model, tok, task, steps, batch_size, lr, seed):
    """Next-token training on plain lines "question answer\\n", random windows."""
    rng = random.Random(seed)
    lines = [
        f"{task.prompt(p)} {task.reference(p)}\n"
        for p in task.problems("train", 5000, at_most=True)
    ]
    T = model.block_size
    stream = []
    while len(stream) < 200_000:
        stream += tok.encode_text(lines[rng.randrange(len(lines))])
    data = np.asarray(stream, dtype=np.int64)
    opt = sitp.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for step in range(steps):
        starts = [rng.randrange(len(data) - T - 1) for _ in range(batch_size)]
        x = sitp.tensor(np.stack([data[s : s + T] for s in starts]))
        y = sitp.tensor(np.stack([data[s + 1 : s + T + 1] for s in starts]))
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"  pretrain step {step}: loss {loss.item():.4f}", flush=True)
    model.eval()


def clone(model):
    """A new GPT with ``model``'s config and a copy of its weights (a frozen reference)."""
    twin = GPT(model.config)
    twin.load_state_dict({k: sitp.tensor(v.detach().numpy().copy())
                          for k, v in model.state_dict().items()})  # fmt: skip
    return twin.eval()


def rl_stage(model, tok, task, args, max_new, seed, reward="strict", on_step=None):
    """``args.rl_steps`` GRPO steps from ``model`` (the SFT model, kept as the KL's
    reference), 8 train prompts x 8 replies a step; returns each step's statistics.

    ``reward="strict"`` rewards the task's checker, ``"lenient"`` the too-lenient
    :func:`~sitp.posttrain.tasks.lenient_check`; each step records both checkers' mean
    over its samples (``strict``, ``lenient``) whichever one is rewarded.
    """
    train = task.problems("train", 5000, seed=2, at_most=True)
    ref = clone(model) if args.rl_kl > 0 else None
    opt = sitp.optim.AdamW(model.parameters(), lr=args.rl_lr)
    gen = sitp.Generator().manual_seed(seed)
    history = []
    for step in range(args.rl_steps):
        batch = [train[(step * 8 + i) % len(train)] for i in range(8)]
        prompts = [render_prompt([{"role": "user", "content": task.prompt(q)}], tok)
                   for q in batch]  # fmt: skip
        seen = {}

        def rewards(rows, replies, batch=batch, seen=seen):
            texts = [completion_text(r, tok) for r in replies]
            strict = [float(task.check(batch[i], t)) for i, t in zip(rows, texts)]
            loose = [float(lenient_check(task, batch[i], t)) for i, t in zip(rows, texts)]
            seen.update(strict=float(np.mean(strict)), lenient=float(np.mean(loose)),
                        chars=float(np.mean([len(t) for t in texts])))  # fmt: skip
            return strict if reward == "strict" else loose

        stats = grpo_step(model, opt, prompts, group_size=8, max_new_tokens=max_new,
                          temperature=args.rl_temperature, kl_coef=args.rl_kl, ref_model=ref,
                          epochs=args.rl_epochs, stop_ids=(tok.assistant_end,), generator=gen,
                          norm=args.rl_norm, reward_batch=rewards)  # fmt: skip
        history.append({**stats, **seen})
        if on_step is not None:
            on_step(step, history[-1])
        if step % 10 == 0 or step == args.rl_steps - 1:
            print(f"  rl step {step}: reward {stats['reward']:.3f}, clip {stats['clip_frac']:.3f}, "
                  f"kl {stats['kl']:.4f}, entropy {stats['entropy']:.3f}, "
                  f"{stats['zero_groups']} of 8 groups all-equal", flush=True)  # fmt: skip
    model.eval()
    return history


def keep(args, stage, model, tok):
    """The stage's checkpoint in DIR/<stage>, for ``sitp eval``, ``sft``, ``rl``, ``chat``."""
    if args.save:
        opt = sitp.optim.AdamW(model.parameters())
        save(Path(args.save) / stage, model, opt, tok, None, {"stage": stage, "step": 0,
                                                             "history": []})  # fmt: skip


def report(stage, model, tok, task, problems, seconds, max_new):
    out = evaluate(model, tok, task, problems, max_new_tokens=max_new)
    lo, hi = out["pass@1_ci"]
    print(f"{stage:>8}: pass@1 {out['pass@1']:.3f} (95% Wilson {lo:.3f}-{hi:.3f}) on "
          f"{len(problems)} held-out {task.name} problems; stage took {seconds:.0f} s; "
          f"first reply {out['first_replies'][0]!r}", flush=True)  # fmt: skip
    return {"stage": stage, "pass@1": out["pass@1"], "pass@1_ci": [lo, hi],
            "n": len(problems), "seconds": round(seconds, 1),
            "first_reply": out["first_replies"][0]}  # fmt: skip


def write_json(path, record):
    """The record written atomically: a temporary file beside PATH, then renamed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, path)


def run_seed(args, seed):
    """The pipeline from ``seed``: the record ``--json`` writes for one seed."""
    task = get_task(args.task)
    load_start = [round(x, 2) for x in os.getloadavg()]
    tok = ChatTokenizer(ByteTokenizer())
    sitp.manual_seed(seed)
    config = GPTConfig(vocab_size=tok.vocab_size, block_size=args.block_size, n_layer=2, n_head=4,
                       n_embd=64, rope=True)  # fmt: skip
    model = GPT(config)
    params = sum(p.numel() for p in model.parameters())
    print(f"CPU: {cpu_model()}; GPT {config.n_layer} layers, n_embd {config.n_embd}, "
          f"block {config.block_size}, {params:,} parameters; task {task.name}; seed {seed}")  # fmt: skip
    held = task.problems("heldout", args.heldout, seed=0, at_most=True)
    sample = task.problems("train", 200, seed=0, at_most=True)
    max_new = max(len(tok.encode_text(task.reference(q))) for q in sample) + 1  # and the end
    stages = [report("base", model, tok, task, held, 0, max_new)]

    t0 = time.perf_counter()
    pretrain(model, tok, task, args.pretrain_steps, 32, 3e-3, seed)
    stages.append(report("pretrain", model, tok, task, held, time.perf_counter() - t0, max_new))
    keep(args, "pretrain", model, tok)

    t0 = time.perf_counter()
    convos = [task.conversation(p) for p in task.problems("train", 3000, seed=1, at_most=True)]
    losses = sft(model, convos, tok, args.sft_steps, lr=args.sft_lr, batch_size=32, seed=seed)
    print(f"  sft loss {np.mean(losses[:10]):.4f} (first 10 steps) -> "
          f"{np.mean(losses[-10:]):.4f} (last 10)")  # fmt: skip
    stages.append(report("sft", model, tok, task, held, time.perf_counter() - t0, max_new))
    keep(args, "sft", model, tok)

    t0 = time.perf_counter()
    history = rl_stage(model, tok, task, args, max_new, seed)
    rewards = [h["reward"] for h in history]
    if rewards:
        print(f"  rl mean reward: first 10 steps {np.mean(rewards[:10]):.3f}, "
              f"last 10 {np.mean(rewards[-10:]):.3f}")  # fmt: skip
    stages.append(report("rl", model, tok, task, held, time.perf_counter() - t0, max_new))
    keep(args, "rl", model, tok)
    settings = {k: v for k, v in vars(args).items() if k != "seeds"}
    return {
        "script": "scripts/posttrain_demo.py",
        "config": {**settings, "seed": seed, "n_layer": config.n_layer,
                   "n_head": config.n_head, "n_embd": config.n_embd, "parameters": params,
                   "rope": True, "pretrain_batch": 32, "pretrain_lr": 3e-3, "sft_batch": 32,
                   "rl_prompts_per_step": 8, "rl_group_size": 8, "max_new_tokens": max_new},
        "cpu": cpu_model(),
        "loadavg_start": load_start,
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "stages": stages,
        "sft_loss": {"first10": float(np.mean(losses[:10])),
                     "last10": float(np.mean(losses[-10:]))},
        "rl_reward": [float(r) for r in rewards],
        "rl_history": history,
    }  # fmt: skip


def over_seeds(runs):
    """Each stage's held-out pass@1 over the runs: every seed's value, their mean and sd."""
    summary = {}
    for i, stage in enumerate(r["stage"] for r in runs[0]["stages"]):
        values = [r["stages"][i]["pass@1"] for r in runs]
        summary[stage] = {
            "values": values,
            "mean": float(np.mean(values)),
            "sd": float(np.std(values, ddof=1)) if len(values) > 1 else None,
        }
    return summary


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="chain1")
    p.add_argument("--pretrain-steps", type=int, default=300)
    p.add_argument("--sft-steps", type=int, default=200)
    p.add_argument("--rl-steps", type=int, default=60)
    p.add_argument("--heldout", type=int, default=200)
    p.add_argument("--sft-lr", type=float, default=3e-3)
    p.add_argument("--rl-lr", type=float, default=1e-4)
    p.add_argument("--rl-temperature", type=float, default=0.7)
    p.add_argument("--rl-epochs", type=int, default=2, help="updates per batch of samples")
    p.add_argument("--rl-kl", type=float, default=0.05, help="KL coefficient to the SFT model")
    p.add_argument("--rl-norm", default="token", choices=("token", "sequence"),
                   help="the loss's mean: over all reply tokens, or per reply")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, nargs="+", metavar="SEED",
                   help="run the pipeline once per seed; --json then holds every run and "
                        "each stage's mean and sd over them")  # fmt: skip
    p.add_argument("--block-size", type=int, default=48)
    p.add_argument("--save", metavar="DIR", help="write each stage's checkpoint to DIR/<stage>")
    p.add_argument("--json", metavar="PATH", help="write config, CPU, stages and rewards to PATH")
    args = p.parse_args()
    if not args.seeds:
        record = run_seed(args, args.seed)
        if args.json:
            write_json(args.json, record)
            print(f"wrote {args.json}")
        return
    runs = []
    for seed in args.seeds:
        t0 = time.perf_counter()
        runs.append(run_seed(args, seed) | {"wall_seconds": round(time.perf_counter() - t0, 1)})
        summary = over_seeds(runs)
        print("after seed", seed, "; ".join(
            f"{k} {v['mean']:.3f}" + (f" +- {v['sd']:.3f}" if v["sd"] is not None else "")
            for k, v in summary.items()))  # fmt: skip
        if args.json:  # after every seed, so that an interrupted run keeps what it did
            write_json(args.json, {"script": "scripts/posttrain_demo.py",
                                   "seeds": [r["config"]["seed"] for r in runs],
                                   "summary": summary, "runs": runs})  # fmt: skip
    if args.json:
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
