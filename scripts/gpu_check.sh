#!/usr/bin/env bash
# One short run of everything that needs a real NVIDIA GPU: the gpu-marked tests, the GEMM
# and attention benchmarks (against cuBLAS through CuPy or PyTorch's CUDA build, when
# importable), and a short GPT training run on the device through the CLI.
# Usage: scripts/gpu_check.sh [OUTDIR]   (default: gpu-results/)
# Every output lands in OUTDIR with the device's name, so the figures can go into the book.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${1:-${OUT:-gpu-results}}"
mkdir -p "$out"
export NUMBA_ENABLE_CUDASIM=0 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
py="${PYTHON:-python3}"
nvidia-smi -L | tee "$out/device.txt"
status=0
echo "== gpu-marked tests" | tee -a "$out/summary.txt"
timeout 240 "$py" -m pytest -m gpu -q -p no:cacheprovider tests 2>&1 | tail -25 | tee "$out/tests.txt" || status=1
echo "== gpu-gemm" | tee -a "$out/summary.txt"
timeout 200 "$py" -m sitp.bench gpu-gemm 2>&1 | tee "$out/gpu-gemm.txt" || status=1
echo "== gpu-attention" | tee -a "$out/summary.txt"
timeout 200 "$py" -m sitp.bench gpu-attention 2>&1 | tee "$out/gpu-attention.txt" || status=1
echo "== GPT on the device, 200 steps" | tee -a "$out/summary.txt"
timeout 200 "$py" -m sitp train --model gpt --steps 200 --device cuda --out "$out/gpt-run" --quiet \
    2>&1 | tail -8 | tee "$out/gpt-train.txt" || status=1
exit $status
