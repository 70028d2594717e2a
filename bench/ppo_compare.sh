#!/usr/bin/env bash
# PPO updates per second on one core: headroom (BM_PpoUpdate: float32 kernels, AVX2/FMA where the
# CPU has them; BM_PpoUpdatePortable: the portable build of the same kernels) against the same
# update in PyTorch (bench/ppo_update_torch.py, Debian's python3-torch), side by side in one run.
# See docs/PERFORMANCE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bench="${BENCH:-build/bin/headroom_bench}"
core="${CORE:-0}"
json=$(taskset -c "$core" "$bench" --benchmark_filter='BM_PpoUpdate' --benchmark_min_time=3 \
         --benchmark_format=json 2>/dev/null)
field() {  # BENCHMARK_NAME KEY
  /usr/bin/python3 -c 'import json,sys
for b in json.load(sys.stdin)["benchmarks"]:
    if b["name"] == sys.argv[1]: print(b[sys.argv[2]])' "$1" "$2" <<< "$json"
}
best=$(field BM_PpoUpdate items_per_second)
label=$(field BM_PpoUpdate label)
portable=$(field BM_PpoUpdatePortable items_per_second)
py=$(taskset -c "$core" /usr/bin/python3 bench/ppo_update_torch.py 5 | awk '{print $1}')
echo "PPO update: batch 4096, minibatch 512, 10 epochs, 22-64-64 tanh actor (5+5+5) and critic, one core"
printf 'headroom, %-9s %8.3f updates/s\n' "$label:" "$best"
printf 'headroom, portable: %8.3f updates/s\n' "$portable"
printf 'PyTorch %s:  %8.3f updates/s\n' "$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')" "$py"
awk -v a="$best" -v p="$portable" -v b="$py" \
  'BEGIN {printf "ratio: %.2fx (%s), %.2fx (portable)\n", a / b, "best", p / b}'
