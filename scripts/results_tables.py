#!/usr/bin/env python3
"""Markdown tables of every evaluation scripts/control_results.sh wrote (its --json files), for
docs/RESULTS.md. Usage: results_tables.py OUT_DIR NAME [NAME ...]"""
import json
import os
import sys


def pct(v):
    return "—" if v is None else f"{v:+.1f} %"


def frac(s):
    return f"{100 * s['mean']:.2f} ± {100 * s['std']:.2f} %"


def table(path):
    with open(path) as f:
        r = json.load(f)
    moving = "budget_schedule" in r
    steps = (f"exactly {r['steps']} steps each (`--horizon steps`)"
             if r.get("horizon") == "steps" else f"{r['steps']} steps")
    head = (f"`{r['scenario']}`, {r['seeds']} seeds x {steps}, "
            + (f"budget `{r['budget_schedule']['name']}` "
               f"({r['budget_schedule']['lowest_w']:.1f}–{r['budget_schedule']['highest_w']:.1f} "
               f"W per GPU, {r['budget_schedule']['decreases']} decreases)" if moving
               else f"{r['budget_w']:.1f} W per GPU"))
    out = [head + ":", ""]
    if moving:
        out.append("| controller | viol 0.5 s | tokens | vs static-safe-lowest | vs static-oracle "
                   "| settle p50 / p99 / max (s) | unsettled |")
        out.append("|---|---|---|---|---|---|---|")
    else:
        out.append("| controller | viol 0.5 s | viol 30 s | tokens | vs uncontrolled "
                   "| vs static-safe | tokens/MWh vs unc. |")
        out.append("|---|---|---|---|---|---|---|")
    for c in r["controllers"]:
        name = f"**{c['name']}**" if c["name"] == "ppo" else c["name"]
        v = c["violation_fraction"]
        if moving:
            s = c["settle_s"]
            sec = lambda x: "—" if x is None else f"{x:.1f}"  # noqa: E731
            out.append(f"| {name} | {frac(v['0.5s'])} | {c['tokens']['mean']:,.0f} | "
                       f"{pct(c['tokens_vs_static_safe_lowest_pct'])} | "
                       f"{pct(c['tokens_vs_static_oracle_pct'])} | {sec(s['p50'])} / "
                       f"{sec(s['p99'])} / {sec(s['max'])} | {s['unsettled']} / {s['events']} |")
        else:
            out.append(f"| {name} | {frac(v['0.5s'])} | {frac(v['30s'])} | "
                       f"{c['tokens']['mean']:,.0f} | {pct(c['tokens_vs_uncontrolled_pct'])} | "
                       f"{pct(c['tokens_vs_static_safe_pct'])} | "
                       f"{pct(c['tokens_per_mwh_vs_uncontrolled_pct'])} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    out_dir = sys.argv[1]
    for name in sys.argv[2:]:
        print(f"**{name}** — " + table(os.path.join(out_dir, name + ".json")))
