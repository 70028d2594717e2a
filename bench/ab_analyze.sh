#!/usr/bin/env bash
# A/B of two headroom binaries on the pandas comparison's trace: runs them interleaved, each
# pinned to one core, and prints each one's sorted wall times. How every step in
# docs/PERFORMANCE.md was measured against the one before.
#
# Usage: bench/ab_analyze.sh BINARY_A BINARY_B [RUNS]   (env: TRACE, CORE)
set -euo pipefail
a="$1"
b="$2"
runs="${3:-9}"
trace="${TRACE:-build/bench-data/long20m.csv}"
core="${CORE:-0}"
[ -f "$trace" ] || { echo "no $trace: run make bench-pandas once to generate it" >&2; exit 1; }
time_of() {  # wall seconds, to the millisecond
  cat "$trace" > /dev/null
  local start="$EPOCHREALTIME"
  taskset -c "$core" "$1" analyze "$trace" --json --budget-w 330.0007 \
    --windows 0.5s,30s,5min > /dev/null
  local stop="$EPOCHREALTIME"
  awk -v a="$start" -v b="$stop" 'BEGIN { printf "%.3f", b - a }'
}
times_a=()
times_b=()
for _ in $(seq "$runs"); do
  times_a+=("$(time_of "$a")")
  times_b+=("$(time_of "$b")")
done
echo "A ($a): $(printf '%s\n' "${times_a[@]}" | sort -g | tr '\n' ' ')"
echo "B ($b): $(printf '%s\n' "${times_b[@]}" | sort -g | tr '\n' ' ')"
