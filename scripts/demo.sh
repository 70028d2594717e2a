#!/usr/bin/env bash
# The demo: the digital twin at the source paper's three scales, analyzed at every window, and
# the paper's 16-GPU composite fleet (2x 72B TP4 + 2x 14B TP2 + 4x 7B) built from the twin's
# traces, and the controllers (uncontrolled, static-safe, power-cap, PID, the shipped PPO policy)
# side by side on the paper's 7B scenario, and the live agent running the PPO policy against the
# twin, with HTML reports. Usage: demo.sh HEADROOM_BINARY OUT_DIR
set -euo pipefail
headroom="$1"
out="$2"
mkdir -p "$out"

echo "== 1. Occupancy vs volume: each actuator's power authority in the 72B scenario"
"$headroom" twin authority --scenario a100-72b-tp4

echo
echo "== 2. The twin at the paper's scales: 30 minutes each (A100 SXM, 400 W)"
for s in a100-72b-tp4 a100-14b-tp2 a100-7b-tp1; do
  "$headroom" twin run --scenario "$s" --duration-s 1800 --seed 1 --out "$out/$s.csv"
done

echo
echo "== 3. headroom analyze: the 7B job against its 314.6 W budget"
"$headroom" analyze "$out/a100-7b-tp1.csv" --budget-w 314.6 --report "$out/analyze.html"

echo
echo "== 4. headroom fleet: 2x 72B + 2x 14B + 4x 7B = 16 GPUs, random starts, 200 trials"
"$headroom" fleet "$out/a100-72b-tp4.csv:2" "$out/a100-14b-tp2.csv:2" "$out/a100-7b-tp1.csv:4" \
  --trials 200 --seed 1 --budget-fraction 0.8 --report "$out/fleet.html"

echo
echo "== 5. headroom eval: five controllers on a100-7b-tp1 at 314.6 W, 10 seeds x 500 steps"
"$headroom" eval --scenario a100-7b-tp1 --policy policies/a100-7b-tp1.json --seeds 10 \
  --steps 500 --report "$out/eval.html"

echo
echo "== 6. headroom agent: the PPO policy live against the twin, 10 simulated minutes (no waiting),"
echo "      its own trace analyzed"
"$headroom" agent --source twin --scenario a100-7b-tp1 --controller ppo \
  --policy policies/a100-7b-tp1.json --speed 0 --duration-s 600 --listen 127.0.0.1:0 \
  --trace-out "$out/agent.csv"
"$headroom" analyze "$out/agent.csv" --budget-w 314.6 --report "$out/agent.html"
echo "   (live, with its dashboard: $headroom agent --source twin --controller ppo \\"
echo "      --policy policies/a100-7b-tp1.json, then open http://127.0.0.1:10470/)"

echo
echo "== 7. headroom fleet-sim: the same 16 GPUs as one site on 60 % of their nameplate (3840 W):"
echo "      a coordinator and 8 twin-mode agents over the in-memory store, one simulated hour"
"$headroom" fleet-sim --jobs a100-72b-tp4:2,a100-14b-tp2:2,a100-7b-tp1:4 --site-budget-w 3840 \
  --speed 0 --duration-s 3600 --seed 1 --report "$out/fleet-sim.html"

echo
echo "== 8. headroom diloco local: 4 DiLoCo workers (separate processes) on their own etcd and Gloo,"
echo "      a byte-level model on the Debian corpus; one worker SIGKILLed in round 2, a fresh one"
echo "      joining in round 3 (it fetches the model from a peer and checks its SHA-256)"
"$headroom" diloco local --workers 4 --inner-steps 10 --rounds 5 --batch 8 --seq-len 64 \
  --churn kill-at-round:2,join-at-round:3 --out "$out/diloco"

echo
echo "Reports:"
echo "  $(realpath "$out/eval.html")"
echo "  $(realpath "$out/analyze.html")"
echo "  $(realpath "$out/fleet.html")"
echo "  $(realpath "$out/agent.html")"
echo "  $(realpath "$out/fleet-sim.html")"
echo "  $(realpath "$out/diloco/report.html")"
