"""The recorded benchmarks and the figures of chapter 7, distributed training.

* ``collectives-bench.json``: what ``scripts/bench_collectives.py`` printed (all_reduce,
  all_gather and broadcast, mpi4py against sitp, 1 KB to 64 MB on 2 ranks), read back
  from its table into numbers; ``ring-bench.json`` the same for ``scripts/bench_ring.py``
  (the teaching ring against MPI's Allreduce). :func:`record` runs the two scripts and
  writes both files; the pages and figures read only the files.
* ``collectives-bandwidth.png``: bus bandwidth against message size for the three
  collectives, and all_reduce's time with the alpha-beta fits (:func:`fit_alpha_beta`,
  one line for every size and one per regime, :func:`fit_regimes`).
* ``ddp-timeline.png``: one traced step of DDP on 2 ranks, from ``ddp-bench.json``
  (``scripts/bench_ddp.py``): forward, backward, the moments gradients arrive, and each
  bucket's all-reduce from launch to completion (:func:`draw_timeline`).
* ``ring-steps.png``: the ring all-reduce on 4 ranks, step by step, from a simulation of
  the algorithm (:func:`ring_states`) that counts which ranks' values each chunk holds.

Rerun the benchmarks (a few minutes on 2 cores) and redraw, from the repository root::

    python -m sitp.examples.distributed_figures --record
    python -m sitp.examples.distributed_figures          # redraw from the recorded files
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from sitp.examples._plot import pyplot, save

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
ASSETS = ROOT / "docs" / "assets" / "part3"
COLLECTIVES_JSON = HERE / "collectives-bench.json"
RING_JSON = HERE / "ring-bench.json"
DDP_JSON = HERE / "ddp-bench.json"  # scripts/bench_ddp.py's record
OPS = {"ar": "all_reduce", "ag": "all_gather", "bc": "broadcast"}


# ------------------------------------------------------------------ reading the tables
_SIZE = re.compile(r"^\s*([\d.]+) (KB|MB) \|")


def _bytes(line: str) -> int | None:
    m = _SIZE.match(line)
    if m is None:
        return None
    return int(float(m.group(1)) * (1024 if m.group(2) == "KB" else 2**20))


def _header(lines: list[str]) -> dict:
    out = {}
    for line in lines:
        if "CPU: " in line and "cpu" not in out:
            out["cpu"] = line.split("CPU: ", 1)[1].strip()
            m = re.search(r"(\d+) ranks", line)
            out["nproc"] = int(m.group(1)) if m else None
            out["oversubscribed"] = "OVERSUBSCRIBED" in line
        elif line.startswith("MPI: ") and "mpi" not in out:
            out["mpi"] = re.sub(r"\s+", " ", line[5:].strip())
    return out


def parse_collectives(text: str) -> dict:
    """The numbers of bench_collectives.py's report: for each size, the seconds per call
    of mpi4py (``ar_raw``, ...) and of sitp (``ar_sitp``, ...); the launch times."""
    lines = text.splitlines()
    run = _header(lines)
    m = re.search(r": ([\d.]+) s \(median of 3\); .*python script\.py: ([\d.]+) s", text)
    if m:
        run["launch_s"], run["alone_s"] = float(m.group(1)), float(m.group(2))
    rows = []
    for line in lines:
        nbytes = _bytes(line)
        if nbytes is None:
            continue
        cells = line.split("|")[1:]
        row = {"bytes": nbytes}
        for op, cell in zip(OPS, cells):
            raw_us, sitp_us = cell.split()[:2]
            row[f"{op}_raw"], row[f"{op}_sitp"] = float(raw_us) * 1e-6, float(sitp_us) * 1e-6
        rows.append(row)
    run["rows"] = rows
    return run


def parse_ring(text: str) -> list[dict]:
    """One entry per run of bench_ring.py's report (one per number of ranks): the seconds
    per call of MPI's Allreduce, sitp's all_reduce and the ring, for each size."""
    runs, current = [], None
    for line in text.splitlines():
        if line.startswith("all-reduce of float32 messages"):
            current = {**_header([line]), "rows": []}
            runs.append(current)
        elif line.startswith("MPI: ") and current is not None:
            current["mpi"] = re.sub(r"\s+", " ", line[5:].strip())
        elif current is not None and _bytes(line) is not None:
            mpi_us, sitp_us, ring_us = line.split("|")[1].split()
            current["rows"].append(
                {
                    "bytes": _bytes(line),
                    "mpi": float(mpi_us) * 1e-6,
                    "sitp": float(sitp_us) * 1e-6,
                    "ring": float(ring_us) * 1e-6,
                }
            )
    return runs


def record(nproc: int = 2, max_mb: float = 64, ring_nproc=(2,)) -> tuple[dict, dict]:
    """Run the two benchmark scripts (each starts its own ranks) and write their numbers,
    and what they printed, to ``collectives-bench.json`` and ``ring-bench.json``."""
    py = [sys.executable]
    coll_cmd = ["scripts/bench_collectives.py", "--nproc", str(nproc), "--max-mb", str(max_mb)]
    ring_cmd = ["scripts/bench_ring.py", "--nproc", *map(str, ring_nproc), "--max-mb", str(max_mb)]
    results = []
    for cmd, parse, path in (
        (coll_cmd, parse_collectives, COLLECTIVES_JSON),
        (ring_cmd, parse_ring, RING_JSON),
    ):
        text = subprocess.run(py + cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
        parsed = parse(text)
        out = {"command": "python " + " ".join(cmd), "stdout": text.splitlines()}
        out.update(parsed if isinstance(parsed, dict) else {"runs": parsed})
        path.write_text(json.dumps(out, indent=1) + "\n")
        results.append(out)
        print(text)
    return results[0], results[1]


def load_collectives() -> dict:
    return json.loads(COLLECTIVES_JSON.read_text())


def load_ring() -> dict:
    return json.loads(RING_JSON.read_text())


# ------------------------------------------------------------------ the cost model
def bus_factor(op: str, p: int) -> float:
    """nccl-tests' bus bandwidth factor: the bytes a rank moves per byte of the message
    (all_reduce 2(p-1)/p, all_gather (p-1)/p of the gathered whole, broadcast 1)."""
    return {"ar": 2 * (p - 1) / p, "ag": (p - 1) / p * p, "bc": 1.0}[op]


def fit_alpha_beta(sizes, times) -> tuple[float, float, float]:
    """The line t(m) = alpha + beta m through the points, least squares on the relative
    error (so that 1 KB and 64 MB count alike): (alpha s, beta s/byte, worst relative
    error of the fit over the points)."""
    m, t = np.asarray(sizes, float), np.asarray(times, float)
    a = np.stack([1 / t, m / t], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    worst = float(np.max(np.abs((alpha + beta * m) / t - 1)))
    return float(alpha), float(beta), worst


def fit_beta(sizes, times, alpha: float) -> tuple[float, float, float]:
    """The slope beta of t(m) = alpha + beta m with alpha given, least squares on the
    relative error: (alpha, beta, worst relative error)."""
    m, t = np.asarray(sizes, float), np.asarray(times, float)
    x, y = m / t, 1 - alpha / t
    beta = float(x @ y / (x @ x))
    return float(alpha), beta, float(np.max(np.abs((alpha + beta * m) / t - 1)))


def fit_regimes(sizes, times, split: int | None = None) -> dict:
    """alpha-beta fits of all_reduce's times: one line through every size (``"all"``), and
    two regimes either side of ``split`` bytes (by default the size with the highest
    bandwidth m / t, which belongs to both): ``"small"``, alpha and beta fitted up to it,
    and ``"large"``, from it on, a new beta with the small regime's alpha (where alpha is a
    fraction of a percent of the time, its own fit would be noise). Each is (alpha s,
    beta s/byte, worst relative error over its points)."""
    m, t = np.asarray(sizes, float), np.asarray(times, float)
    if split is None:
        split = int(m[np.argmax(m / t)])
    small, large = m <= split, m >= split
    out = {"split": split, "all": fit_alpha_beta(m, t)}
    out["small"] = fit_alpha_beta(m[small], t[small]) if small.sum() >= 2 else out["all"]
    if large.sum() >= 2:
        out["large"] = fit_beta(m[large], t[large], out["small"][0])
    return out


def model_time(fit, m):
    """The fitted time of a message of ``m`` bytes."""
    alpha, beta = fit[0], fit[1]
    return alpha + beta * np.asarray(m, float)


# ------------------------------------------------------------------ the ring, simulated
def ring_states(p: int) -> list[tuple[str, np.ndarray]]:
    """The ring all-reduce on ``p`` ranks as ``ring_all_reduce`` runs it, one chunk per
    rank: a list of (caption, held) where ``held[r, k]`` is the set of ranks whose values
    rank ``r``'s copy of chunk ``k`` sums, as a bit mask, after each step."""
    held = np.array([[1 << r for _ in range(p)] for r in range(p)], dtype=np.int64)
    states = [("start: each rank holds its own values", held.copy())]
    for s in range(p - 1):  # reduce-scatter: rank r sends chunk r - s, adds chunk r - s - 1
        sent = [held[r, (r - s) % p] for r in range(p)]
        for r in range(p):
            held[r, (r - s - 1) % p] |= sent[(r - 1) % p]
        states.append((f"reduce-scatter step {s + 1}", held.copy()))
    for s in range(p - 1):  # all-gather: rank r sends chunk r - s + 1, overwrites chunk r - s
        sent = [held[r, (r - s + 1) % p] for r in range(p)]
        for r in range(p):
            held[r, (r - s) % p] = sent[(r - 1) % p]
        states.append((f"all-gather step {s + 1}", held.copy()))
    return states


def _members(mask: int, p: int) -> str:
    return "+".join(str(r) for r in range(p) if mask >> r & 1)


# ------------------------------------------------------------------ the figures
def _size_ticks(ax):
    ticks = [2**10, 2**14, 2**18, 2**22, 2**26]
    ax.set_xticks(ticks, ["1 KB", "16 KB", "256 KB", "4 MB", "64 MB"])
    ax.set_xlabel("message size")


def draw_bandwidth(run: dict, path: Path) -> Path:
    """Left: bus bandwidth against size, mpi4py solid, sitp dashed. Right: all_reduce's
    time per call and the alpha-beta fits."""
    plt = pyplot()
    rows, p = run["rows"], run["nproc"]
    m = np.array([r["bytes"] for r in rows], float)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for i, (op, name) in enumerate(OPS.items()):
        moved = m * bus_factor(op, p)
        for who, style, label in (("raw", "o-", "mpi4py"), ("sitp", "s--", "sitp")):
            t = np.array([r[f"{op}_{who}"] for r in rows])
            left.plot(m, moved / t / 1e9, style, color=f"C{i}", label=f"{name}, {label}", ms=4)
    left.set_xscale("log", base=2)
    _size_ticks(left)
    left.set_ylabel("bus bandwidth, GB/s")
    left.grid(alpha=0.3)
    left.legend(fontsize=7, ncol=2)
    left.set_title(f"{p} ranks on one machine; {run['cpu']}", fontsize=8)
    t = np.array([r["ar_sitp"] for r in rows])
    fits = fit_regimes(m, t)
    right.plot(m, t * 1e6, "s", color="C0", label="sitp all_reduce, measured")
    grid = np.logspace(np.log10(m[0]), np.log10(m[-1]), 100)
    a, b, e = fits["all"]
    right.plot(
        grid,
        model_time(fits["all"], grid) * 1e6,
        ":",
        color="k",
        label=f"one line: α={a * 1e6:.0f} µs, 1/β={1 / b / 1e9:.2f} GB/s (worst {e:.0%})",
    )
    for key, color in (("small", "C2"), ("large", "C3")):
        if key in fits:
            a, b, e = fits[key]
            keep = grid <= fits["split"] if key == "small" else grid >= fits["split"]
            right.plot(
                grid[keep],
                model_time(fits[key], grid[keep]) * 1e6,
                "-",
                color=color,
                label=f"{key}: α={a * 1e6:.0f} µs, 1/β={1 / b / 1e9:.2f} GB/s (worst {e:.0%})",
            )
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    _size_ticks(right)
    right.set_ylabel("time per all_reduce, µs")
    right.grid(alpha=0.3)
    right.legend(fontsize=7)
    right.set_title("t(m) = α + β m, fitted on the relative error", fontsize=8)
    return save(fig, path)


def draw_ring(path: Path, p: int = 4) -> Path:
    """The ring all-reduce's states on ``p`` ranks: rows are ranks, columns chunks; a cell
    says whose values it sums ("all": the complete sum, outlined), darker for more."""
    plt = pyplot()
    states = ring_states(p)
    cols = (len(states) + 1) // 2
    fig, axes = plt.subplots(2, cols, figsize=(2.6 * cols, 5.6))
    axes = axes.ravel()
    for ax in axes[len(states) :]:
        ax.set_axis_off()
    full = (1 << p) - 1
    for ax, (caption, held) in zip(axes, states):
        counts = np.vectorize(lambda x: bin(int(x)).count("1"))(held)
        ax.imshow(counts, cmap="Blues", vmin=0, vmax=p + 1)
        for r in range(p):
            for k in range(p):
                label = "all" if held[r, k] == full else _members(int(held[r, k]), p)
                ax.text(k, r, label, ha="center", va="center", fontsize=7)
                if held[r, k] == full:
                    ax.add_patch(
                        plt.Rectangle(
                            (k - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="C3", linewidth=1.5
                        )
                    )
        ax.set_xticks(range(p), [f"c{k}" for k in range(p)], fontsize=7)
        ax.set_yticks(range(p), [f"rank {r}" for r in range(p)], fontsize=7)
        ax.set_title(caption, fontsize=8)
    return save(fig, path)


def draw_timeline(run: dict, path: Path) -> Path:
    """One DDP step per rank: forward and backward as bars, the arrival of each gradient
    as a tick, each bucket's all-reduce from its launch to its completion beneath."""
    plt = pyplot()
    ranks = run["timeline"]["ranks"]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 1.1 * len(ranks)))
    for r, t in enumerate(ranks):
        y = (len(ranks) - 1 - r) * 2.0
        fwd = (t["forward_start_ms"], t["backward_start_ms"] - t["forward_start_ms"])
        bwd = (t["backward_start_ms"], t["backward_end_ms"] - t["backward_start_ms"])
        ax.broken_barh([fwd], (y + 0.9, 0.6), color="#9ecae1", label="forward" if r == 0 else None)
        ax.broken_barh([bwd], (y + 0.9, 0.6), color="#fdae6b", label="backward" if r == 0 else None)
        ax.vlines(
            t["grads_ready_ms"],
            y + 0.8,
            y + 1.6,
            color="k",
            lw=0.5,
            label="a gradient ready" if r == 0 else None,
        )
        for b in t["buckets"]:
            span = (b["launch_ms"], b["complete_ms"] - b["launch_ms"])
            ax.broken_barh(
                [span],
                (y + 0.15, 0.5),
                color=f"C{2 + b['bucket']}",
                label=f"bucket {b['bucket']} all-reduce ({b['bytes'] / 2**20:.2f} MiB)"
                if r == 0
                else None,
            )
        ax.text(-2, y + 0.8, f"rank {r}", ha="right", va="center")
    ax.set_yticks([])
    ax.set_xlabel("milliseconds from the start of the step")
    ax.set_xlim(left=-12)
    ax.legend(loc="upper center", fontsize=7, ncol=5, bbox_to_anchor=(0.5, -0.28))
    cfg = run["config"]
    ax.set_title(
        f"DDP on {len(ranks)} ranks: one step of the {cfg['n_layer']}-layer GPT, "
        f"global batch {cfg['global_batch']} ({run['cpu']})",
        fontsize=8,
        pad=34,
    )
    return save(fig, path)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="rerun the two benchmarks first")
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args(argv)
    if args.record:
        record(nproc=args.nproc)
    run = load_collectives()
    print("wrote", draw_bandwidth(run, ASSETS / "collectives-bandwidth.png"))
    print("wrote", draw_ring(ASSETS / "ring-steps.png"))
    if DDP_JSON.exists():
        ddp = json.loads(DDP_JSON.read_text())
        print("wrote", draw_timeline(ddp, ASSETS / "ddp-timeline.png"))


if __name__ == "__main__":
    main()
