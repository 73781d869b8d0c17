"""Chapter 8.2's calculator tool, measured: held-out pass@1 with and without the tool, over seeds.

For each task and seed, the demo's model (scripts/posttrain_demo.py: a 2-layer GPT of
width 64, pre-trained on the task's plain lines "What is 47*85? 3995") is copied twice
and each copy fine-tuned for the same steps on the task's train problems:

* ``alone``: on the plain conversations (the reply is the answer), evaluated without
  the tool;
* ``tool``: on the tool conversations (``sitp.posttrain.tools.tool_conversation``: a
  ``<|calc|>`` call, its result, masked, and the answer), evaluated with the engine
  running the calls (``tool``) and without it (``tool-off``: the model's own tokens
  stand where the results would be).

Both copies use the tokenizer with the tool tokens (``ChatTokenizer(..., tools=True)``),
so they start from the same pre-trained weights. Greedy decoding, held-out problems
(the hash split), Wilson 95 % intervals; each arm's mean and sd over the seeds.

    python scripts/tool_runs.py --seeds 0 1 2 3 4 --json src/sitp/examples/tool-runs.json
    python scripts/tool_runs.py --tasks multiplication2 --seeds 0 --pretrain-steps 50

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
from sitp.posttrain.chat import ChatTokenizer, completion_text, render, render_prompt
from sitp.posttrain.evaluate import evaluate
from sitp.posttrain.rl import greedy_replies
from sitp.posttrain.sft import sft
from sitp.posttrain.tasks import get_task
from sitp.posttrain.tools import Calculator, expression, tool_conversation

sys.path.insert(0, str(Path(__file__).resolve().parent))
from posttrain_demo import clone, pretrain, write_json  # noqa: E402

ARMS = ("alone", "tool", "tool-off")


def calls_in(reply, tok):
    """The (expression, result) pairs of a reply's calls, as text (the result "" if none)."""
    pairs, pos = [], 0
    while tok.calc_start in reply[pos:]:
        start = reply.index(tok.calc_start, pos)
        end = reply.index(tok.calc_end, start) if tok.calc_end in reply[start:] else len(reply)
        expr = tok.decode(reply[start + 1 : end])
        result = ""
        if end + 1 < len(reply) and reply[end + 1] == tok.result_start:
            stop = (reply.index(tok.result_end, end) if tok.result_end in reply[end:]
                    else len(reply))  # fmt: skip
            result = tok.decode(reply[end + 2 : stop])
        pairs.append((expr, result))
        pos = end + 1
    return pairs


def measure(arm, model, tok, task, held, max_new):
    """Greedy held-out pass@1 of one arm, with the calculator's calls when it runs."""
    t0 = time.perf_counter()
    out = evaluate(model, tok, task, held, max_new_tokens=max_new,
                   tool=Calculator(tok) if arm == "tool" else None)  # fmt: skip
    lo, hi = out["pass@1_ci"]
    record = {"arm": arm, "pass@1": out["pass@1"], "pass@1_ci": [lo, hi], "n": len(held),
              "correct": out["correct"], "first_replies": out["first_replies"][:3],
              "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip
    if arm != "alone":  # what the replies' calls hold, decoded again with the same tool
        prompts = [render_prompt([{"role": "user", "content": task.prompt(p)}], tok) for p in held]
        replies = greedy_replies(model, prompts, max_new, (tok.assistant_end,),
                                 tool=Calculator(tok) if arm == "tool" else None)  # fmt: skip
        calls = [calls_in(r, tok) for r in replies]
        record["right_call"] = sum(bool(c) and c[0][0] == expression(task, p)
                                   for c, p in zip(calls, held))  # fmt: skip
        record["no_call"] = sum(not c for c in calls)
        record["copied_result"] = sum(bool(c) and c[-1][1] != "" and
                                      completion_text(r, tok).strip() == c[-1][1]
                                      for c, r in zip(calls, replies))  # fmt: skip
        cut = [r[: r.index(tok.assistant_end) + 1] if tok.assistant_end in r else r
               for r in replies[:3]]  # fmt: skip
        record["first_transcripts"] = [tok.decode(r) for r in cut]
    extra = "".join(f", {k} {record[k]}" for k in ("right_call", "no_call", "copied_result")
                    if k in record)  # fmt: skip
    print(f"  {task.name} {arm:>8}: pass@1 {out['pass@1']:.3f} (95% Wilson {lo:.3f}-{hi:.3f})"
          f"{extra}; first reply {out['first_replies'][0]!r}", flush=True)  # fmt: skip
    return record


def run(args, task_name, seed):
    """One task and seed: pre-training, the two fine-tunings, the three measurements."""
    task = get_task(task_name)
    tok = ChatTokenizer(ByteTokenizer(), tools=True)
    load_start = [round(x, 2) for x in os.getloadavg()]
    sitp.manual_seed(seed)
    config = GPTConfig(vocab_size=tok.vocab_size, block_size=args.block_size, n_layer=2,
                       n_head=4, n_embd=64, rope=True)  # fmt: skip
    model = GPT(config)
    held = task.problems("heldout", args.heldout, seed=0, at_most=True)
    train = task.problems("train", 3000, seed=1, at_most=True)
    t0 = time.perf_counter()
    pretrain(model, tok, task, args.pretrain_steps, 32, 3e-3, seed)
    seconds = {"pretrain": round(time.perf_counter() - t0, 1)}
    data = {"alone": [task.conversation(p) for p in train],
            "tool": [tool_conversation(task, p) for p in train]}  # fmt: skip
    # the longest reply, its <|assistant_end|> included: render's ids after <|assistant_start|>
    longest = {k: max(len(ids) - ids.index(tok.assistant_start) - 1
                      for ids, _ in (render(c, tok) for c in v[:200])) for k, v in data.items()}  # fmt: skip
    arms, losses = [], {}
    for kind in ("alone", "tool"):
        copy = clone(model)
        t0 = time.perf_counter()
        loss = sft(copy, data[kind], tok, args.sft_steps, lr=3e-3, batch_size=32, seed=seed)
        seconds[f"sft-{kind}"] = round(time.perf_counter() - t0, 1)
        losses[kind] = {"first10": float(np.mean(loss[:10])), "last10": float(np.mean(loss[-10:]))}
        for arm in ("alone",) if kind == "alone" else ("tool", "tool-off"):
            arms.append(measure(arm, copy.eval(), tok, task, held, longest[kind]))
    return {"task": task_name, "seed": seed, "arms": arms, "sft_loss": losses,
            "seconds": seconds, "max_new_tokens": longest,
            "loadavg_start": load_start, "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "parameters": sum(p.numel() for p in model.parameters())}  # fmt: skip


def summary(runs, tasks):
    """Each task's arms over the seeds: every seed's pass@1, the mean and the sd (ddof 1)."""
    out = {}
    for task in tasks:
        mine = [r for r in runs if r["task"] == task]
        out[task] = {}
        for i, arm in enumerate(ARMS):
            values = [r["arms"][i]["pass@1"] for r in mine]
            out[task][arm] = {"values": values, "mean": float(np.mean(values)),
                              "sd": float(np.std(values, ddof=1)) if len(values) > 1 else None}  # fmt: skip
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=["multiplication2", "addition3"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--pretrain-steps", type=int, default=300)
    p.add_argument("--sft-steps", type=int, default=800)
    p.add_argument("--heldout", type=int, default=200)
    p.add_argument("--block-size", type=int, default=48)
    p.add_argument("--json", metavar="PATH", help="write the runs and the summary to PATH")
    args = p.parse_args()
    print(f"CPU: {cpu_model()}; tasks {args.tasks}; seeds {args.seeds}", flush=True)
    runs, t0 = [], time.perf_counter()
    for task in args.tasks:
        for seed in args.seeds:
            runs.append(run(args, task, seed))
    record = {
        "script": "scripts/tool_runs.py",
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "config": {
            **vars(args),
            "n_layer": 2,
            "n_head": 4,
            "n_embd": 64,
            "rope": True,
            "pretrain_batch": 32,
            "pretrain_lr": 3e-3,
            "sft_batch": 32,
            "sft_lr": 3e-3,
            "tokenizer": "bytes + 5 chat tokens + 4 tool tokens",
            "parameters": runs[0]["parameters"],
        },  # fmt: skip
        "minutes": round((time.perf_counter() - t0) / 60, 2),
        "runs": runs,
        "summary": summary(runs, args.tasks),
    }
    for task, arms in record["summary"].items():
        print(task, "; ".join(f"{a} {s['mean']:.3f} ± {s['sd'] or 0:.3f}" for a, s in arms.items()))
    if args.json:
        write_json(args.json, record)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
