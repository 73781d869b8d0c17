"""Run sitp's CPU benchmarks for this host's code and for the other x86 vector ISA, side by side.

sitp sizes its GEMM tile and numba generates its code for the CPU it runs on. On an
AVX-512 host, the AVX2 code can run too: numba compiles it when ``NUMBA_CPU_FEATURES``
turns the AVX-512 features off. This script runs the same benchmark commands once per
target, each in a fresh process (sitp keys its compile cache on the target, so the
two never share machine code), and prints the outputs one after the other:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python scripts/bench_targets.py \\
        --out-dir build/bench-targets

On an AVX2-only host the AVX-512 code cannot run, and only the host's is measured.
Each run's machine line names the CPU and the target it compiled for.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import llvmlite.binding as llvm

COMMANDS = {
    "config": [sys.executable, "-m", "sitp.bench", "config"],
    "microkernel": [sys.executable, "-m", "sitp.bench", "microkernel", "--rounds", "5"],
    "gemm": [sys.executable, "-m", "sitp.bench", "gemm", "--clock", "cpu", "--rounds", "3", "--max-wait", "2"],
    "roofline": [sys.executable, "-m", "sitp.bench", "roofline", "--clock", "cpu", "--max-wait", "2"],
    "gpt": [sys.executable, "scripts/compare_torch.py", "--skip-train", "--bench-steps", "40",
            "--repeats", "5"],
}


def targets() -> dict[str, dict[str, str]]:
    """name: environment overrides. The host's own code, and AVX2 where the host has AVX-512."""
    from sitp._target import host_features_without_avx512

    found = {"host": {}}
    if llvm.get_host_cpu_features().get("avx512f"):
        found["avx2"] = {"NUMBA_CPU_NAME": llvm.get_host_cpu_name(),
                         "NUMBA_CPU_FEATURES": host_features_without_avx512()}
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--commands", nargs="+", choices=list(COMMANDS), default=["config", "microkernel", "gemm"])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2], help="for the gpt command")
    p.add_argument("--out-dir", help="also write each run's output (and JSON where the command has it) here")
    args = p.parse_args(argv)
    out = Path(args.out_dir) if args.out_dir else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    status = 0
    for command in args.commands:
        for target, overrides in targets().items():
            runs = [[]] if command != "gpt" else [["--threads", str(t)] for t in args.threads]
            for extra in runs:
                cmd = COMMANDS[command] + extra
                if out and command in ("gemm", "roofline"):
                    cmd += ["--json", str(out / f"{command}-{target}.json")]
                if out and command == "roofline":
                    cmd += ["--out", str(out / f"roofline-{target}.png")]
                    if (out / f"gemm-{target}.json").exists():
                        cmd += ["--gemm-json", str(out / f"gemm-{target}.json")]
                env = {**os.environ, **overrides}
                title = f"== {command} {' '.join(extra)}, target {target}"
                if overrides:
                    title += f" (NUMBA_CPU_NAME={overrides['NUMBA_CPU_NAME']}, AVX-512 features off)"
                print(title, flush=True)
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
                print(proc.stdout, flush=True)
                if proc.returncode:
                    print(proc.stderr[-4000:], file=sys.stderr)
                    status = 1
                if out:
                    name = f"{command}{'-'.join([''] + extra[1:])}-{target}.txt"
                    (out / name).write_text(proc.stdout)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
