#!/usr/bin/env bash
# docs/RESULTS.md, "Calibrate your own machine": the loop a user runs, with the twin standing in
# for their machine. Scenario X's job runs beside the agent (PID moving concurrency) and leaves
# an agent trace; `twin calibrate --trace` makes a scenario from it on a base whose every
# measurable value is wrong by 15-40 % (what the trace cannot show — model, hardware, prompts —
# stays the base's); a policy trained on the calibrated scenario, one trained on the wrong base,
# and one trained on X itself (the same recipe and seed) are evaluated on X.
# Usage: calibration_loop.sh HEADROOM OUT_DIR [SCENARIO] [TIMESTEPS]
set -euo pipefail
headroom="$1"
out="$2"
x="${3:-h100-8b-tp1}"
timesteps="${4:-3000000}"
mkdir -p "$out"
cd "$(dirname "$0")/.."

echo "== the job's agent trace ($x, PID, one simulated hour)"
"$headroom" agent --source twin --scenario "$x" --controller pid --speed 0 --duration-s 3600 \
  --seed 11 --listen 127.0.0.1:0 --trace-out "$out/job.csv" 2>&1 | tail -1

echo "== a base that knows the model and hardware, every measurable value wrong"
python3 - "$x" "$out/wrong.toml" <<'EOF'
import re, sys
src = open(f"scenarios/{sys.argv[1]}.toml").read()
scale = {("logprob", "tokens_per_s"): 1.3, ("logprob", "power_w"): 0.8,
         ("train", "tokens_per_s"): 0.7, ("train", "power_w"): 1.15,
         ("sync", "duration_s"): 1.4, ("sync", "power_w"): 1.3,
         ("rollout", "length_median_tokens"): 0.7, ("rollout", "decode_tokens_per_s_l"): 1.25,
         ("rollout", "decode_tokens_per_s_b0"): 1.25, ("rollout", "decode_power_b0"): 0.85,
         ("rollout", "decode_power_l"): 1.2}
table, lines = None, []
for line in src.splitlines():
    m = re.match(r"\[(\w+)\]", line)
    if m:
        table = m.group(1)
    m = re.match(r"(\w+)\s*=\s*([-0-9.eE+]+)(.*)", line)
    if m and (table, m.group(1)) in scale:
        line = f"{m.group(1)} = {float(m.group(2)) * scale[(table, m.group(1))]!r}{m.group(3)}"
    if table == "scenario" and line.startswith("name"):
        line = 'name = "wrong"'
    lines.append(line)
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
EOF

echo "== calibrate"
"$headroom" twin calibrate --trace "$out/job.csv" --base "$out/wrong.toml" --out "$out/mine.toml"

echo "== train (the same recipe and seed on each)"
"$headroom" train --scenario "$out/mine.toml" --timesteps "$timesteps" --seed 1 \
  --out "$out/mine.json" > "$out/train-mine.log" 2>&1 &
"$headroom" train --scenario "$x" --timesteps "$timesteps" --seed 1 \
  --out "$out/own.json" > "$out/train-own.log" 2>&1 &
wait
"$headroom" train --scenario "$out/wrong.toml" --timesteps "$timesteps" --seed 1 \
  --out "$out/wrong.json" > "$out/train-wrong.log" 2>&1

echo "== evaluate each on $x"
for p in own mine wrong; do
  "$headroom" eval --scenario "$x" --policy "$out/$p.json" --seeds 10 --steps 100 \
    --controllers uncontrolled,static-safe,ppo --json > "$out/eval-$p.json"
done
python3 - "$out" "$x" <<'EOF'
import json, sys
out, x = sys.argv[1], sys.argv[2]
rows = {}
for p in ("own", "mine", "wrong"):
    j = json.load(open(f"{out}/eval-{p}.json"))
    rows[p] = next(c for c in j["controllers"] if c["name"] == "ppo")
own = rows["own"]["tokens"]["mean"]
print(f"\n`scripts/calibration_loop.sh build/bin/headroom {out} {x}` (10 seeds x 100 steps on {x})\n")
print("| policy trained on | viol 0.5 s | viol 30 s | tokens | vs X's own policy |")
print("|---|---|---|---|---|")
names = {"own": f"{x} itself", "mine": "the scenario calibrated from its agent trace",
         "wrong": "the wrong base, uncalibrated"}
for p in ("own", "mine", "wrong"):
    c = rows[p]
    v = c["violation_fraction"]
    print(f"| {names[p]} | {100 * v['0.5s']['mean']:.2f} % | {100 * v['30s']['mean']:.2f} % | "
          f"{c['tokens']['mean']:,.0f} | {100 * (c['tokens']['mean'] / own - 1):+.1f} % |")
EOF
