#!/usr/bin/env bash
# `make fixed-group-results` (issue 34): what fixing the group size costs. For every shipped
# scenario, a policy trained with the group size fixed at the scenario's own (`--actuators
# concurrency`: concurrency and the power limit move, as a GRPO trainer that keeps its configured
# group can take them) is shipped as policies/NAME-fixed-group.json, trained with the same recipe
# as the shipped policy (seed 1), and both are evaluated on the same episodes (seeds 1-10, the
# scenario's evaluation steps, the default budget). The table goes into docs/RESULTS.md between
# <!-- fixed-group:begin --> and <!-- fixed-group:end -->.
# Usage: fixed_group_results.sh HEADROOM_BINARY. Two jobs at a time, one core each; about
# 20 minutes on 2 cores. TRAIN=0 in the environment evaluates the policies on disk only.
set -euo pipefail
headroom="$1"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="build/fixed-group"
mkdir -p "$out"
jobs_max="${JOBS:-2}"
# The shipped policies' recipes, trained here with the group fixed.
# shellcheck source=scripts/policy_recipes.sh
source "scripts/policy_recipes.sh"
if [ "${TRAIN:-1}" != 0 ]; then
  for r in "${recipes[@]}"; do
    IFS='|' read -r name steps options <<< "$r"
    wait_slot
    echo "fixed-group: training $name"
    # shellcheck disable=SC2086
    "$headroom" train $options --actuators concurrency $(select_options "$steps") --seed 1 \
      --out "policies/$name-fixed-group.json" > "$out/$name.train.txt" &
  done
  wait
fi
for r in "${recipes[@]}"; do
  IFS='|' read -r name steps _ <<< "$r"
  for which in shipped fixed; do
    policy="policies/$name.json"
    [ "$which" = fixed ] && policy="policies/$name-fixed-group.json"
    wait_slot
    echo "fixed-group: evaluating $policy"
    "$headroom" eval --scenario "$name" --policy "$policy" --seeds 10 --steps "$steps" \
      --controllers ppo --threads 1 --json > "$out/$name.$which.json" &
  done
done
wait
/usr/bin/python3 - "$out" docs/RESULTS.md "${recipes[@]%%|*}" <<'PY'
import json, re, sys
out, doc, names = sys.argv[1], sys.argv[2], sys.argv[3:]
# The scoring window of each scenario (docs/RESULTS.md): 30 s for the paper's 72B, else 0.5 s.
window = {"a100-72b-tp4": "30s"}
rows = ["| scenario | group fixed at | mean group, shipped | tokens, shipped | tokens, group fixed "
        "| tokens | steps done, shipped / group fixed | violations, shipped | violations, group fixed |",
        "|---|---|---|---|---|---|---|---|---|"]
for name in names:
    ppo = {}
    for which in ("shipped", "fixed"):
        with open(f"{out}/{name}.{which}.json") as f:
            r = json.load(f)
        ppo[which] = next(c for c in r["controllers"] if c["name"] == "ppo")
        ppo[which]["_steps"] = r["steps"]
    s, x = ppo["shipped"], ppo["fixed"]
    w = window.get(name, "0.5s")
    lost = 100.0 * (x["tokens"]["mean"] - s["tokens"]["mean"]) / s["tokens"]["mean"]
    rows.append(
        f"| `{name}` | {x['mean_group_size']['mean']:.0f} | {s['mean_group_size']['mean']:.1f} "
        f"| {s['tokens']['mean']:,.0f} | {x['tokens']['mean']:,.0f} | {lost:+.1f} % "
        f"| {s['steps_done']['mean']:.1f} / {x['steps_done']['mean']:.1f} "
        f"| {100 * s['violation_fraction'][w]['mean']:.2f} % ({w.replace('s', ' s')}) "
        f"| {100 * x['violation_fraction'][w]['mean']:.2f} % |")
block = ("<!-- fixed-group:begin -->\n"
         "`make fixed-group-results` (scripts/fixed_group_results.sh): 10 seeds each over the "
         "time the uncontrolled job takes for the scenario's evaluation steps, at the default "
         "budget, both policies in their shields; violations in the scenario's scoring window.\n\n"
         + "\n".join(rows) + "\n<!-- fixed-group:end -->\n")
text = open(doc).read()
new = re.sub(r"<!-- fixed-group:begin -->.*?<!-- fixed-group:end -->\n?", block, text, flags=re.S)
if "<!-- fixed-group:begin -->" not in text:
    new = text.rstrip("\n") + "\n\n" + block
open(doc, "w").write(new)
print(block)
PY
