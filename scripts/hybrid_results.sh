#!/usr/bin/env bash
# Issue 18's dominance check (docs/RESULTS.md, "Hybrid actuation"): every shipped policy against
# static-safe, power-cap and pid on its scenario at the default budget, and under the
# demand-response schedule (static-safe-lowest there: the fixed setting that complies with the
# lowest budget of the schedule). ppo dominates a baseline when it has at least as many tokens and
# no more violations in the policy's scoring window. Writes OUT_DIR/*.json, prints the tables.
# Usage: hybrid_results.sh HEADROOM OUT_DIR
set -euo pipefail
headroom="$1"
out="$2"
cd "$(dirname "$0")/.."
mkdir -p "$out"
names=(a100-7b-tp1 a100-72b-tp4 a100-14b-tp2 h100-8b-tp1 h100-70b-tp4)
declare -A steps=([a100-7b-tp1]=500 [a100-72b-tp4]=8 [a100-14b-tp2]=100 [h100-8b-tp1]=100
                  [h100-70b-tp4]=100)
for n in "${names[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
  "$headroom" eval --scenario "$n" --policy "policies/$n.json" --seeds 10 --steps "${steps[$n]}" \
    --controllers uncontrolled,static-safe,power-cap,pid,ppo --threads 1 --json \
    > "$out/$n.json" &
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
  "$headroom" eval --scenario "$n" --policy "policies/$n.json" --seeds 10 --steps "${steps[$n]}" \
    --budget-schedule demand-response \
    --controllers uncontrolled,static-safe-lowest,power-cap,pid,ppo --threads 1 --json \
    > "$out/$n-demand-response.json" &
done
wait
/usr/bin/python3 - "$out" "${names[@]}" <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
keys = {0.5: "0.5s", 30.0: "30s"}
for suffix, title, static in (("", "default budget", "static-safe"),
                              ("-demand-response", "demand-response", "static-safe-lowest")):
    print(f"\n{title}:\n")
    print(f"| scenario | window | ppo: viol, tokens | {static} | power-cap | pid | ppo dominates all three |")
    print("|---|---|---|---|---|---|---|")
    won = 0
    for n in names:
        policy = json.load(open(f"policies/{n}.json"))
        w = keys[float(policy["cost_window_s"])]
        j = json.load(open(f"{out}/{n}{suffix}.json"))
        c = {x["name"]: x for x in j["controllers"]}
        p = c["ppo"]
        def cell(x):
            return f'{100*x["violation_fraction"][w]["mean"]:.2f} %, {x["tokens"]["mean"]:,.0f}'
        dom = []
        for b in (static, "power-cap", "pid"):
            o = c[b]
            ok = (p["tokens"]["mean"] >= o["tokens"]["mean"] and
                  p["violation_fraction"][w]["mean"] <= o["violation_fraction"][w]["mean"])
            dom.append(ok)
        won += all(dom)
        marks = "**yes**" if all(dom) else "no (" + ", ".join(
            b for b, d in zip((static, "power-cap", "pid"), dom) if not d) + ")"
        print(f"| `{n}` | {w} | {cell(p)} | {cell(c[static])} | {cell(c['power-cap'])} | "
              f"{cell(c['pid'])} | {marks} |")
    print(f"\nppo dominates all three on {won} of {len(names)}")
PY
