"""The figure of section 5.4 (inference with a KV cache).

* ``decode-roofline.png``: a decode step at context 255 on the roofline of the machine
  that ran ``scripts/bench_kv_cache.py --roofs``: the step's arithmetic intensity at
  batch 1 and at the benchmark's batch (:func:`per_token`), and the FLOP/s that sitp and
  PyTorch reached there (tokens per second times FLOPs per token), under the machine's
  one-thread roofs, all read from ``kv-cache.json``.

Redraw from the repository root::

    python -m sitp.examples.inference_figures
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sitp.examples._plot import pyplot, save
from sitp.models.gpt import GPTConfig

HERE = Path(__file__).resolve().parent
ASSETS = HERE.parents[2] / "docs" / "assets" / "part3"
BENCH_JSON = HERE / "kv-cache.json"


# --8<-- [start:per_token]
def per_token(c, S, B):
    """FLOPs and bytes moved per generated token: a decode step of B sequences at context S."""
    G, D = c.n_kv_head or c.n_head, c.n_embd // c.n_head
    C, L = c.n_embd, c.n_layer
    W = L * (C * (C + 2 * G * D) + C * C + 8 * C * C) + C * c.vocab_size  # matrix weights
    flops = 2 * W + 4 * L * S * C
    bytes_ = 4 * W / B + 8 * L * S * G * D
    return W, flops, bytes_


# --8<-- [end:per_token]


def decode_points(bench) -> list[dict]:
    """The benchmark's decode steps at its longest context, with the cache: for batch 1
    and its batch, each library's GFLOP/s and the step's intensity (FLOP/byte)."""
    cfg = GPTConfig(**bench["config"])
    S, batch = bench["args"]["contexts"][-1], bench["args"]["batch"]
    points = []
    for B in (1, batch):
        _, flops, bytes_ = per_token(cfg, S, B)
        for lib in ("sitp", "torch"):
            r = bench[lib]
            tokens_s = r["steps"][str(S)]["cached"] if B == 1 else r["batch"]["cached"]
            points.append(
                {
                    "library": lib,
                    "batch": B,
                    "context": S,
                    "intensity": flops / bytes_,
                    "gflops": tokens_s * flops / 1e9,
                }
            )
    return points


def draw_roofline(bench, path: Path) -> Path:
    """The decode steps of :func:`decode_points` under the one-thread roofs of ``bench``."""
    plt = pyplot()
    roofs, points = bench["roofs"], decode_points(bench)
    peak, dram, l2 = roofs["peak_1"], roofs["dram_1"], roofs["l2_1"]
    x = np.logspace(-1.5, 2.5, 300)
    fig, ax = plt.subplots(figsize=(8, 4.4))
    ax.loglog(x, np.minimum(peak, dram * x), color="black", lw=2,
              label=f"roofline: DRAM {dram:.1f} GB/s, peak {peak:.0f} GFLOP/s")  # fmt: skip
    ax.loglog(x, np.minimum(peak, l2 * x), color="gray", ls="--", lw=1,
              label=f"data in L2: {l2:.0f} GB/s")  # fmt: skip
    style = {"sitp": ("o", "#3f51b5"), "torch": ("s", "#ee6c4d")}
    for p in points:
        marker, color = style[p["library"]]
        ax.loglog([p["intensity"]], [p["gflops"]], marker, color=color, ms=8,
                  fillstyle="full" if p["batch"] == 1 else "none", mew=2,
                  label=f"{p['library']}, batch {p['batch']}: {p['gflops']:.2f} GFLOP/s")  # fmt: skip
    ax.set_xlabel("arithmetic intensity of the decode step (FLOP / byte)")
    ax.set_ylabel("GFLOP/s")
    m = bench["harness"]["machine"]
    ax.set_title(f"A decode step at context {points[0]['context']}, one thread: "
                 f"{m['cpu']} ({m['isa']})", fontsize=9)  # fmt: skip
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return save(fig, path)


def main() -> None:
    bench = json.loads(BENCH_JSON.read_text())
    print("wrote", draw_roofline(bench, ASSETS / "decode-roofline.png"))


if __name__ == "__main__":
    main()
