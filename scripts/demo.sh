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
echo "== 8. headroom diloco local: the data-parallel baseline (fp32 gradients every step), then 4"
echo "      DiLoCo workers (separate processes) on their own etcd and Gloo to the baseline's loss,"
echo "      a byte-level model on the Debian corpus; one worker SIGKILLed in round 2, a fresh one"
echo "      joining in round 3 (it fetches the model from a peer and checks its SHA-256)"
"$headroom" diloco local --mode ddp --workers 4 --inner-steps 10 --rounds 5 --batch 8 \
  --seq-len 64 --out "$out/diloco-ddp"
ddp_loss=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["final_val_loss"])' \
  "$out/diloco-ddp/summary.json")
"$headroom" diloco local --workers 4 --inner-steps 10 --rounds 5 --batch 8 --seq-len 64 \
  --churn kill-at-round:2,join-at-round:3 --target-loss "$ddp_loss" --out "$out/diloco"
# The headline: energy to DDP's final loss (DDP: its whole run), coordination's share of it.
python3 - "$out/diloco-ddp/summary.json" "$out/diloco/summary.json" <<'PY'
import json, sys
ddp, dl = (json.load(open(p)) for p in sys.argv[1:3])
e, t = dl["energy_j"], dl["to_target"]
share = lambda e: 100 * e["coordination"] / (e["compute"] + e["coordination"])
ddp_j = ddp["energy_j"]["compute"] + ddp["energy_j"]["coordination"]
print(f"   headline: energy to DDP's loss {t['target_loss']:.4f} nats/byte: DDP {ddp_j:.0f} J "
      f"(coordination {share(ddp['energy_j']):.0f} %), DiLoCo "
      + (f"{t['energy_j']:.0f} J" if t["reached"] else f"not reached: over {t['energy_j']:.0f} J")
      + f" (coordination {share(e):.0f} %)")
print("   measured on this machine: a CPU-scale model (CPU seconds, waiting seconds and bytes x "
      "modelled watts and J/byte; docs/DILOCO.md, \"Energy to a target loss\")")
PY
python3 "$(dirname "$0")/diloco_projection.py" "$out/diloco-ddp/summary.json" "$out/diloco/summary.json"

echo
echo "Reports:"
echo "  $(realpath "$out/eval.html")"
echo "  $(realpath "$out/analyze.html")"
echo "  $(realpath "$out/fleet.html")"
echo "  $(realpath "$out/agent.html")"
echo "  $(realpath "$out/fleet-sim.html")"
echo "  $(realpath "$out/diloco/report.html")"
