"""Tensor parallelism's bytes and weights per rank, measured, against the formulas of
chapter 7.5.

    python scripts/tp_bytes.py               # writes docs/assets/part3/tp-bytes.json and .png
    python scripts/tp_bytes.py --plot-only   # redraws the figure from the record

One GPT block (4 heads, width 32, GELU MLP of width 128, float64) on 1, 2 and 4 ranks
(4 oversubscribe a small machine; nothing is timed): the attention split by heads
(``sitp.examples.tensor_parallel.HeadParallelAttention``), the MLP by
``ColwiseParallel``/``RowwiseParallel``, the layer norms replicated. A batch of 2
sequences of 32 positions goes forward and backward once. Per rank it records the bytes
sent (``sitp.distributed.CommCounter``), the collectives called, the bytes of the
block's weights it holds, and the largest difference of the output and of the input's
gradient from the block on one process. The ranks are started with
``sitp.distributed.spawn``. Bytes are properties of the algorithm and the sizes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import sitp.distributed as dist

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "assets" / "part3" / "tp-bytes.json"
CONFIG = {"block_size": 32, "vocab_size": 65, "n_layer": 1, "n_head": 4, "n_embd": 32}
B, T = 2, 32


def measure(rank: int) -> dict:
    import numpy as np

    import sitp
    import sitp.distributed as dist
    from sitp.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )
    from sitp.examples.tensor_parallel import HeadParallelAttention
    from sitp.models.gpt import Block, GPTConfig

    dist.init_process_group()
    cfg = GPTConfig(**CONFIG)
    sitp.manual_seed(0)
    ref = Block(cfg).double()
    sitp.manual_seed(0)
    block = Block(cfg).double()
    plan = {"mlp.c_fc": ColwiseParallel(), "mlp.c_proj": RowwiseParallel()}
    parallelize_module(block, None, plan)  # first: it broadcasts rank 0's weights
    block.attn = HeadParallelAttention(ref.attn)
    rng = np.random.default_rng(0)
    x = sitp.tensor(rng.standard_normal((B, T, cfg.n_embd)))
    w = sitp.tensor(rng.standard_normal((B, T, cfg.n_embd)))

    def run(m):
        xg = x.clone().requires_grad_(True)
        y = m(xg)
        (y * w).sum().backward()
        return y.detach().numpy(), xg.grad.numpy()

    y1, g1 = run(ref)
    with dist.CommCounter() as comm:
        y, g = run(block)
    return {
        "bytes_sent": comm.bytes_sent,
        "calls": comm.calls,
        "weight_bytes": sum(q.numel() * q.element_size() for q in block.parameters()),
        "weight_bytes_one_process": sum(q.numel() * q.element_size() for q in ref.parameters()),
        "activation_bytes": B * T * cfg.n_embd * 8,
        "max_output_diff": float(np.abs(y - y1).max()),
        "max_input_grad_diff": float(np.abs(g - g1).max()),
    }


def plot(record: dict, path: Path) -> None:
    """Two panels against p: the bytes a rank sent for one block's forward and backward,
    in units of the (B, T, C) activations, and its share of the block's weights; the
    formulas as lines."""
    import matplotlib  # late: only for the figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # late: only for the figure

    ps = [run["p"] for run in record["runs"]]
    r0 = [run["ranks"][0] for run in record["runs"]]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    sent = [x["bytes_sent"] / x["activation_bytes"] for x in r0]
    share = [x["weight_bytes"] / x["weight_bytes_one_process"] for x in r0]
    axes[0].bar(ps, sent, width=0.6, label="measured")
    axes[0].plot(ps, [8 * (p - 1) / p for p in ps], "k_", ms=24, mew=2, label="4 all-reduces")
    axes[0].set_title("bytes sent per rank, one block, forward and backward", fontsize=10)
    axes[0].set_ylabel("units of B T C s")
    axes[1].bar(ps, share, width=0.6, color="C2", label="measured")
    axes[1].plot(ps, [1 / p for p in ps], "k_", ms=24, mew=2, label="1/p")
    axes[1].set_title("the block's weights on a rank", fontsize=10)
    axes[1].set_ylabel("share of one process's")
    for ax in axes:
        ax.set_xticks(ps)
        ax.set_xlabel("ranks p")
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
    runs = [{"p": p, "ranks": dist.spawn(measure, nprocs=p, timeout=600)} for p in (1, 2, 4)]
    record = {
        "command": "python scripts/tp_bytes.py",
        "model": "one GPT block, 4 heads, width 32, MLP 128, float64; batch 2 x 32 positions",
        "config": CONFIG,
        "batch": [B, T],
        "runs": runs,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    for run in runs:
        r0, p = run["ranks"][0], run["p"]
        n = r0["activation_bytes"]
        print(
            f"p = {p}: sent {r0['bytes_sent']:,} bytes = {r0['bytes_sent'] / n:.2f} x B T C "
            f"(4 all-reduces: {4 * 2 * (p - 1) / p:.2f}); weights {r0['weight_bytes']:,} of "
            f"{r0['weight_bytes_one_process']:,}; |y - y1| {r0['max_output_diff']:.1e}"
        )
    plot(record, OUT.with_suffix(".png"))
    print(f"wrote {OUT} and {OUT.with_suffix('.png')}")


if __name__ == "__main__":
    main()
