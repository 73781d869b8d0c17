"""The pipeline's bubble, measured, against (p - 1)/m (chapter 7.6).

    python scripts/pipeline_bubble.py               # writes docs/assets/part3/pipeline-bubble.json and .png
    python scripts/pipeline_bubble.py --plot-only   # redraws the figure from the record

Each stage is one layer that *sleeps*: 20 ms in its forward and 40 ms in its backward
(a backward costs about twice a forward). Sleeping takes no CPU, so the measurement is
the schedule's and not the share of two CPUs that 4 ranks get on the machine that
recorded it; the activations that travel are 8 x 16 float64 numbers. For p = 2 and 4
stages, m = 1, 2, 4 and 8 micro-batches, GPipe and 1F1B, 5 steps after one untimed
warm-up: each rank measures each step's time between two barriers and the time its
passes ran; a step's bubble is idle / busy, averaged over the ranks, and the record keeps
the median of the 5 steps and their range, against the formula (p - 1)/m. The ranks are
started with ``sitp.distributed.spawn``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import sitp.distributed as dist

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "assets" / "part3" / "pipeline-bubble.json"
T_F, T_B = 0.020, 0.040
STEPS = 5


def measure(rank: int, m: int, schedule: str) -> dict:
    import time

    import sitp
    import sitp.distributed as dist
    from sitp.autograd.function import Function
    from sitp.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    class Sleep(Function):
        @staticmethod
        def forward(ctx, x):
            time.sleep(T_F)
            return x * 1.0

        @staticmethod
        def backward(ctx, grad):
            time.sleep(T_B)
            return grad

    class SleepingLayer(sitp.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = sitp.nn.Parameter(sitp.ones(1, dtype=sitp.float64))

        def forward(self, x):
            return Sleep.apply(x * self.scale)  # its input needs a gradient on every stage

    dist.init_process_group()
    p = dist.get_world_size()
    stage = PipelineStage(SleepingLayer(), rank, p)
    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
    sched = cls(stage, m, loss_fn=lambda out, y: (out - y).square().mean())
    x = sitp.ones(8 * m, 16, dtype=sitp.float64)
    totals, busies = [], []
    for step in range(1 + STEPS):  # the first is a warm-up
        dist.barrier()
        start = time.perf_counter()
        if rank == 0:
            sched.step(x)
        elif rank == p - 1:
            sched.step(target=x)
        else:
            sched.step()
        dist.barrier()
        if step:
            totals.append(time.perf_counter() - start)
            busies.append(sum(end - begin for _, _, begin, end in sched.timeline))
    return {"total_s": totals, "busy_s": busies, "max_in_flight": sched.max_in_flight}


def plot(record: dict, path: Path) -> None:
    """Measured idle / busy against m, a line per p and schedule, and (p - 1)/m."""
    import matplotlib  # late: only for the figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # late: only for the figure

    fig, ax = plt.subplots(figsize=(6, 3.8))
    for k, p in enumerate(sorted({run["p"] for run in record["runs"]})):
        ms = sorted({run["m"] for run in record["runs"] if run["p"] == p})
        ax.plot(ms, [(p - 1) / m for m in ms], "k--", lw=1, label="(p - 1)/m" if k == 0 else None)
        for schedule, marker in (("gpipe", "o"), ("1f1b", "x")):
            rows = [r for r in record["runs"] if r["p"] == p and r["schedule"] == schedule]
            ax.plot(
                [r["m"] for r in rows],
                [r["bubble"] for r in rows],
                marker,
                color=f"C{k}",
                label=f"p = {p}, {schedule}",
            )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("micro-batches m")
    ax.set_ylabel("idle / busy per stage")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plot-only", action="store_true", help="redraw the figure from the record")
    if ap.parse_args().plot_only:
        plot(json.loads(OUT.read_text()), OUT.with_suffix(".png"))
        return
    runs, load_before = [], os.getloadavg()
    for p in (2, 4):
        for m in (1, 2, 4, 8):
            for schedule in ("gpipe", "1f1b"):
                ranks = dist.spawn(measure, args=(m, schedule), nprocs=p, timeout=600)
                steps = sorted(
                    sum((r["total_s"][k] - r["busy_s"][k]) / r["busy_s"][k] for r in ranks) / p
                    for k in range(STEPS)
                )
                bubble = steps[STEPS // 2]  # the median step
                runs.append(
                    {
                        "p": p,
                        "m": m,
                        "schedule": schedule,
                        "bubble": bubble,
                        "bubble_range": [steps[0], steps[-1]],
                        "ranks": ranks,
                    }
                )
                print(
                    f"p = {p} m = {m} {schedule:5s}: idle/busy {bubble:.3f} "
                    f"({steps[0]:.3f}-{steps[-1]:.3f}) ((p-1)/m = {(p - 1) / m:.3f}); in flight "
                    f"{[r['max_in_flight'] for r in ranks]}",
                    flush=True,
                )
    record = {
        "command": "python scripts/pipeline_bubble.py",
        "stage": f"one sleeping layer per stage: forward {T_F * 1e3:.0f} ms, backward "
        f"{T_B * 1e3:.0f} ms; activations 8 x 16 float64 per micro-batch",
        "timed_steps": STEPS,
        "loadavg_before_after": [load_before[0], os.getloadavg()[0]],
        "machine": "2-vCPU AMD EPYC (znver5), shared; 4 ranks oversubscribe it",
        "runs": runs,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    plot(record, OUT.with_suffix(".png"))
    print(f"wrote {OUT} and {OUT.with_suffix('.png')}")


if __name__ == "__main__":
    main()
