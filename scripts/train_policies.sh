#!/usr/bin/env bash
# Trains the shipped policies (policies/*.json) with the commands recorded inside each file.
#
# Every scenario's recipe is trained with 5 seeds (policies/seeds/NAME-seedK.json); each seed's
# policy is evaluated on the evaluation seeds (1-10, the same episodes as docs/RESULTS.md), and the
# median by tokens is shipped as policies/NAME.json; policies/seeds/spread.md is the table of all
# five (docs/RESULTS.md, "Seed robustness"). The generalisation and null-result policies train one
# seed. Two jobs at a time, one core each.
# Usage: train_policies.sh HEADROOM_BINARY [SEEDS]
# ONLY="NAME ..." in the environment retrains those recipes alone (no extras); the table is
# remade from every recipe's evaluations on disk.
set -euo pipefail
headroom="$1"
seeds="${2:-5}"
cd "$(dirname "$0")/.."
mkdir -p policies/seeds
jobs_max=2
# shellcheck source=scripts/policy_recipes.sh
source "scripts/policy_recipes.sh"
all_names=("${recipes[@]%%|*}")
if [ -n "${ONLY:-}" ]; then
  kept=()
  for r in "${recipes[@]}"; do
    for o in $ONLY; do [ "${r%%|*}" = "$o" ] && kept+=("$r"); done
  done
  recipes=("${kept[@]}")
fi
for r in "${recipes[@]}"; do
  IFS='|' read -r name steps options <<< "$r"
  for k in $(seq 1 "$seeds"); do
    wait_slot
    echo "== $name seed $k"
    # shellcheck disable=SC2086
    "$headroom" train $options $(select_options "$steps") --seed "$k" \
      --out "policies/seeds/$name-seed$k.json" > "policies/seeds/$name-seed$k.train.txt" &
  done
done
if [ -z "${ONLY:-}" ]; then
# The paper's null result: at 72B a policy that may only move group size.
wait_slot
"$headroom" train --scenario a100-72b-tp4 --actuators group_size --timesteps 500000 --seed 1 \
  --violation-target 0.02 --cost-window-s 30 --out policies/a100-72b-tp4-group-only.json > /dev/null &
# Generalisation (docs/RESULTS.md): two policies each without one scenario, one at a single budget.
wait_slot
"$headroom" train --scenario a100-7b-tp1,a100-14b-tp2,h100-70b-tp4 --timesteps 3000000 --seed 1 \
  --out policies/loso-without-h100-8b-tp1.json > /dev/null &
wait_slot
"$headroom" train --scenario h100-8b-tp1,a100-14b-tp2,h100-70b-tp4 --timesteps 3000000 --seed 1 \
  --out policies/loso-without-a100-7b-tp1.json > /dev/null &
wait_slot
"$headroom" train --scenario a100-7b-tp1 --budget-w 314.6 --timesteps 4000000 --seed 1 \
  --out policies/a100-7b-tp1-at-314.6w.json > /dev/null &
fi
wait

# Every seed on the evaluation episodes; the median by tokens is shipped.
for r in "${recipes[@]}"; do
  IFS='|' read -r name steps _ <<< "$r"
  for k in $(seq 1 "$seeds"); do
    wait_slot
    "$headroom" eval --scenario "$name" --policy "policies/seeds/$name-seed$k.json" --seeds 10 \
      --steps "$steps" --controllers static-safe,power-cap,pid,ppo --threads 1 --json \
      > "policies/seeds/$name-seed$k.eval.json" &
  done
done
wait
/usr/bin/python3 scripts/seed_spread.py policies/seeds "$seeds" "${all_names[@]}"
