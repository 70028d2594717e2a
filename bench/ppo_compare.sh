#!/usr/bin/env bash
# PPO updates per second on one core: headroom (BM_PpoUpdate, Eigen, hand-derived gradients)
# against the same update in PyTorch (bench/ppo_update_torch.py, Debian's python3-torch), side by
# side. See docs/PERFORMANCE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bench="${BENCH:-build/bin/headroom_bench}"
core="${CORE:-0}"
cxx=$(taskset -c "$core" "$bench" --benchmark_filter='BM_PpoUpdate$' --benchmark_min_time=3 \
        --benchmark_format=json 2>/dev/null |
      /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["benchmarks"][0]["items_per_second"])')
py=$(taskset -c "$core" /usr/bin/python3 bench/ppo_update_torch.py 5 | awk '{print $1}')
echo "PPO update: batch 4096, minibatch 512, 10 epochs, 17-64-64 tanh actor (5+5) and critic"
printf 'headroom (Eigen):     %8.3f updates/s\n' "$cxx"
printf 'PyTorch %s:    %8.3f updates/s\n' "$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')" "$py"
awk -v a="$cxx" -v b="$py" 'BEGIN {printf "ratio: %.2fx\n", a / b}'
