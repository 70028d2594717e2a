#!/usr/bin/env bash
# Twin ticks per second on one core: headroom (BM_TwinTicks) against the same tick loop written
# plainly in Python + numpy (bench/twin_tick_loop.py), side by side. See docs/PERFORMANCE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bench="${BENCH:-build/bin/headroom_bench}"
core="${CORE:-0}"
scenario="${SCENARIO:-a100-7b-tp1-vllm}"
cxx=$(taskset -c "$core" "$bench" --benchmark_filter="BM_TwinTicks/${scenario//-/_}\$" \
        --benchmark_format=json 2>/dev/null |
      /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["benchmarks"][0]["items_per_second"])')
py=$(taskset -c "$core" /usr/bin/python3 bench/twin_tick_loop.py "scenarios/$scenario.toml" 300000 |
     awk '{print $1}')
echo "scenario $scenario (one GPU)"
printf 'headroom twin:        %12.0f ticks/s\n' "$cxx"
printf 'python + numpy loop:  %12.0f ticks/s\n' "$py"
awk -v a="$cxx" -v b="$py" 'BEGIN {printf "ratio: %.1fx\n", a / b}'
