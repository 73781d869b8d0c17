"""The ring all-reduce's bytes per rank at p = 2, 3 and 4: measured, against 2 (p - 1)/p n.

    python scripts/ring_bytes.py            # writes docs/assets/part3/ring-bytes.json
    python scripts/ring_bytes.py --ranks 6  # p = 2 .. 6 (more ranks than cores is fine)

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--json", type=Path, default=OUT)
    args = ap.parse_args()
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
    print(f"wrote {args.json}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--rank-side":
        rank_main(int(sys.argv[2]))
    else:
        main()
