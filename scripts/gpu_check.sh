#!/usr/bin/env bash
# One short run of everything that needs a real NVIDIA GPU, for a machine lent for minutes:
#   1. the GEMM ladder against cuBLAS (section 4.4) and the attention kernels (4.6);
#   2. a GPT training step: sitp's GPT, nanoGPT's model file on sitp and on PyTorch's CUDA
#      build (scripts/bench_gpu_train.py), and the CLI training a GPT on the device;
#      and a cProfile of sitp's step (where the host's time goes: launches or waiting);
#   3. eager against compiled CUDA (scripts/bench_compile_cuda.py, section 6.3);
#   4. with the time left (BUDGET seconds in all, 500 by default), every test of the CUDA
#      test files on the device, the simulator off: the tests marked gpu and the rest.
# Usage: scripts/gpu_check.sh [OUTDIR]   (default: $OUT, else gpu-results/)
# Every output lands in OUTDIR (eight files) with the device's name, for the book.
# Packages the machine lacks can sit in .gpu/site (put on PYTHONPATH), wheels of other
# versions in .gpu/whl (installed into a folder put first on PYTHONPATH: the lent machine
# pairs numba-cuda 0.30.4 with NumPy 2.5, which dropped np.row_stack that numba-cuda's
# typing refers to); SITP_DATA_DIR defaults to .gpu/data when that folder exists.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${1:-${OUT:-gpu-results}}"
mkdir -p "$out"
budget="${BUDGET:-500}"
extra=""
[ -d .gpu/site ] && extra=":$PWD/.gpu/site"
py="${PYTHON:-python3}"
if ls .gpu/whl/*.whl >/dev/null 2>&1; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/gpu-site .gpu/whl/*.whl && extra=":/tmp/gpu-site$extra"
fi
[ -d .gpu/data ] && export SITP_DATA_DIR="${SITP_DATA_DIR:-$PWD/.gpu/data}"
export NUMBA_ENABLE_CUDASIM=0 PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src$extra${PYTHONPATH:+:$PYTHONPATH}"
log="$out/log.txt"
status=0

step() {  # step LIMIT NAME COMMAND...: run with a time limit, log it, remember a failure
    local limit=$1 name=$2
    shift 2
    echo "== $name (limit ${limit} s, at ${SECONDS} s)" | tee -a "$log"
    local t0=$SECONDS
    timeout "$limit" "$@" 2>&1 | tee -a "$log"
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$log"
    [ "$rc" -eq 0 ] || status=1
}

{
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv
    "$py" -c "import sys, numba, numpy; print(sys.version.split()[0], 'numba', numba.__version__, 'numpy', numpy.__version__)"
    "$py" -c "import numba_cuda; print('numba-cuda', numba_cuda.__version__)"
    "$py" -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
} 2>&1 | tee -a "$log"

step 80 gpu-gemm "$py" -m sitp.bench gpu-gemm --json "$out/gemm.json"
step 80 gpu-attention "$py" -m sitp.bench gpu-attention --json "$out/attention.json"
step 60 "GPT training step, anchor" "$py" scripts/bench_gpu_train.py --config anchor \
    --rounds 5 --reps 3 --json "$out/train-anchor.json"
step 150 "GPT training step, char" "$py" scripts/bench_gpu_train.py --config char \
    --rounds 3 --reps 1 --json "$out/train-char.json"
step 60 "where a step's host time goes" bash -c "\"$py\" scripts/bench_gpu_train.py --config anchor \
    --profile > \"$out/profile.txt\""
step 50 "eager and compiled CUDA" "$py" scripts/bench_compile_cuda.py --json "$out/compile.json"
step 45 "sitp train --device cuda" "$py" -m sitp train --model gpt --steps 200 --device cuda \
    --out /tmp/gpt-run --quiet
left=$((budget - SECONDS))
if [ "$left" -gt 30 ]; then
    step "$left" "CUDA test files in full, on the device" "$py" -m pytest -q -rfE --tb=short -p no:cacheprovider \
        -n 12 tests/test_gpu_kernels.py tests/test_cuda_backend.py tests/test_gpu_fused.py \
        tests/test_compile_cuda.py tests/test_gpu_extremes.py
fi
echo "== done at ${SECONDS} s, status $status" | tee -a "$log"
exit $status
