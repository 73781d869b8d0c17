"""Chapter 8's whole pipeline at the book's configuration, one CLI verb per stage, timed.

    pretrain -> midtrain -> sft -> rl, then held-out pass@1 of every task after each stage
    sft -> rm -> rl against the reward model; sft -> dpo (8.4's preferences, on chain1)

Each stage is the command a reader would type (``python -m sitp pretrain ...``, run
here in-process through ``sitp.train.cli.main``), writing its checkpoint to
``OUT/<stage>``; rerunning the script with the same ``--out`` resumes a stage that was
interrupted and skips the finished ones. After every stage the script measures greedy
pass@1 on each task's held-out problems (Wilson 95 % intervals) and writes it all,
with the commands, the time of each stage and the machine, to ``--json``.

The preference stages are 8.4's commands at 8.4's configuration, from the pipeline's SFT
checkpoint: ``sitp rm`` (a reward model on pairs of the SFT model's replies to
``chain1``'s train problems), ``sitp rl --reward-model`` (GRPO against it) and ``sitp
dpo`` (the same pairs). Each policy is judged against the SFT model as 8.4 judges it:
two sampled replies (T = 1) to every held-out ``chain1`` prompt from each, the hidden
judge's win rate (``sitp.posttrain.prefs.win_rate``) with its Wilson interval, and the
SFT model against itself, other draws, as the check that the comparison is fair.

    python scripts/posttrain_pipeline.py --out runs/chat
    python scripts/posttrain_pipeline.py --out runs/chat --json src/sitp/examples/posttrain-pipeline.json
    python scripts/posttrain_pipeline.py --out /tmp/p --small      # a one-minute look

The spread over seeds: the same run with ``--seed S`` (passed to every stage's command;
without it each verb keeps its own default, 42 for pre-training and 0 after), then the
records summed up, each task's pass@1 after each stage with its mean and sd over the
runs, RL's gain over SFT run by run, and the preference stages' win rates::

    python scripts/posttrain_pipeline.py --out runs/chat-s1 --seed 1 --json runs/s1.json
    python scripts/posttrain_pipeline.py --collect src/sitp/examples/posttrain-pipeline.json \
        runs/s1.json runs/s2.json --json src/sitp/examples/posttrain-pipeline-seeds.json

The figures vary with the machine's speed only in their timings; the rest is fixed by
the seeds and by the version of sitp (a kernel whose result differs in its last bit
moves every figure after it).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import time
from pathlib import Path

import sitp
from sitp.bench import cpu_model
from sitp.posttrain import prefs
from sitp.posttrain.cli import load_model, reply_budget
from sitp.posttrain.evaluate import evaluate
from sitp.posttrain.rl import sample_replies
from sitp.posttrain.tasks import get_task
from sitp.random import Generator
from sitp.train import checkpoint as ckpt
from sitp.train.cli import main as sitp_main

TASKS = "addition2,multiplication2,count,reverse,sort,chain1"
PREF_TASK = "chain1"  # 8.4's task: the judge compares replies to its problems
ROUNDS = 2  # sampled replies per held-out prompt to judge, as 8.4's --rounds


def seeded(commands: list[tuple[str, list[str]]], seed: int | None) -> list[tuple[str, list[str]]]:
    """The commands with ``--seed seed`` added to each, or as they are for ``None`` (each
    verb's own default: 42 for pre-training, 0 for the later stages)."""
    if seed is None:
        return commands
    return [(stage, [*argv, "--seed", str(seed)]) for stage, argv in commands]


def stage_commands(out: Path, tasks: str, small: bool) -> list[tuple[str, list[str]]]:
    """The four commands, in order: ``(stage, argv of python -m sitp)``."""
    if small:  # a smoke test of the script: a tiny model, a few steps each
        pre = ["--steps", "60", "--set", "n_layer=1", "--set", "n_embd=32", "--set", "n_head=2"]
        mid, sft, rl = ["--steps", "40"], ["--steps", "40"], ["--steps", "3", "--prompts", "4"]
    else:
        pre = ["--steps", "1000"]
        mid, sft = ["--steps", "1000"], ["--steps", "600", "--batch-size", "32"]
        rl = ["--steps", "150", "--prompts", "8", "--group", "8"]
    return [
        ("pretrain", ["pretrain", "--out", str(out / "pretrain"), "--quiet", *pre]),
        ("midtrain", ["midtrain", "--init", str(out / "pretrain"), "--out", str(out / "midtrain"),
                      "--tasks", tasks, "--identity", *mid]),
        ("sft", ["sft", "--init", str(out / "midtrain"), "--out", str(out / "sft"),
                 "--tasks", tasks, "--identity", *sft]),
        ("rl", ["rl", "--init", str(out / "sft"), "--out", str(out / "rl"), "--task", tasks,
                "--temperature", "0.7", *rl]),
    ]  # fmt: skip


def preference_commands(out: Path, small: bool) -> list[tuple[str, list[str]]]:
    """8.4's three commands from the SFT checkpoint: ``(stage, argv of python -m sitp)``."""
    if small:
        rm = ["--steps", "4", "--problems", "16", "--batch-size", "4"]
        rl = ["--steps", "2", "--prompts", "2", "--group", "2", "--kl", "0.05", "--epochs", "2"]
        dpo = ["--steps", "4", "--problems", "16", "--batch-size", "4", "--beta", "0.1"]
    else:
        rm, dpo = ["--steps", "150"], ["--steps", "150", "--beta", "0.1"]
        rl = ["--steps", "60", "--prompts", "8", "--group", "8", "--kl", "0.05", "--epochs", "2",
              "--lr", "3e-4"]  # fmt: skip
    sft = str(out / "sft")
    return [
        ("rm", ["rm", "--init", sft, "--out", str(out / "rm"), "--task", PREF_TASK, *rm]),
        ("rl-rm", ["rl", "--init", sft, "--out", str(out / "rl-rm"), "--task", PREF_TASK,
                   "--reward-model", str(out / "rm"), *rl]),
        ("dpo", ["dpo", "--init", sft, "--out", str(out / "dpo"), "--task", PREF_TASK, *dpo]),
    ]  # fmt: skip


def finished(directory: Path, argv: list[str]) -> bool:
    """Whether the stage's checkpoint holds all the steps its command asks for."""
    if not ckpt.has_checkpoint(directory):
        return False
    steps = int(argv[argv.index("--steps") + 1])
    return ckpt.load_record(directory).get("step", 0) >= steps


def measure(directory: Path, tasks: list[str], n: int) -> dict:
    """Greedy held-out pass@1 of the checkpoint for each task, and which problems it solved
    (the same problems after every stage, so two stages can be compared problem by problem)."""
    model, tok, _, _ = load_model(directory)
    out = {}
    for name in tasks:
        task = get_task(name)
        problems = task.problems("heldout", n, seed=0, at_most=True)
        result = evaluate(model, tok, task, problems,
                          max_new_tokens=reply_budget(task, problems, tok))  # fmt: skip
        lo, hi = result["pass@1_ci"]
        out[name] = {"pass@1": result["pass@1"], "ci": [lo, hi], "n": len(problems),
                     "correct": result["correct"], "first_reply": result["first_replies"][0]}  # fmt: skip
    return out


def judged_replies(directory: Path, n: int, seed: int) -> tuple[list, list]:
    """``ROUNDS`` replies (T = 1, a generator seeded by ``seed``) of the checkpoint to each
    of ``PREF_TASK``'s first ``n`` held-out problems: ``(problems, replies)``, in rounds."""
    model, tok, _, _ = load_model(directory)
    task = get_task(PREF_TASK)
    held = task.problems("heldout", n, seed=0, at_most=True)
    budget = reply_budget(task, held, tok) + len(prefs.PREFIXES[1] + prefs.SUFFIXES[1])
    prompts = [prefs.prompt_ids(task, p, tok) for p in held] * ROUNDS
    replies = sample_replies(model, prompts, budget, 1.0, None, (tok.assistant_end,),
                             Generator().manual_seed(seed), batch_size=128)  # fmt: skip
    return held * ROUNDS, replies


def verdict(directory: Path, base: list, n: int) -> dict:
    """The judge's win rate of the checkpoint's sampled replies against ``base`` (the SFT
    model's), and what it sees in them: mean utility, share right and polite, length."""
    problems, replies = judged_replies(directory, n, seed=1)
    task, tok = get_task(PREF_TASK), load_model(directory)[1]
    return {"win": prefs.win_rate(task, tok, problems, replies, base),
            "sampled": prefs.judge_replies(task, tok, problems, replies)}  # fmt: skip


def run_stage(out: Path, stage: str, argv: list[str]) -> float:
    """Runs the stage's command unless its checkpoint is finished; returns its seconds."""
    print(f"$ python -m sitp {shlex.join(argv)}", flush=True)
    t0 = time.perf_counter()
    if not finished(out / stage, argv):
        status = sitp_main(argv)
        if status:
            raise SystemExit(f"{stage} failed with status {status}")
    return time.perf_counter() - t0


def collect(paths: list[Path]) -> dict:
    """The seeds' records summed up: each run's held-out pass@1 per stage and task, the
    preference stages' win rates against SFT (with their intervals, and what the judge saw
    in the sampled replies), and the mean and sample sd over runs."""
    runs = []
    for path in paths:
        rec = json.loads(Path(path).read_text())
        run = {"record": str(path), "seed": rec.get("seed"), "small": rec["small"], "cpu": rec["cpu"],
               "minutes": rec["minutes"],
               "pass@1": {s["stage"]: {t: r["pass@1"] for t, r in s["pass@1"].items()}
                          for s in rec["stages"]}}  # fmt: skip
        if "preferences" in rec:
            prefs_ = rec["preferences"]
            sft = prefs_["sft_against_itself"]
            run["win_rate"] = {"sft": sft["win"]["win_rate"]}
            run["win_ci"] = {"sft": sft["win"]["ci"]}
            run["sampled"] = {"sft": sft["sampled"]}
            for s in prefs_["stages"]:
                if "win" in s:
                    run["win_rate"][s["stage"]] = s["win"]["win_rate"]
                    run["win_ci"][s["stage"]] = s["win"]["ci"]
                    run["sampled"][s["stage"]] = s["sampled"]
                    run["pass@1"][s["stage"]] = {PREF_TASK: s["pass@1"][PREF_TASK]["pass@1"]}
        runs.append(run)

    def spread(values: list[float]) -> dict:
        mean = sum(values) / len(values)
        sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
        return {"values": values, "mean": mean, "sd": sd}

    first = runs[0]
    summary = {stage: {t: spread([r["pass@1"][stage][t] for r in runs]) for t in tasks}
               for stage, tasks in first["pass@1"].items()
               if all(stage in r["pass@1"] for r in runs)}  # fmt: skip
    gain = {t: spread([r["pass@1"]["rl"][t] - r["pass@1"]["sft"][t] for r in runs])
            for t in first["pass@1"]["rl"]}  # fmt: skip
    with_prefs = [r for r in runs if "win_rate" in r]
    win = ({stage: spread([r["win_rate"][stage] for r in with_prefs])
            for stage in with_prefs[0]["win_rate"]} if len(with_prefs) > 1 else {})  # fmt: skip
    return {"script": "scripts/posttrain_pipeline.py --collect", "runs": runs,
            "pass@1": summary, "rl_gain": gain, "win_rate": win}  # fmt: skip


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="directory of the stages' checkpoints")
    p.add_argument("--collect", nargs="+", metavar="RUN_JSON",
                   help="instead of running: sum up these records (one per seed) into --json")  # fmt: skip
    p.add_argument("--tasks", default=TASKS, help="comma-separated tasks (all stages use them)")
    p.add_argument("--heldout", type=int, default=200, help="held-out problems per task")
    p.add_argument("--small", action="store_true", help="a tiny model and a few steps")
    p.add_argument("--json", metavar="PATH", help="write the commands, times and pass@1 here")
    p.add_argument("--seed", type=int, default=None,
                   help="passed to every stage's command (default: each verb's own, the book's run)")  # fmt: skip
    args = p.parse_args()
    if args.collect:
        if not args.json:
            p.error("--collect writes its summary to --json PATH")
        write_json(Path(args.json), collect(args.collect))
        return
    if not args.out:
        p.error("--out is required (or --collect)")
    out, tasks = Path(args.out), args.tasks.split(",")
    load_start = [round(x, 2) for x in os.getloadavg()]
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; tasks {args.tasks}", flush=True)
    stages, wall = [], 0.0
    for stage, argv in seeded(stage_commands(out, args.tasks, args.small), args.seed):
        seconds = run_stage(out, stage, argv)
        t0 = time.perf_counter()
        scores = measure(out / stage, tasks, args.heldout)
        eval_seconds = time.perf_counter() - t0
        wall += seconds + eval_seconds
        record = ckpt.load_record(out / stage)
        stages.append({"stage": stage, "command": "python -m sitp " + shlex.join(argv),
                       "seconds": round(seconds, 1), "eval_seconds": round(eval_seconds, 1),
                       "pass@1": scores, "history": record.get("history")})  # fmt: skip
        line = ", ".join(f"{t} {s['pass@1']:.3f}" for t, s in scores.items())
        print(
            f"{stage}: {seconds:.0f} s, evaluation {eval_seconds:.0f} s; pass@1 {line}", flush=True
        )
    # 8.4's preferences: the SFT model's sampled replies are the baseline of every verdict
    t0 = time.perf_counter()
    base = judged_replies(out / "sft", args.heldout, seed=0)[1]
    sft_self = verdict(out / "sft", base, args.heldout)
    wall += time.perf_counter() - t0
    w = sft_self["win"]
    print(f"sft against itself on {PREF_TASK}: win rate {w['win_rate']:.3f} "
          f"({w['ci'][0]:.3f}-{w['ci'][1]:.3f}) over {w['n']} comparisons", flush=True)  # fmt: skip
    preference = []
    for stage, argv in seeded(preference_commands(out, args.small), args.seed):
        seconds = run_stage(out, stage, argv)
        record = ckpt.load_record(out / stage)
        entry = {"stage": stage, "command": "python -m sitp " + shlex.join(argv),
                 "seconds": round(seconds, 1), "history": record.get("history")}  # fmt: skip
        t0 = time.perf_counter()
        if record.get("model") == "gpt":  # a policy: pass@1 of every task, and the verdict
            entry["pass@1"] = measure(out / stage, tasks, args.heldout)
            entry.update(verdict(out / stage, base, args.heldout))
        eval_seconds = time.perf_counter() - t0
        entry["eval_seconds"] = round(eval_seconds, 1)
        wall += seconds + eval_seconds
        preference.append(entry)
        line = f"{stage}: {seconds:.0f} s, evaluation {eval_seconds:.0f} s"
        if "win" in entry:
            w = entry["win"]
            line += (f"; win rate against sft on {PREF_TASK} {w['win_rate']:.3f} "
                     f"({w['ci'][0]:.3f}-{w['ci'][1]:.3f}), {PREF_TASK} pass@1 "
                     f"{entry['pass@1'][PREF_TASK]['pass@1']:.3f}")  # fmt: skip
        print(line, flush=True)
    print(f"the whole pipeline: {wall / 60:.1f} min", flush=True)
    if args.json:
        write_json(Path(args.json), {
            "script": "scripts/posttrain_pipeline.py", "tasks": tasks, "heldout": args.heldout,
            "small": args.small, "seed": args.seed, "cpu": cpu_model(),
            "logical_cpus": os.cpu_count(), "threads": sitp.get_num_threads(),
            "loadavg_start": load_start,
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "minutes": round(wall / 60, 2), "stages": stages,
            "preferences": {"task": PREF_TASK, "rounds": ROUNDS, "sft_against_itself": sft_self,
                            "stages": preference}})  # fmt: skip


def write_json(path: Path, record: dict) -> None:
    """Writes ``record`` to ``path`` whole or not at all (a temporary file, renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
