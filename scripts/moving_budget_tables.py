#!/usr/bin/env python3
"""Markdown tables of docs/RESULTS.md "Under budgets that move" from the --json files that
scripts/control_results.sh writes. Usage: moving_budget_tables.py OUT_DIR"""
import json
import os
import sys

RUNS = [("a100-7b-tp1", "demand-response"), ("a100-7b-tp1", "walk"), ("a100-7b-tp1", "steps"),
        ("h100-8b-tp1", "demand-response"), ("h100-8b-tp1", "walk"), ("h100-8b-tp1", "steps")]


def pct(v):
    return "—" if v is None else f"{v:+.1f} %"


def secs(v):
    return "—" if v is None else f"{v:.1f}"


def main(out):
    for scenario, sched in RUNS:
        path = os.path.join(out, f"{scenario}-{sched}.json")
        with open(path) as f:
            r = json.load(f)
        b = r["budget_schedule"]
        print(f"**`{scenario}`, `{b['name']}`** — {b['lowest_w']:.1f}–{b['highest_w']:.1f} W per "
              f"GPU, {b['decreases']} decreases over the 10 seeds"
              + (f", announced {b['notice_s']:g} s ahead" if b["notice_s"] else "") + ":\n")
        print("| controller | viol 0.5 s | tokens | vs static-safe-lowest | vs static-oracle "
              "| settle p50 / p99 / max (s) | unsettled |")
        print("|---|---|---|---|---|---|---|")
        for c in r["controllers"]:
            v = c["violation_fraction"]["0.5s"]
            s = c["settle_s"]
            name = f"**{c['name']}**" if c["name"] == "ppo" else c["name"]
            print(f"| {name} | {100 * v['mean']:.2f} ± {100 * v['std']:.2f} % | "
                  f"{c['tokens']['mean']:,.0f} | {pct(c['tokens_vs_static_safe_lowest_pct'])} | "
                  f"{pct(c['tokens_vs_static_oracle_pct'])} | {secs(s['p50'])} / {secs(s['p99'])}"
                  f" / {secs(s['max'])} | {s['unsettled']} / {s['events']} |")
        print()


if __name__ == "__main__":
    main(sys.argv[1])
