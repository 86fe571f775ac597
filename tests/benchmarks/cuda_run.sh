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
# CUDA_TESTS=SECONDS also runs the tests marked gpu in tests/test_aoti.py beside the benchmark, at
# the lowest CPU priority, stopped after SECONDS (their output: pytest.txt; their start and end
# are in log.txt's clock, so a reader sees which timings they overlapped). -P and
# --import-mode=append make the tests import the installed archspec wheel, not the checkout's
# archspec/ folder (which has no compiler/ inside: pyproject.toml maps it there on install).
set -uo pipefail
out=${OUT:-cuda-out}; mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv;
  python3 -c "import torch, timm, archspec; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'timm', timm.__version__)";
  which g++ gcc nvcc; nproc; } 2>&1 | tee "$out/env.txt"
if [ -n "${CUDA_TESTS:-}" ]; then
  ( echo "gpu tests start $(date +%T)"; timeout "$CUDA_TESTS" nice -n 19 python3 -P -m pytest -q -p no:cacheprovider --import-mode=append -m gpu \
      tests/test_aoti.py 2>&1; rc=$?; echo "gpu tests end $(date +%T) rc $rc" ) > "$out/pytest.txt" 2>&1 &
fi
python3 tests/benchmarks/bench_vs_peers.py --device cuda --json "$out/cuda.json" --markdown "$@" 2>&1 | tee "$out/log.txt"
wait
