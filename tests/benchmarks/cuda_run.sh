#!/usr/bin/env bash
# The GPU measurement of issue 21, as run on a lent CUDA machine (the device tool): the wheels
# archspec needs beyond that machine's image (carried in .whl/, archspec's own among them), then
# bench_vs_peers.py --device cuda. Output and the JSON go to $OUT (or ./cuda-out).
# .whl/ was filled on the development machine (the GPU machine reaches no package index):
#   pip wheel --no-deps -w .whl .   and, for the GPU machine's Python 3.12,
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     --platform manylinux_2_28_x86_64 -d .whl pydantic pydantic-core annotated-types typing-inspection \
#     typing-extensions google-re2 timm
#   (and pytest, pluggy, iniconfig, packaging, pygments for CUDA_TESTS below)
# Run on the lent H200 as: bash tests/benchmarks/cuda_run.sh --precisions bf16 fp16 --rounds 5 --deadline 400
# Issue 38's next GPU check (CUDA graphs for archspec's paths and for the decode step; not yet run), one call:
#   CUDA_TESTS=240 GENERATE="--models llama-1b gpt2 --precisions bf16 --rounds 3 --upto 120" \
#     bash tests/benchmarks/cuda_run.sh --models swin_t vit_b16 --precisions bf16 --rounds 5 --deadline 300 \
#     --only cudagraphs reduce-overhead max-autotune aoti   (the peers that can be best on a GPU)
# CUDA_TESTS=SECONDS also runs the tests marked gpu in tests/backends/test_aoti.py and
# tests/generate/test_generate_graphed.py and tests/cli/test_bench.py (CUDA graphs) beside the benchmark, at
# the lowest CPU priority, stopped after SECONDS (their output: pytest.txt; their start and end
# are in log.txt's clock, so a reader sees which timings they overlapped). -P and
# --import-mode=append make the tests import the installed archspec wheel, not the checkout's
# archspec/ folder (which has no compiler/ inside: pyproject.toml maps it there on install).
set -uo pipefail
out=${OUT:-cuda-out}; mkdir -p "$out"
# INSTALLED=1: the wheels are in /tmp/site already (another job installed them beside this one).
[ -n "${INSTALLED:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv;
  python3 -c "import torch, timm, archspec; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'timm', timm.__version__)";
  which g++ gcc nvcc; nproc; } 2>&1 | tee "$out/env.txt"
# Core sets (taskset lists) keep the three jobs off each other's cores: GPU_CORES for the CUDA
# benchmark, TEST_CORES for CUDA_TESTS, CPU_CORES for CPU_BENCH (default: every core for each).
pin() { local cores=$1; shift; if [ -n "$cores" ]; then taskset -c "$cores" "$@"; else "$@"; fi; }
if [ -n "${CUDA_TESTS:-}" ]; then
  ( echo "gpu tests start $(date +%T)"; pin "${TEST_CORES:-}" timeout "$CUDA_TESTS" nice -n 19 python3 -P -m pytest -q \
      -p no:cacheprovider --import-mode=append -m gpu tests/backends/test_aoti.py \
      tests/generate/test_generate_graphed.py tests/cli/test_bench.py 2>&1; rc=$?
    echo "gpu tests end $(date +%T) rc $rc" ) > "$out/pytest.txt" 2>&1 &
fi
# CPU_BENCH="ARGS" also times the host's CPU (an AMX Xeon on the lent H200) with
# bench_vs_peers.py --device cpu ARGS, on CPU_CORES, beside the GPU run (output cpu_log.txt, cpu.json).
if [ -n "${CPU_BENCH:-}" ]; then
  { lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|NUMA node0|L3"; } > "$out/cpu_env.txt" 2>&1
  # shellcheck disable=SC2086 # CPU_BENCH is a list of arguments
  pin "${CPU_CORES:-}" python3 tests/benchmarks/bench_vs_peers.py --device cpu --json "$out/cpu.json" --markdown \
    $CPU_BENCH > "$out/cpu_log.txt" 2>&1 &
fi
# GENERATE="ARGS" times decoding on the GPU first (bench_generate.py --device cuda ARGS, e.g.
# "--models llama-1b llama gpt2 --precisions bf16 --rounds 3"; output generate_log.txt, generate.json).
if [ -n "${GENERATE:-}" ]; then
  # shellcheck disable=SC2086 # GENERATE is a list of arguments
  pin "${GPU_CORES:-}" python3 tests/benchmarks/bench_generate.py --device cuda --json "$out/generate.json" \
    $GENERATE 2>&1 | tee "$out/generate_log.txt"
fi
if [ -n "${GPU_BENCH_OFF:-}" ]; then wait; exit 0; fi
pin "${GPU_CORES:-}" python3 tests/benchmarks/bench_vs_peers.py --device cuda --json "$out/cuda.json" --markdown "$@" 2>&1 \
  | tee "$out/log.txt"
wait
