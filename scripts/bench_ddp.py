"""GPT training throughput on 2 ranks against 1 rank, and the overlap timeline of a DDP step.

    python scripts/bench_ddp.py            # writes src/sitp/examples/ddp-bench.json
    python scripts/bench_ddp.py --smoke --json /tmp/ddp.json   # a tiny GPT (the tests)

Chapter 5's anchor GPT (4 layers, 4 heads, width 128, block 64, characters of
tinyshakespeare) is trained with the trainer behind ``python -m sitp train``
(:class:`sitp.train.trainer.Trainer`, its ``train_step``) at one global batch of 24
windows, three ways:

* 1 rank, 1 numba thread (the baseline);
* 1 rank, 2 threads (the kernels' own parallelism);
* 2 ranks of 1 thread each, under ``python -m sitp.distributed.run`` (DDP: 12 windows
  per rank, the gradients averaged in buckets during backward).

Each run of a way starts its processes afresh, runs ``--warmup`` steps, then ``--steps``
timed ones; a run's figure is the median step time of rank 0 (the ranks meet in the
all-reduce of every step). The three ways take turns through sitp.bench.ab for
``--rounds`` rounds (default 3; 2 with ``--smoke``), one whole run of each way a round,
the order reversed every other round (1x1, 1x2, 2x1, then 2x1, 1x2, 1x1, ...), so that a
change of the machine's load falls on all three. The harness's worker that starts the
runs holds both cores; each run sets its own threads (``NUMBA_NUM_THREADS``,
``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``: 1 or 2), so what is
compared is whole runs, not single calls. A way's ms/step is the median over the rounds
of the runs' medians, with the range of the rounds; tokens/s is 24 x 64 over it; the
speed-up of each way over 1 rank x 1 thread is the median of the rounds' ratios, with
their range. Beside it, the CPU seconds the processes used per step (all ranks and
threads, ``time.process_time``): on a shared machine, more processes or threads are
given more of its cores, so tokens per CPU-second say what the wall clock cannot
(an MPI rank waiting in a collective spins, and its wait counts as CPU time).

Then one more step of the 2-rank run is traced: forward, backward and the optimizer
step on each rank, the time each gradient reached DDP (a
``register_post_accumulate_grad_hook`` per parameter), and each bucket's all-reduce:
when it was launched, when it was first seen finished, and when backward's final wait
for it returned. (The trace wraps ``sitp.distributed.all_reduce``: DDP calls it through
the module, so the wrapper sees every bucket without a change to DDP.) Times are
``time.perf_counter()``, one monotonic clock for the processes of one machine, and are
given from rank 0's forward start.

The record names the CPU and the load average before and after: on a machine whose
cores other jobs use, the figures say as much about them as about DDP.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numba

import sitp
import sitp.distributed as dist
from sitp.bench import cpu_model
from sitp.train.trainer import TrainConfig, Trainer

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "src" / "sitp" / "examples" / "ddp-bench.json"
ANCHOR = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64}  # chapter 5
SMOKE = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16}
MARK = "BENCH-DDP-JSON "
THREAD_VARS = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
WAYS = [  # (name, ranks, threads per rank)
    ("1 rank, 1 thread", 1, 1),
    ("1 rank, 2 threads", 1, 2),
    ("2 ranks x 1 thread", 2, 1),
]


# ------------------------------------------------------------------------ worker
class _TracedWork:
    """A DDP bucket's all-reduce handle that notes when it is seen finished."""

    def __init__(self, work, bucket: int, events: list):
        self.work, self.bucket, self.events, self.seen = work, bucket, events, False

    def _seen(self) -> None:
        if not self.seen:
            self.seen = True
            self.events.append(("complete", self.bucket, time.perf_counter()))

    def is_completed(self) -> bool:
        done = self.work.is_completed()
        if done:
            self._seen()
        return done

    def wait(self, timeout=None) -> bool:
        out = self.work.wait()
        self._seen()
        self.events.append(("wait", self.bucket, time.perf_counter()))
        return out

    def __getattr__(self, name):
        return getattr(self.work, name)


def traced_step(trainer: Trainer) -> dict:
    """One training step, as ``train_step`` takes it, with every event's time."""
    events = []
    real = dist.all_reduce
    launched = []

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        work = real(tensor, op=op, group=group, async_op=async_op)
        if not async_op:
            return work
        k = len(launched)
        launched.append(tensor.numel() * tensor.element_size())
        events.append(("launch", k, time.perf_counter()))
        return _TracedWork(work, k, events)

    params = [p for p in trainer.model.parameters() if p.requires_grad]
    hooks = [
        p.register_post_accumulate_grad_hook(
            lambda _p, i=i: events.append(("ready", i, time.perf_counter()))
        )
        for i, p in enumerate(params)
    ]
    X_B, Y_B = trainer.next_batch()
    trainer.optimizer.zero_grad(set_to_none=True)
    if trainer.world > 1:
        dist.barrier()
    dist.all_reduce = all_reduce
    try:
        t = {"forward_start": time.perf_counter()}
        _, loss = trainer.net(X_B, Y_B)
        t["backward_start"] = time.perf_counter()
        loss.backward()  # one micro-batch without padding: accumulate_gradients' weight is 1
        t["backward_end"] = time.perf_counter()
        trainer.optimizer.step()
        t["step_end"] = time.perf_counter()
    finally:
        dist.all_reduce = real
        for h in hooks:
            h.remove()
    trainer.scheduler.step()
    trainer.step += 1
    return {"marks": t, "events": events, "bucket_bytes": launched}


def worker(args) -> None:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group()
    numba.set_num_threads(args.threads)
    config = TrainConfig(
        model="gpt",
        steps=args.warmup + args.steps + 2,
        batch_size=args.batch_size,
        data=args.data,
        tokenizer="char",
        eval_every=0,
        save_every=0,
        seed=1337,
    )
    trainer = Trainer(config, args.work, SMOKE if args.smoke else ANCHOR)
    times = []
    for i in range(args.warmup + args.steps):
        if trainer.world > 1:
            dist.barrier()  # every step starts together
        if i == args.warmup:
            cpu0 = time.process_time()  # this process's CPU time, all its threads
        t0 = time.perf_counter()
        trainer.train_step()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    cpu = [time.process_time() - cpu0]
    if trainer.world > 1:
        cpu = [None] * trainer.world
        dist.all_gather_object(cpu, time.process_time() - cpu0)
    trace = traced_step(trainer) if trainer.world > 1 else None
    if trace is not None:
        traces = [None] * trainer.world
        dist.all_gather_object(traces, trace)
    if trainer.rank == 0:
        out = {
            "ranks": trainer.world,
            "threads_per_rank": numba.get_num_threads(),
            "step_seconds": times,
            "cpu_seconds": cpu,  # each rank's, over the timed steps
            "params": sum(p.numel() for p in trainer.model.parameters()),
            "buckets": None,
        }
        if trace is not None:
            out["trace"] = traces
            names = {id(p): n for n, p in trainer.model.named_parameters()}
            out["buckets"] = [[names[id(p)] for p in b.params] for b in trainer.net._buckets]
        print(MARK + json.dumps(out), flush=True)


# ------------------------------------------------------------------------ parent
def run_way(ranks: int, threads: int, args, work: str) -> dict:
    me = [str(Path(__file__).resolve()), "--worker", "--threads", str(threads), "--work", work]
    me += ["--steps", str(args.steps), "--warmup", str(args.warmup)]
    me += ["--batch-size", str(args.batch_size), "--data", args.data]
    me += ["--smoke"] if args.smoke else []
    if ranks == 1:
        cmd = [sys.executable, *me]
    else:
        cmd = [sys.executable, "-m", "sitp.distributed.run", "--nproc-per-node", str(ranks)]
        cmd += ["--timeout", str(args.timeout), *me]
    # every library's pool: the threads of the way (numba's, and OpenBLAS's and OpenMP's)
    env = {**os.environ, **{v: str(threads) for v in THREAD_VARS}}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout + 60, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        raise SystemExit(
            f"bench_ddp: {' '.join(cmd)} failed (status {proc.returncode})\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return json.loads(lines[-1][len(MARK) :])


def way_run(ranks: int, threads: int, args: dict, work: str) -> callable:
    """The workload of one way for sitp.bench.ab: each call is one whole run, which times
    itself (its rank 0's median step) and hands back what rank 0 printed."""
    ns = argparse.Namespace(**args)

    def run() -> dict:
        out = run_way(ranks, threads, ns, work)
        return {"seconds": statistics.median(out["step_seconds"]), "out": out}

    return run


def timeline(trace: list[dict]) -> dict:
    """The traced step of every rank, in milliseconds from rank 0's forward start, and
    what it shows: each bucket's all-reduce, and the backward time left after the last
    gradient (communication that computation did not hide)."""
    t0 = trace[0]["marks"]["forward_start"]
    ms = lambda t: round((t - t0) * 1e3, 3)  # noqa: E731
    ranks = []
    for r in trace:
        ev = r["events"]
        ready = [t for e, _, t in ev if e == "ready"]
        buckets = []
        for k, size in enumerate(r["bucket_bytes"]):
            at = {e: t for e, b, t in ev if b == k and e != "ready"}
            buckets.append(
                {
                    "bucket": k,
                    "bytes": size,
                    "launch_ms": ms(at["launch"]),
                    "complete_ms": ms(at["complete"]),
                    "wait_returned_ms": ms(at["wait"]),
                    "all_reduce_ms": round((at["complete"] - at["launch"]) * 1e3, 3),
                }
            )
        m = r["marks"]
        ranks.append(
            {
                **{f"{k}_ms": ms(v) for k, v in m.items()},
                "first_grad_ms": ms(min(ready)),
                "last_grad_ms": ms(max(ready)),
                "exposed_comm_ms": round((m["backward_end"] - max(ready)) * 1e3, 3),
                "buckets": buckets,
                "grads_ready_ms": [ms(t) for t in sorted(ready)],
            }
        )
    return {"ranks": ranks}


def table(record: dict) -> str:
    rows = [
        f"{'way':<22}{'ms/step':>10}{'range':>16}{'tokens/s':>11}{'vs 1x1 (range)':>20}"
        f"{'CPU s/step':>12}{'tokens/CPU s':>14}"
    ]
    for r in record["results"]:
        lo, hi = r["median_step_ms_range"]
        up = r["speedup"]
        up = f"{up['median']:.2f} ({up['min']:.2f}-{up['max']:.2f})"
        rows.append(
            f"{r['way']:<22}{r['median_step_ms']:>10.1f}{f'{lo:.1f}-{hi:.1f}':>16}"
            f"{r['tokens_per_s']:>11,.0f}"
            f"{up:>20}"
            f"{r['cpu_seconds_per_step']:>12.3f}{r['tokens_per_cpu_second']:>14,.0f}"
        )
    rows.append(
        f"medians over {record['rounds']} rounds, one run of each way a round, the ways "
        f"alternating (sitp.bench.ab); speed-ups: the median of the rounds' ratios"
    )
    for k, rank in enumerate(record["timeline"]["ranks"]):
        rows.append(
            f"rank {k} traced step: forward {rank['backward_start_ms'] - rank['forward_start_ms']:.1f}"
            f" ms, backward {rank['backward_end_ms'] - rank['backward_start_ms']:.1f} ms, "
            f"after the last gradient {rank['exposed_comm_ms']:.2f} ms"
        )
        for b in rank["buckets"]:
            rows.append(
                f"  bucket {b['bucket']} ({b['bytes'] / 2**20:.2f} MiB): launched "
                f"{b['launch_ms']:.1f} ms, done {b['complete_ms']:.1f} ms "
                f"({b['all_reduce_ms']:.2f} ms), wait returned {b['wait_returned_ms']:.1f} ms"
            )
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=40, help="timed steps per way (40)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (5)")
    p.add_argument("--batch-size", type=int, default=24, help="the global batch (24)")
    p.add_argument("--data", default="shakespeare", help="the text (tinyshakespeare)")
    p.add_argument("--json", default=str(DEFAULT_JSON), help="where the record goes")
    p.add_argument("--smoke", action="store_true", help="a tiny GPT and a few steps (tests)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per run (600)")
    p.add_argument("--rounds", type=int, default=None,
                   help="rounds, one run of each way a round (3; 2 with --smoke)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--work", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    from sitp.bench import ab  # late: the --worker runs do without it

    rounds = args.rounds or (2 if args.smoke else 3)
    load_start = os.getloadavg()
    tokens = args.batch_size * (SMOKE if args.smoke else ANCHOR)["block_size"]
    results, trace = [], None
    with tempfile.TemporaryDirectory() as work, ab.workers(["runner"], threads=2) as w:
        kwargs = {k: v for k, v in vars(args).items() if k != "json"}
        arms = {
            name: ab.Arm(w["runner"], f"{Path(__file__).resolve()}:way_run",
                         dict(ranks=ranks, threads=threads, args=kwargs, work=work), warmup=0)
            for name, ranks, threads in WAYS
        }  # fmt: skip
        base = WAYS[0][0]
        res = ab.compare(arms, rounds=rounds, calls=1, ratios=[(base, n) for n, _, _ in WAYS[1:]])
    for name, ranks, _ in WAYS:
        a = res["arms"][name]
        outs = [e["out"] for e in a["extras"]]
        median = a["median"]
        middle = sorted(range(len(outs)), key=lambda i: a["rounds_s"][i])[(len(outs) - 1) // 2]
        cpu = [sum(o["cpu_seconds"]) for o in outs]  # each run's CPU seconds, all ranks
        results.append(
            {
                "way": name,
                "ranks": ranks,
                "threads_per_rank": outs[0]["threads_per_rank"],
                "median_step_ms": median * 1e3,
                "median_step_ms_range": [a["min"] * 1e3, a["max"] * 1e3],
                "rounds_median_step_ms": [round(t * 1e3, 3) for t in a["rounds_s"]],
                "tokens_per_s": tokens / median,
                "speedup": res["ratios"].get(f"{base}/{name}", {"median": 1.0, "min": 1.0,
                                                                "max": 1.0, "rounds": None}),
                "cpu_seconds_per_step": statistics.median(cpu) / args.steps,
                "tokens_per_cpu_second": tokens * args.steps / statistics.median(cpu),
                "step_ms": [round(t * 1e3, 3) for t in outs[middle]["step_seconds"]],
            }
        )  # fmt: skip
        for o in outs:
            if "trace" in o:
                trace, buckets, params = o["trace"], o["buckets"], o["params"]
        print(f"{name}: {median * 1e3:.1f} ms per step", file=sys.stderr)
    load_end = os.getloadavg()
    record = {
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "mpi": "MPICH (the mpich wheel), through mpi4py",
        "sitp": sitp.__version__ if hasattr(sitp, "__version__") else None,
        "config": {
            "model": "gpt",
            **(SMOKE if args.smoke else ANCHOR),
            "params": params,
            "global_batch": args.batch_size,
            "tokens_per_step": args.batch_size * (SMOKE if args.smoke else ANCHOR)["block_size"],
            "data": f"{args.data} (characters)",
            "steps_timed": args.steps,
            "warmup_steps": args.warmup,
            "smoke": args.smoke,
        },
        "rounds": rounds,
        "load_average_start": list(load_start),
        "load_average_end": list(load_end),
        "note": "the load averages and the harness's record of other programs' CPU share "
        "say how quiet the machine was; figures from a loaded machine are those of a "
        "loaded machine",
        "results": results,
        "ddp_buckets": buckets,
        "timeline": timeline(trace),
        "harness": {k: res[k] for k in ("harness", "order", "machine", "threads", "cores",
                                        "load", "statistic")},  # fmt: skip
        "command": " ".join(["python", "scripts/bench_ddp.py", *sys.argv[1:]]),
    }
    Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
    print(f"{record['cpu']}; load average {load_start[0]:.2f} at start, {load_end[0]:.2f} at end")
    print(table(record))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
