#!/usr/bin/env bash
# The demo: synthetic GRPO-like training traces (until the twin lands), analyzed at every window
# and composed into a fleet, with HTML reports. Usage: demo.sh HEADROOM_BINARY OUT_DIR
set -euo pipefail
headroom="$1"
out="$2"
mkdir -p "$out"

echo "== 1. Two synthetic jobs: 4 and 2 A100-class GPUs (400 W nameplate), 30 min at 0.1 s"
"$headroom" synth --gpus 4 --duration-s 1800 --interval-s 0.1 --seed 7 --out "$out/job-a.csv"
"$headroom" synth --gpus 2 --duration-s 1800 --interval-s 0.1 --seed 8 --out "$out/job-b.csv"

echo
echo "== 2. headroom analyze: one job against a 330 W per-GPU budget"
"$headroom" analyze "$out/job-a.csv" --budget-w 330 --report "$out/analyze.html"

echo
echo "== 3. headroom fleet: 2 copies of job A + 4 of job B = 16 GPUs, random starts, 200 trials"
"$headroom" fleet "$out/job-a.csv:2" "$out/job-b.csv:4" --trials 200 --seed 1 \
  --budget-fraction 0.8 --report "$out/fleet.html"

echo
echo "Reports:"
echo "  $(realpath "$out/analyze.html")"
echo "  $(realpath "$out/fleet.html")"
