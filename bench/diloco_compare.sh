#!/usr/bin/env bash
# The inner step of `headroom diloco` (libtorch from C++, BM_ByteLmTrainStep) against the same
# step in Python with Debian's python3-torch (bench/diloco_step_torch.py), one thread, one core,
# side by side, then the per-round hot paths. See docs/PERFORMANCE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bench="${BENCH:-build/bin/headroom_diloco_bench}"
core="${CORE:-0}"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for shape in "8 64" "8 128"; do
  set -- $shape
  cxx=$(taskset -c "$core" "$bench" --benchmark_filter="BM_ByteLmTrainStep/$1/$2\$" \
          --benchmark_min_time=5 --benchmark_format=json 2>/dev/null |
        /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["benchmarks"][0]["items_per_second"])')
  py=$(taskset -c "$core" /usr/bin/python3 bench/diloco_step_torch.py "$1" "$2" 5)
  printf 'inner step, tiny model, batch %s x %s bytes: libtorch (C++) %8.0f tokens/s, PyTorch %s %8.0f tokens/s, ratio %s\n' \
    "$1" "$2" "$cxx" "$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')" "$py" \
    "$(awk -v a="$cxx" -v b="$py" 'BEGIN {printf "%.2fx", a / b}')"
done
taskset -c "$core" "$bench" --benchmark_filter='BM_(EncodeInt8|AggregateRound4|ModelSha256)' 2>/dev/null
