"""The ring all-reduce's bytes per rank at p = 2, 3 and 4: measured, against 2 (p - 1)/p n.

    python scripts/ring_bytes.py            # writes docs/assets/part3/ring-bytes.json
    python scripts/ring_bytes.py --ranks 6  # p = 2 .. 6 (more ranks than cores is fine)
    python scripts/ring_bytes.py --plot-only  # redraw ring-bytes.png from the record

One job of ``--ranks`` ranks (``python -m sitp.distributed.run``, oversubscribed on a
small machine: the tensors are small and nothing is timed). For each p from 2 up, the
first p ranks form a group and run ``sitp.distributed.ring.ring_all_reduce`` on it as
their default group (the ring uses the default group), under
``sitp.distributed.CommCounter``, which counts the bytes each rank hands to ``isend``.
The sizes are float32 tensors of 1,001, 4,096 and 65,536 elements (1,001 divisible by
none of the p). The record gives, for each p and size, every rank's bytes and the
formula's 2 (p - 1)/p x 4n. Bytes are a property of the algorithm: the same on any
machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "assets" / "part3" / "ring-bytes.json"
FIG = OUT.with_suffix(".png")
SIZES = (1001, 4096, 65536)
MARK = "RINGBYTES "


def rank_main(max_p: int) -> None:
    import numpy as np

    import sitp
    import sitp.distributed as dist
    from sitp.distributed import _c10d
    from sitp.distributed.ring import ring_all_reduce

    dist.init_process_group()
    world = _c10d._WORLD
    rows = []
    for p in range(2, max_p + 1):
        sub = dist.new_group(list(range(p))) if p < world.size() else world
        if sub is not dist.GroupMember.NON_GROUP_MEMBER:
            _c10d._WORLD = sub  # the first p ranks: a world of p for these calls
            try:
                for n in SIZES:
                    x = sitp.tensor(np.ones(n, dtype=np.float32))
                    with dist.CommCounter() as c:
                        ring_all_reduce(x)
                    assert float(x[0]) == p
                    mine = [None] * p
                    dist.all_gather_object(mine, (c.bytes_sent, c.calls.get("isend", 0)))
                    rows.append(
                        {
                            "p": p,
                            "elements": n,
                            "tensor_bytes": 4 * n,
                            "bytes_sent_per_rank": [b for b, _ in mine],
                            "sends_per_rank": [k for _, k in mine],
                            "formula_bytes": 2 * (p - 1) / p * 4 * n,
                        }
                    )
            finally:
                _c10d._WORLD = world
        dist.barrier()
    if dist.get_rank() == 0:
        print(MARK + json.dumps(rows), flush=True)
    dist.destroy_process_group()


def plot(record: dict, path: Path) -> None:
    """Bytes sent per rank over the tensor's bytes against p: every rank's count, and
    the formula 2 (p - 1)/p with its limit 2."""
    import matplotlib  # late: only for the figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # late: only for the figure

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ps = sorted({r["p"] for r in record["rows"]})
    grid = [p / 10 for p in range(15, 10 * max(ps) + 6)]
    ax.plot(grid, [2 * (q - 1) / q for q in grid], color="0.5", label="2 (p - 1) / p")
    ax.axhline(2, color="0.7", ls=":", label="limit: 2")
    marks = {1001: "o", 4096: "s", 65536: "^"}
    for n, m in marks.items():
        rows = [r for r in record["rows"] if r["elements"] == n]
        xs = [r["p"] for r in rows for _ in r["bytes_sent_per_rank"]]
        ys = [b / r["tensor_bytes"] for r in rows for b in r["bytes_sent_per_rank"]]
        ax.scatter(
            xs, ys, marker=m, facecolors="none", edgecolors="C0", label=f"measured, n = {n:,}"
        )
    ax.set_xticks(ps)
    ax.set_xlabel("ranks p")
    ax.set_ylabel("bytes sent per rank / tensor bytes")
    ax.set_ylim(0, 2.2)
    ax.set_title("ring all-reduce: each rank's bytes, every rank")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--json", type=Path, default=OUT)
    ap.add_argument("--plot-only", action="store_true", help="redraw the figure from --json")
    args = ap.parse_args()
    if args.plot_only:
        plot(json.loads(args.json.read_text()), args.json.with_suffix(".png"))
        return
    cmd = [sys.executable, "-m", "sitp.distributed.run", "--nproc-per-node", str(args.ranks)]
    cmd += ["--timeout", "300", __file__, "--rank-side", str(args.ranks)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
    if done.returncode != 0:
        sys.exit(f"the ranks failed:\n{done.stdout}\n{done.stderr}")
    rows = json.loads(next(x for x in done.stdout.splitlines() if x.startswith(MARK))[len(MARK) :])
    record = {
        "command": f"python scripts/ring_bytes.py --ranks {args.ranks}",
        "what": "bytes each rank hands to isend in one ring_all_reduce of a float32 tensor",
        "rows": rows,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=1) + "\n")
    for r in rows:
        got = r["bytes_sent_per_rank"]
        print(
            f"p={r['p']} n={r['elements']:>6}: per rank {min(got):>7}..{max(got):<7} bytes = "
            f"{max(got) / r['tensor_bytes']:.4f} of the tensor; formula "
            f"{r['formula_bytes'] / r['tensor_bytes']:.4f}"
        )
    plot(record, args.json.with_suffix(".png"))
    print(f"wrote {args.json} and {args.json.with_suffix('.png')}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--rank-side":
        rank_main(int(sys.argv[2]))
    else:
        main()
