"""Chapter 8.4's runs: preferences from a hidden judge, a reward model, DPO, and RL on it.

For each seed, on ``chain1``:

1. pre-train a tiny GPT on the task's plain lines and fine-tune it on conversations
   whose replies come in random styles (``sitp.posttrain.prefs.styled``): the SFT model;
2. sample two replies to each train problem from the SFT model and let the judge's
   Bradley–Terry annotator (``label_pairs``) choose one: the preference pairs;
3. fit a reward model (the SFT model with a scalar head) to the pairs;
4. fit a copy of the SFT model to the same pairs by DPO;
5. run GRPO from the SFT model, rewarded by the reward model, measuring on held-out
   prompts every few steps the reward model's score and the judge's (the
   over-optimisation curve);
6. judge each policy against the SFT model on the held-out prompts: one sampled reply
   each per prompt and round, the judge's win rate with its Wilson interval.

    python scripts/preferences.py --seeds 0,1,2 --json docs/assets/part3/preferences.json
    python scripts/preferences.py --seeds 0 --small          # a one-minute look

Everything but the timings is fixed by the seeds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

import sitp
from sitp.bench import cpu_model
from sitp.data.tokens import ByteTokenizer
from sitp.models.gpt import GPT, GPTConfig
from sitp.posttrain import prefs
from sitp.posttrain.chat import ChatTokenizer, completion_text
from sitp.posttrain.dpo import train_dpo
from sitp.posttrain.reward import RewardModel, batch_scores, pair_accuracy, train_reward_model
from sitp.posttrain.rl import greedy_replies, grpo_step, sample_replies
from sitp.posttrain.sft import sft
from sitp.posttrain.tasks import get_task

sys.path.insert(0, str(Path(__file__).resolve().parent))
from posttrain_demo import pretrain, write_json  # noqa: E402  (a script beside this one)


def clone(model):
    """A new GPT with ``model``'s config and a copy of its weights."""
    twin = GPT(model.config)
    twin.load_state_dict({k: sitp.tensor(v.detach().numpy().copy())
                          for k, v in model.state_dict().items()})  # fmt: skip
    return twin.eval()


def sampled(model, prompts, max_new, tok, seed):
    """One reply (T = 1) to each prompt, drawn with a generator seeded by ``seed``."""
    gen = sitp.Generator().manual_seed(seed)
    return sample_replies(model, prompts, max_new, 1.0, None, (tok.assistant_end,), gen, 128)


def judge(model, base_replies, task, tok, held, prompts, max_new, seed):
    """The judge's view of ``model`` on the held-out prompts (repeated rounds): its
    sampled replies' mean gold, share right and polite, length, and win rate against
    ``base_replies`` (the SFT model's, drawn with other seeds); the same for greedy."""
    replies = sampled(model, prompts, max_new, tok, seed)
    problems = held * (len(prompts) // len(held))
    out = {"sampled": prefs.judge_replies(task, tok, problems, replies),
           "win": prefs.win_rate(task, tok, problems, replies, base_replies["sampled"])}  # fmt: skip
    greedy = greedy_replies(model, prompts[: len(held)], max_new, (tok.assistant_end,), 128)
    out["greedy"] = prefs.judge_replies(task, tok, held, greedy)
    out["greedy_win"] = prefs.win_rate(task, tok, held, greedy, base_replies["greedy"])
    out["first_replies"] = [completion_text(r, tok) for r in replies[:3]]
    return out


def rl_on_reward_model(sft_model, rm, task, tok, train, held, held_prompts, max_new, seed, kl,
                       steps, lr, args):  # fmt: skip
    """``steps`` of GRPO from the SFT model rewarded by ``rm`` with KL coefficient ``kl``; every
    ``args.probe_every`` steps, one sampled reply to each held-out prompt (the same draws
    each time) scored by the reward model and by the judge. Returns (policy, record)."""
    policy = clone(sft_model)
    opt = sitp.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    gen = sitp.Generator().manual_seed(seed)

    def probe_point(step):
        replies = sampled(policy, held_prompts, max_new, tok, 20_000 + seed)
        judged = prefs.judge_replies(task, tok, held, replies)
        rm_mean = float(np.mean(batch_scores(rm, held_prompts, replies)))
        return {"step": step, "rm": rm_mean, **judged}

    curve, history = [probe_point(0)], []
    for step in range(steps):
        batch = [train[(step * args.rl_prompts + i) % len(train)] for i in range(args.rl_prompts)]
        prompts = [prefs.prompt_ids(task, p, tok) for p in batch]

        def reward_batch(rows, replies, prompts=prompts):
            return batch_scores(rm, [prompts[i] for i in rows], replies)

        stats = grpo_step(policy, opt, prompts, group_size=8, max_new_tokens=max_new,
                          temperature=1.0, kl_coef=kl, ref_model=sft_model,
                          epochs=args.rl_epochs, stop_ids=(tok.assistant_end,), generator=gen,
                          reward_batch=reward_batch)  # fmt: skip
        history.append(stats)
        if (step + 1) % args.probe_every == 0:
            curve.append(probe_point(step + 1))
            c = curve[-1]
            print(f"  rl (kl {kl:g}) step {step + 1}: reward model {c['rm']:+.3f}, judge "
                  f"{c['gold']:+.3f}, right {c['right']:.3f}, polite {c['polite']:.3f}, "
                  f"{c['chars']:.1f} chars, kl {stats['kl']:.4f}", flush=True)  # fmt: skip
    return policy, {"kl_coef": kl, "lr": lr, "history": history, "curve": curve}


def run_seed(seed, args, task, tok):
    t_start = time.perf_counter()
    sitp.manual_seed(seed)
    config = GPTConfig(vocab_size=tok.vocab_size, block_size=args.block_size, n_layer=2,
                       n_head=4, n_embd=64, rope=True)  # fmt: skip
    model = GPT(config)
    print(f"seed {seed}: pre-training", flush=True)
    pretrain(model, tok, task, args.pretrain_steps, 32, 3e-3, seed)
    train = task.problems("train", 5000, seed=0, at_most=True)
    held = task.problems("heldout", 1000, seed=0, at_most=True)
    convos = prefs.styled_conversations(task, train, copies=2, seed=seed)
    losses = sft(model, convos, tok, args.sft_steps, lr=3e-3, batch_size=32, seed=seed)
    print(f"  sft loss {np.mean(losses[:10]):.3f} -> {np.mean(losses[-10:]):.3f}", flush=True)
    sft_model = clone(model)
    longest = max(len(tok.encode_text(r)) for r in (
        prefs.PREFIXES[1] + task.reference(p) + prefs.SUFFIXES[1] for p in train))  # fmt: skip
    max_new = longest + 1 + 4
    held_prompts = [prefs.prompt_ids(task, p, tok) for p in held]
    rounds = held_prompts * args.rounds
    base = {
        "sampled": sampled(sft_model, rounds, max_new, tok, 10_000 + seed),
        "greedy": greedy_replies(sft_model, held_prompts, max_new, (tok.assistant_end,), 128),
    }
    times = {"pretrain+sft": time.perf_counter() - t_start}

    # the preference pairs: two samples of the SFT model per problem, the annotator's choice
    t0 = time.perf_counter()
    gen = sitp.Generator().manual_seed(seed)
    pairs = prefs.label_pairs(task, tok, prefs.sample_pairs(sft_model, tok, task, train, max_new,
                                                            1.0, gen), seed=seed)  # fmt: skip
    raw_held = prefs.sample_pairs(sft_model, tok, task, held, max_new, 1.0, gen)
    held_pairs = prefs.label_pairs(task, tok, raw_held, seed=seed)
    ceiling = prefs.annotator_agreement(task, tok, raw_held)
    times["pairs"] = time.perf_counter() - t0
    print(f"  {len(pairs)} train pairs, {len(held_pairs)} held-out pairs", flush=True)

    # the reward model
    t0 = time.perf_counter()
    rm = RewardModel(clone(sft_model))
    rm_losses, rm_accs = train_reward_model(rm, pairs, args.rm_steps, 32, args.rm_lr, seed)
    rm_acc = {"train": pair_accuracy(rm, pairs), "heldout": pair_accuracy(rm, held_pairs),
              "annotator_agreement": ceiling}  # fmt: skip
    times["rm"] = time.perf_counter() - t0
    print(f"  reward model: loss {np.mean(rm_losses[-10:]):.3f}, pair accuracy train "
          f"{rm_acc['train']:.3f}, held-out {rm_acc['heldout']:.3f} (the annotator agrees with "
          f"the judge on {ceiling:.3f})", flush=True)  # fmt: skip

    # DPO on the same pairs
    t0 = time.perf_counter()
    dpo_model = clone(sft_model)
    dpo_hist = train_dpo(dpo_model, sft_model, pairs, args.dpo_steps, 32, args.dpo_beta,
                         args.dpo_lr, seed)  # fmt: skip
    times["dpo"] = time.perf_counter() - t0
    print(f"  dpo: loss {np.mean([h['loss'] for h in dpo_hist[-10:]]):.3f}, accuracy "
          f"{np.mean([h['accuracy'] for h in dpo_hist[-10:]]):.3f}", flush=True)  # fmt: skip

    # GRPO against the reward model, with the over-optimisation curve
    rl_runs, policies = {}, [("sft", sft_model), ("dpo", dpo_model)]
    for spec in args.rl_runs.split(","):
        kl, steps, lr = (float(x) for x in spec.split(":"))
        steps = int(steps)
        t0 = time.perf_counter()
        name = f"rl-kl{kl:g}"
        policy, rl_runs[name] = rl_on_reward_model(sft_model, rm, task, tok, train, held,
                                                   held_prompts, max_new, seed, kl, steps,
                                                   lr, args)  # fmt: skip
        policies.append((name, policy))
        times[name] = time.perf_counter() - t0

    t0 = time.perf_counter()
    verdicts = {name: judge(m, base, task, tok, held, rounds, max_new, tok.vocab_size + seed)
                for name, m in policies}  # fmt: skip
    times["judge"] = time.perf_counter() - t0
    for name, v in verdicts.items():
        w = v["win"]
        print(f"  {name:>9}: win rate against SFT {w['win_rate']:.3f} ({w['ci'][0]:.3f}-"
              f"{w['ci'][1]:.3f}), judge {v['sampled']['gold']:+.3f}, right "
              f"{v['sampled']['right']:.3f}; e.g. {v['first_replies'][0]!r}", flush=True)  # fmt: skip
    return {"seed": seed, "pairs": len(pairs), "heldout_pairs": len(held_pairs),
            "sft_loss": [float(np.mean(losses[:10])), float(np.mean(losses[-10:]))],
            "rm": {"loss": rm_losses, "accuracy": rm_accs, "pair_accuracy": rm_acc},
            "dpo": dpo_hist, "rl": rl_runs,
            "policies": verdicts, "seconds": {k: round(v, 1) for k, v in times.items()}}  # fmt: skip


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="chain1")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds, one run each")
    p.add_argument("--pretrain-steps", type=int, default=300)
    p.add_argument("--sft-steps", type=int, default=200)
    p.add_argument("--rm-steps", type=int, default=150)
    p.add_argument("--rm-lr", type=float, default=1e-3)
    p.add_argument("--dpo-steps", type=int, default=150)
    p.add_argument("--dpo-lr", type=float, default=1e-4)
    p.add_argument("--dpo-beta", type=float, default=0.1)
    p.add_argument("--rl-prompts", type=int, default=8)
    p.add_argument("--rl-runs", default="0.05:50:1e-4,0:60:3e-4",
                   help="RL runs against the reward model, each KL coefficient:steps:lr")  # fmt: skip
    p.add_argument("--rl-epochs", type=int, default=2)
    p.add_argument("--probe-every", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2, help="samples per held-out prompt to judge")
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--small", action="store_true", help="a few steps of everything")
    p.add_argument("--json", metavar="PATH", help="write the runs here")
    args = p.parse_args()
    if args.small:
        args.pretrain_steps, args.sft_steps, args.rm_steps, args.dpo_steps = 20, 20, 5, 5
        args.rl_runs, args.probe_every, args.rounds = "0.05:4:1e-4,0:2:3e-4", 2, 1
    task, tok = get_task(args.task), ChatTokenizer(ByteTokenizer())
    load_start = [round(x, 2) for x in os.getloadavg()]
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; task {task.name}", flush=True)
    runs = []
    for seed in (int(s) for s in args.seeds.split(",")):
        runs.append(run_seed(seed, args, task, tok))
        if args.json:  # after every seed, so that an interrupted run keeps what it did
            write_json(args.json, {
                "script": "scripts/preferences.py", "config": vars(args), "cpu": cpu_model(),
                "logical_cpus": os.cpu_count(), "loadavg_start": load_start,
                "loadavg_end": [round(x, 2) for x in os.getloadavg()],
                "judge": {"w_correct": prefs.W_CORRECT, "w_polite": prefs.W_POLITE,
                          "w_char": prefs.W_CHAR, "annotator_temperature": 0.3},
                "runs": runs})  # fmt: skip


if __name__ == "__main__":
    main()
