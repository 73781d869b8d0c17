"""ZeRO's bytes and memory per rank, measured, against the formulas of chapter 7.4.

    python scripts/zero_bytes.py          # writes docs/assets/part3/zero-bytes.json and .png
    python scripts/zero_bytes.py --plot-only   # redraws the figure from the record

A GPT of 2 layers, 2 heads, width 32, block 32, vocabulary 65 (float32) takes 3 AdamW
steps (lr 1e-2, weight decay 0.1) on 2 and on 4 ranks (4 oversubscribe a small machine;
nothing is timed), on random token windows, 2 per rank, in four ways:

* ``ddp``: DistributedDataParallel and AdamW on every rank;
* ``ddp+zro``: DDP and torch's ZeroRedundancyOptimizer over AdamW (all-reduce every
  gradient, step one's share, broadcast each owner's parameters);
* ``zero1`` and ``zero2``: ``sitp.distributed.ZeroOptimizer`` stages 1 and 2 (no DDP;
  stage 2 in buckets of at most 16 KiB).

Per rank it records the bytes sent in the last step (``sitp.distributed.CommCounter``:
the ring schedule of each collective, see its docstring), the most gradient memory held
(for DDP, every distinct storage behind a ``.grad`` and DDP's bucket buffers, after
backward; for ZeRO, the optimizer's ``peak_grad_bytes``), the optimizer state (AdamW's
moments) and the largest difference of the final weights from one process running AdamW
on the whole batch (float32: round-off of the reassociated sums, amplified where Adam
divides a gradient near zero by its own size). Bytes and memory are properties of the
algorithms and the sizes, the same on any machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "assets" / "part3" / "zero-bytes.json"
MARK = "ZEROBYTES "
STEPS, B, KW = 3, 2, {"lr": 1e-2, "weight_decay": 0.1}
BUCKET_MB = 16 / 1024


def rank_main() -> None:
    import numpy as np

    import sitp
    import sitp.distributed as dist
    from sitp.distributed.optim import ZeroRedundancyOptimizer
    from sitp.models.gpt import GPT, GPTConfig
    from sitp.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group()
    r, p = dist.get_rank(), dist.get_world_size()
    cfg = GPTConfig(block_size=32, vocab_size=65, n_layer=2, n_head=2, n_embd=32)
    rng = np.random.default_rng(0)
    X = rng.integers(0, 65, (STEPS, p * B, 32))
    Y = np.roll(X, -1, axis=2)
    mine = slice(r * B, (r + 1) * B)

    def loss_of(model, x, y):
        return model(sitp.tensor(x), sitp.tensor(y))[1]

    def state_bytes(opt):
        return sum(
            v.numel() * v.element_size()
            for st in opt.state.values()
            for v in st.values()
            if isinstance(v, sitp.Tensor) and v.dim() > 0
        )

    sitp.manual_seed(0)
    ref = GPT(cfg)
    adamw = sitp.optim.AdamW(ref.parameters(), **KW)
    init = {k: v.clone() for k, v in ref.state_dict().items()}
    for s in range(STEPS):
        loss_of(ref, X[s], Y[s]).backward()
        adamw.step()
        adamw.zero_grad()
    n_params = sum(q.numel() for q in ref.parameters())

    rows = []
    for way in ("ddp", "ddp+zro", "zero1", "zero2"):
        model = GPT(cfg)
        model.load_state_dict(init)
        grad_peak, padded, largest = 0, None, None
        if way.startswith("ddp"):
            ddp = DDP(model)
            if way == "ddp":
                opt = sitp.optim.AdamW(model.parameters(), **KW)
            else:
                opt = ZeroRedundancyOptimizer(model.parameters(), sitp.optim.AdamW, **KW)
            run, inner = ddp, opt if way == "ddp" else opt.optim
        else:
            stage = int(way[-1])
            opt = dist.ZeroOptimizer(
                model.parameters(),
                sitp.optim.AdamW,
                stage=stage,
                bucket_cap_mb=None if stage == 1 else BUCKET_MB,
                **KW,
            )
            run, inner = model, opt.optim
            padded = sum(b.padded for b in opt.buckets)
            largest = max(b.padded for b in opt.buckets) * 4
        for s in range(STEPS):
            with dist.CommCounter() as comm:
                loss_of(run, X[s, mine], Y[s, mine]).backward()
                if way.startswith("ddp"):
                    held = {id(q.grad._storage): q.grad._storage.nbytes for q in model.parameters()}
                    held.update({id(b.flat._storage): b.flat._storage.nbytes for b in ddp._buckets})
                    grad_peak = max(grad_peak, sum(held.values()))
                opt.step()
                opt.zero_grad()
        if not way.startswith("ddp"):
            grad_peak = opt.peak_grad_bytes
        diff = max(
            float(np.abs(a.detach().numpy() - b.detach().numpy()).max())
            for a, b in zip(model.parameters(), ref.parameters())
        )
        mine_row = (comm.bytes_sent, dict(comm.by_op), grad_peak, state_bytes(inner), diff)
        everyone = [None] * p
        dist.all_gather_object(everyone, mine_row)
        rows.append(
            {
                "way": way,
                "padded_elements": padded,
                "largest_bucket_bytes": largest,
                "bytes_sent_per_rank": [e[0] for e in everyone],
                "bytes_by_collective_rank0": everyone[0][1],
                "grad_peak_bytes_per_rank": [e[2] for e in everyone],
                "optimizer_state_bytes_per_rank": [e[3] for e in everyone],
                "max_weight_diff_vs_one_process": max(e[4] for e in everyone),
            }
        )
        if hasattr(opt, "remove_hooks"):
            opt.remove_hooks()
    if r == 0:
        print(MARK + json.dumps({"p": p, "parameters": n_params, "rows": rows}), flush=True)
    dist.destroy_process_group()


#: Per method, the formulas in units of psi: bytes sent per rank and step, gradient
#: memory (sitp's DDP keeps its buckets beside the gradients; ZeRO-2's floor is the shard,
#: the buckets in flight come on top) and AdamW's state.
FORMULAS = {
    "ddp": (lambda p: 2 * (p - 1) / p, lambda p: 2.0, lambda p: 2.0),
    "ddp+zro": (lambda p: 3 * (p - 1) / p, lambda p: 2.0, lambda p: 2 / p),
    "zero1": (lambda p: 2 * (p - 1) / p, lambda p: 1 + 1 / p, lambda p: 2 / p),
    "zero2": (lambda p: 2 * (p - 1) / p, lambda p: 1 / p, lambda p: 2 / p),
}


def plot(record: dict, path: Path) -> None:
    """Three panels (bytes sent, gradient memory, optimizer state per rank, in units of
    psi): a bar per method and p, measured, and the formula as a black tick."""
    import matplotlib  # late: only for the figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # late: only for the figure

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6))
    titles = ("bytes sent per rank and step", "gradient memory per rank", "AdamW state per rank")
    ways = [row["way"] for row in record["runs"][0]["rows"]]
    for k, ax in enumerate(axes):
        for j, run in enumerate(record["runs"]):
            p, psi = run["p"], 4 * run["parameters"]
            for i, row in enumerate(run["rows"]):
                if k == 0:
                    v = sum(row["bytes_sent_per_rank"]) / p / psi
                elif k == 1:
                    v = max(row["grad_peak_bytes_per_rank"]) / psi
                else:
                    v = max(row["optimizer_state_bytes_per_rank"]) / psi
                x = i + (j - 0.5) * 0.38
                ax.bar(
                    x, v, width=0.36, color=f"C{j}", label=f"measured, p = {p}" if i == 0 else None
                )
                f = FORMULAS[row["way"]][k](p)
                ax.plot(
                    [x - 0.18, x + 0.18],
                    [f, f],
                    color="k",
                    lw=2,
                    label="formula" if i == 0 and j == 0 else None,
                )
        ax.set_xticks(range(len(ways)))
        ax.set_xticklabels(ways, fontsize=8)
        ax.set_ylabel("units of psi (parameter bytes)")
        ax.set_title(titles[k], fontsize=10)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=OUT)
    ap.add_argument("--plot-only", action="store_true", help="redraw the figure from --json")
    args = ap.parse_args()
    if args.plot_only:
        plot(json.loads(args.json.read_text()), args.json.with_suffix(".png"))
        return
    runs = []
    for p in (2, 4):
        cmd = [sys.executable, "-m", "sitp.distributed.run", "--nproc-per-node", str(p)]
        cmd += ["--timeout", "600", __file__, "--rank-side"]
        done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
        if done.returncode != 0:
            sys.exit(f"the ranks failed:\n{done.stdout}\n{done.stderr}")
        line = next(x for x in done.stdout.splitlines() if x.startswith(MARK))
        runs.append(json.loads(line[len(MARK) :]))
    record = {
        "command": "python scripts/zero_bytes.py",
        "model": "GPT 2 layers, 2 heads, width 32, block 32, vocab 65, float32; AdamW",
        "steps": STEPS,
        "windows_per_rank": B,
        "zero2_bucket_cap_bytes": int(BUCKET_MB * 2**20),
        "runs": runs,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=1) + "\n")
    for run in runs:
        p, psi = run["p"], 4 * run["parameters"]
        print(f"p = {p}: {run['parameters']:,} parameters, {psi:,} bytes")
        for row in run["rows"]:
            sent = sum(row["bytes_sent_per_rank"]) / p
            g = max(row["grad_peak_bytes_per_rank"])
            st = max(row["optimizer_state_bytes_per_rank"])
            print(
                f"  {row['way']:8s} sent/rank {sent / psi:.3f} psi  grads {g / psi:.3f} psi  "
                f"state {st / psi:.3f} psi  |w - w1| {row['max_weight_diff_vs_one_process']:.1e}"
            )
    plot(record, args.json.with_suffix(".png"))
    print(f"wrote {args.json} and {args.json.with_suffix('.png')}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--rank-side"]:
        rank_main()
    else:
        main()
