#!/usr/bin/env bash
# Reruns every evaluation of docs/RESULTS.md with the shipped policies; writes JSON and HTML
# reports to OUT_DIR and prints the tables. Usage: control_results.sh HEADROOM_BINARY OUT_DIR
set -euo pipefail
headroom="$1"
out="$2"
cd "$(dirname "$0")/.."
mkdir -p "$out"
eval_one() {  # NAME SCENARIO POLICY [OPTIONS...]
  local name="$1" scenario="$2" policy="$3"
  shift 3
  echo "== $name"
  "$headroom" eval --scenario "$scenario" --policy "$policy" --report "$out/$name.html" "$@" |
    tee "$out/$name.txt"
  "$headroom" eval --scenario "$scenario" --policy "$policy" --json "$@" > "$out/$name.json"
}
# The paper's 7B (violations in 0.5 s windows) and 72B (in 30 s windows) results.
eval_one a100-7b-tp1 a100-7b-tp1 policies/a100-7b-tp1.json --seeds 10 --steps 500
eval_one a100-72b-tp4 a100-72b-tp4 policies/a100-72b-tp4.json --seeds 10 --steps 8
# The same two on the paper's own footing: every controller runs exactly the steps (its 7B
# replay held 500 steps and let tokens per step grow).
eval_one a100-7b-tp1-steps-horizon a100-7b-tp1 policies/a100-7b-tp1.json --seeds 10 --steps 500 \
  --horizon steps
eval_one a100-72b-tp4-steps-horizon a100-72b-tp4 policies/a100-72b-tp4.json --seeds 10 --steps 8 \
  --horizon steps
# The paper's null result: a PPO that may only move group size at 72B (concurrency pinned at 8).
eval_one a100-72b-tp4-group-only a100-72b-tp4 policies/a100-72b-tp4-group-only.json \
  --seeds 10 --steps 8 --controllers uncontrolled,static-safe,ppo
# PPO against the tuned PID on the other scenarios.
for s in a100-14b-tp2 h100-8b-tp1 h100-70b-tp4; do
  eval_one "$s" "$s" "policies/$s.json" --seeds 10 --steps 100
done
# Generalisation: a scenario left out of training, and budgets not trained on.
eval_one loso-h100-8b-tp1 h100-8b-tp1 policies/loso-without-h100-8b-tp1.json --seeds 10 \
  --steps 100 --controllers uncontrolled,static-safe,pid,ppo
eval_one loso-a100-7b-tp1 a100-7b-tp1 policies/loso-without-a100-7b-tp1.json --seeds 10 \
  --steps 500 --controllers uncontrolled,static-safe,pid,ppo
# The policy trained at 314.6 W only, and the shipped one (trained over 260-400 W), at other budgets.
for b in 280 350; do
  eval_one "a100-7b-tp1-at-314.6w-policy-at-${b}w" a100-7b-tp1 policies/a100-7b-tp1-at-314.6w.json \
    --seeds 10 --steps 200 --budget-w "$b" --controllers uncontrolled,static-safe,pid,ppo
  eval_one "a100-7b-tp1-range-policy-at-${b}w" a100-7b-tp1 policies/a100-7b-tp1.json \
    --seeds 10 --steps 200 --budget-w "$b" --controllers uncontrolled,static-safe,pid,ppo
done
# Budgets that move while the job runs (docs/RESULTS.md, "Under budgets that move"): each seed its
# own plan, the same for every controller; the two references of a moving budget beside them.
moving="uncontrolled,static-safe-lowest,static-oracle,pid,ppo"
for sched in demand-response walk steps:300:400:300; do
  eval_one "a100-7b-tp1-${sched%%:*}" a100-7b-tp1 policies/a100-7b-tp1.json --seeds 10 --steps 500 \
    --budget-schedule "$sched" --controllers "$moving"
done
for sched in demand-response walk steps:600:700:300; do
  eval_one "h100-8b-tp1-${sched%%:*}" h100-8b-tp1 policies/h100-8b-tp1.json --seeds 10 --steps 100 \
    --budget-schedule "$sched" --controllers "$moving"
done
