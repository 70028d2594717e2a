#!/usr/bin/env bash
# Trains the shipped policies (policies/*.json) with the commands recorded inside each file.
# One core each, two at a time; each finishes within 10 minutes on a 2-core machine.
# Usage: train_policies.sh HEADROOM_BINARY
set -euo pipefail
headroom="$1"
cd "$(dirname "$0")/.."
mkdir -p policies
train() {
  local name="$1"
  shift
  echo "== $name"
  "$headroom" train --scenario "$name" --seed 1 --out "policies/$name.json" "$@"
}
train a100-7b-tp1 --timesteps 5000000 --violation-target 0.01 &
train a100-72b-tp4 --timesteps 1500000 --violation-target 0.02 --cost-window-s 30 &
wait
train h100-8b-tp1 --timesteps 3000000 &
train a100-14b-tp2 --timesteps 2000000 &
wait
train h100-70b-tp4 --timesteps 1500000 &
# The paper's null result: at 72B a policy that may only move group size.
"$headroom" train --scenario a100-72b-tp4 --actuators group_size --timesteps 500000 --seed 1 \
  --violation-target 0.02 --cost-window-s 30 --out policies/a100-72b-tp4-group-only.json &
wait
# Generalisation (docs/RESULTS.md): two policies each without one scenario, one at a single budget.
"$headroom" train --scenario a100-7b-tp1,a100-14b-tp2,h100-70b-tp4 --timesteps 3000000 --seed 1 \
  --out policies/loso-without-h100-8b-tp1.json &
"$headroom" train --scenario h100-8b-tp1,a100-14b-tp2,h100-70b-tp4 --timesteps 3000000 --seed 1 \
  --out policies/loso-without-a100-7b-tp1.json &
wait
"$headroom" train --scenario a100-7b-tp1 --budget-w 314.6 --timesteps 4000000 --seed 1 \
  --out policies/a100-7b-tp1-at-314.6w.json &
wait
