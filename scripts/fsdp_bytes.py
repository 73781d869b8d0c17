"""ZeRO-3 (``fully_shard``) bytes and parameter memory per rank, measured, against the
formulas of chapter 7.4.

    python scripts/fsdp_bytes.py               # writes docs/assets/part3/fsdp-bytes.json and .png
    python scripts/fsdp_bytes.py --plot-only   # redraws the figure from the record

A GPT of 4 layers, 2 heads, width 32, block 32, vocabulary 65 (float32; every block a
unit, the root a unit of the embeddings, the tied head and the last layer norm) takes 3
AdamW steps (lr 1e-2, weight decay 0.1) on 2 and on 4 ranks (4 oversubscribe a small
machine; nothing is timed), 2 random token windows per rank, with
``reshard_after_forward`` True (ZeRO-3) and False. Per rank it records the bytes sent in
the last step (``sitp.distributed.CommCounter``), the most gathered parameter memory at
once in that step (``fsdp.max_unsharded_bytes``), the shard's bytes, the units' padded
sizes and the largest difference of the final weights from one process running AdamW on
the whole batch. The ranks are started with ``sitp.distributed.spawn``. Bytes and memory
are properties of the algorithm and the sizes, the same on any machine.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import sitp.distributed as dist

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "assets" / "part3" / "fsdp-bytes.json"
STEPS, B, KW = 3, 2, {"lr": 1e-2, "weight_decay": 0.1}
CONFIG = {"block_size": 32, "vocab_size": 65, "n_layer": 4, "n_head": 2, "n_embd": 32}


def measure(rank: int, reshard: bool) -> dict:
    import numpy as np

    import sitp
    import sitp.distributed as dist
    from sitp.distributed import fsdp
    from sitp.models.gpt import GPT, GPTConfig

    dist.init_process_group()
    p = dist.get_world_size()
    X = np.random.default_rng(0).integers(0, 65, (STEPS, p * B, 32))
    Y = np.roll(X, -1, axis=2)
    mine = slice(rank * B, (rank + 1) * B)

    def make():
        sitp.manual_seed(0)
        return GPT(GPTConfig(**CONFIG))

    ref, model = make(), make()
    for block in model.transformer.h:
        fsdp.fully_shard(block, reshard_after_forward=reshard)
    fsdp.fully_shard(model, reshard_after_forward=reshard)
    opt = sitp.optim.AdamW(model.parameters(), **KW)
    ref_opt = sitp.optim.AdamW(ref.parameters(), **KW)
    for s in range(STEPS):
        fsdp.reset_max_unsharded_bytes()
        with dist.CommCounter() as comm:
            model(sitp.tensor(X[s, mine]), sitp.tensor(Y[s, mine]))[1].backward()
        opt.step()
        opt.zero_grad()
        ref(sitp.tensor(X[s]), sitp.tensor(Y[s]))[1].backward()
        ref_opt.step()
        ref_opt.zero_grad()
    full, want = fsdp.full_state_dict(model), ref.state_dict()
    diff = max(float(np.abs(v.numpy() - want[k].detach().numpy()).max()) for k, v in full.items())
    units = [model, *model.transformer.h]
    return {
        "bytes_sent": comm.bytes_sent,
        "calls": comm.calls,
        "max_unsharded_bytes": fsdp.max_unsharded_bytes(),
        "shard_bytes": 4 * sum(u._fsdp_unit.chunk for u in units),
        "padded_elements": [u._fsdp_unit.padded for u in units],  # root first, then blocks
        "parameters": sum(q.numel() for q in ref.parameters()),
        "max_weight_diff_vs_one_process": diff,
    }


def plot(record: dict, path: Path) -> None:
    """Two panels, in units of the padded model: the bytes a rank sent in a step and the
    most weight memory gathered at once, a bar per p and resharding, the formula a tick."""
    import matplotlib  # late: only for the figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # late: only for the figure

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    labels = []
    for i, run in enumerate(record["runs"]):
        p, ranks = run["p"], run["ranks"]
        sizes = [4 * n for n in ranks[0]["padded_elements"]]
        psi = sum(sizes)
        reshard = run["reshard_after_forward"]
        sent = sum(x["bytes_sent"] for x in ranks) / p / psi
        gathered = max(x["max_unsharded_bytes"] for x in ranks) / psi
        formulas = (
            (3 if reshard else 2) * (p - 1) / p,
            (sizes[0] + 2 * max(sizes[1:])) / psi if reshard else 1.0,
        )
        for ax, v, f in zip(axes, (sent, gathered), formulas):
            ax.bar(i, v, width=0.6, color="C0" if reshard else "C1")
            ax.plot([i - 0.3, i + 0.3], [f, f], color="k", lw=2)
        labels.append(f"p={p}\n{'reshard' if reshard else 'keep'}")
    titles = ("bytes sent per rank and step", "weights gathered at once, per rank")
    for ax, title in zip(axes, titles):
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_ylabel("units of psi (padded model bytes)")
        ax.set_title(title, fontsize=10)
    axes[0].plot([], [], color="k", lw=2, label="formula")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plot-only", action="store_true", help="redraw the figure from the record")
    if ap.parse_args().plot_only:
        plot(json.loads(OUT.read_text()), OUT.with_suffix(".png"))
        return
    runs = []
    for p in (2, 4):
        for reshard in (True, False):
            ranks = dist.spawn(measure, args=(reshard,), nprocs=p, timeout=600)
            runs.append({"p": p, "reshard_after_forward": reshard, "ranks": ranks})
    record = {
        "command": "python scripts/fsdp_bytes.py",
        "model": "GPT 4 layers, 2 heads, width 32, block 32, vocab 65, float32; AdamW",
        "config": CONFIG,
        "steps": STEPS,
        "windows_per_rank": B,
        "runs": runs,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    for run in runs:
        r0, p = run["ranks"][0], run["p"]
        psi = 4 * sum(r0["padded_elements"])
        sent = sum(r["bytes_sent"] for r in run["ranks"]) / p
        print(
            f"p = {p} reshard={run['reshard_after_forward']}: sent {sent / psi:.3f} psi "
            f"(3(p-1)/p = {3 * (p - 1) / p:.3f}), gathered at most "
            f"{max(r['max_unsharded_bytes'] for r in run['ranks']):,} of {psi:,} bytes, "
            f"|w - w1| {max(r['max_weight_diff_vs_one_process'] for r in run['ranks']):.1e}"
        )
    plot(record, OUT.with_suffix(".png"))
    print(f"wrote {OUT} and {OUT.with_suffix('.png')}")


if __name__ == "__main__":
    main()
