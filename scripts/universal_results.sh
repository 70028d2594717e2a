#!/usr/bin/env bash
# One policy for machines it has not seen (docs/RESULTS.md, "The universal policy"): a policy
# trained across every shipped GRPO scenario with the wide family randomisation (`train
# --family`), and leave-one-scenario-out: for each scenario, the same recipe trained on the other
# four and evaluated on the one it never saw, beside static-safe, power-cap and pid.
# Writes OUT_DIR/*.json and prints the table. Usage: universal_results.sh HEADROOM OUT_DIR [STEPS]
set -euo pipefail
headroom="$1"
out="$2"
timesteps="${3:-4000000}"
cd "$(dirname "$0")/.."
mkdir -p "$out" policies
all=(a100-7b-tp1 a100-72b-tp4 a100-14b-tp2 h100-8b-tp1 h100-70b-tp4)
declare -A eval_steps=([a100-7b-tp1]=500 [a100-72b-tp4]=8 [a100-14b-tp2]=100 [h100-8b-tp1]=100
                       [h100-70b-tp4]=100)
recipe=(--family --timesteps "$timesteps" --violation-target 0.01 --seed 1)
join() { local IFS=,; echo "$*"; }
echo "== universal: $(join "${all[@]}")"
"$headroom" train --scenario "$(join "${all[@]}")" "${recipe[@]}" \
  --out policies/universal.json > "$out/train-universal.log" &
for left in "${all[@]}"; do
  rest=()
  for s in "${all[@]}"; do [ "$s" = "$left" ] || rest+=("$s"); done
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
  echo "== without $left"
  "$headroom" train --scenario "$(join "${rest[@]}")" "${recipe[@]}" \
    --out "$out/universal-without-$left.json" > "$out/train-without-$left.log" &
done
wait
for left in "${all[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
  "$headroom" eval --scenario "$left" --policy "$out/universal-without-$left.json" --seeds 10 \
    --steps "${eval_steps[$left]}" --controllers static-safe,power-cap,pid,ppo --threads 1 --json \
    > "$out/loso-$left.json" &
  "$headroom" eval --scenario "$left" --policy policies/universal.json --seeds 10 \
    --steps "${eval_steps[$left]}" --controllers static-safe,power-cap,pid,ppo --threads 1 --json \
    > "$out/universal-on-$left.json" &
done
wait
/usr/bin/python3 - "$out" "${all[@]}" <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
print("| scenario | policy | ppo viol 0.5 s (target 1 %, limit 1.5 %) | ppo tokens vs static-safe | static-safe viol | within 1.5x and >= static-safe |")
print("|---|---|---|---|---|---|")
for n in names:
    for kind, f in (("left out", f"{out}/loso-{n}.json"), ("universal", f"{out}/universal-on-{n}.json")):
        j = json.load(open(f))
        c = {x["name"]: x for x in j["controllers"]}
        p, s = c["ppo"], c["static-safe"]
        v = p["violation_fraction"]["0.5s"]["mean"]
        d = 100 * (p["tokens"]["mean"] / s["tokens"]["mean"] - 1)
        ok = v <= 0.015 and d >= 0
        print(f"| `{n}` | {kind} | {100*v:.2f} % | {d:+.1f} % | {100*s['violation_fraction']['0.5s']['mean']:.2f} % | {'yes' if ok else '**no**'} |")
PY
