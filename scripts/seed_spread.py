#!/usr/bin/python3
"""Seed robustness of the shipped policies (scripts/train_policies.sh): reads every seed's
evaluation (DIR/NAME-seedK.eval.json, `headroom eval --json` with static-safe, power-cap, pid and
ppo on the evaluation seeds), ships the median seed by tokens as policies/NAME.json (with its
learning curve), and writes DIR/spread.md: per scenario every seed's tokens and violations in the
policy's scoring window, whether it meets its violation target, and whether it dominates each
baseline (at least as many tokens, no more violations in that window).

Usage: seed_spread.py DIR SEEDS NAME...
"""
import json
import os
import shutil
import sys

WINDOW_KEYS = {0.5: "0.5s", 30.0: "30s", 300.0: "5min"}


def main():
    directory, seeds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    lines = ["| scenario | window, target | seed | ppo tokens | ppo violations | meets target |"
             " dominates static-safe / power-cap / pid | shipped |",
             "|---|---|---|---|---|---|---|---|"]
    summary = []
    for name in names:
        rows = []
        for k in range(1, seeds + 1):
            policy_path = os.path.join(directory, f"{name}-seed{k}.json")
            with open(policy_path) as f:
                policy = json.load(f)
            with open(os.path.join(directory, f"{name}-seed{k}.eval.json")) as f:
                result = json.load(f)
            window = WINDOW_KEYS[float(policy["cost_window_s"])]
            target = float(policy["violation_target"])
            by_name = {c["name"]: c for c in result["controllers"]}
            ppo = by_name["ppo"]
            tokens = ppo["tokens"]["mean"]
            viol = ppo["violation_fraction"][window]["mean"]
            dominates = []
            for other in ("static-safe", "power-cap", "pid"):
                o = by_name[other]
                dominates.append(tokens >= o["tokens"]["mean"] and
                                 viol <= o["violation_fraction"][window]["mean"])
            rows.append((k, tokens, viol, viol <= target, dominates, window, target))
        order = sorted(rows, key=lambda r: r[1])
        median = order[len(order) // 2][0]
        src = os.path.join(directory, f"{name}-seed{median}")
        shutil.copyfile(src + ".json", os.path.join("policies", f"{name}.json"))
        if os.path.exists(src + ".curve.csv"):
            shutil.copyfile(src + ".curve.csv", os.path.join("policies", f"{name}.curve.csv"))
        met = sum(1 for r in rows if r[3])
        dom = sum(1 for r in rows if all(r[4]))
        summary.append(f"{name}: {met}/{len(rows)} seeds meet the target, {dom}/{len(rows)} "
                       f"dominate all three; shipped seed {median}")
        for k, tokens, viol, ok, dominates, window, target in rows:
            marks = " / ".join("yes" if d else "no" for d in dominates)
            lines.append(f"| `{name}` | {window}, {100 * target:g} % | {k} | {tokens:,.0f} | "
                         f"{100 * viol:.2f} % | {'yes' if ok else '**no**'} | {marks} | "
                         f"{'**median**' if k == median else ''} |")
    with open(os.path.join(directory, "spread.md"), "w") as f:
        f.write("\n".join(lines) + "\n\n" + "\n".join(f"- {s}" for s in summary) + "\n")
    print("\n".join(lines))
    print()
    print("\n".join(summary))


if __name__ == "__main__":
    main()
