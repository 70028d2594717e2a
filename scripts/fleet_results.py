#!/usr/bin/env python3
"""The fleet table of docs/RESULTS.md: `headroom fleet-sim` on the paper's 16-GPU composite
(2x72B TP4, 2x14B TP2, 4x7B TP1), 10 seeds per row, a site budget at 50 % of nameplate.

Rows (each seed the same jobs, draws and budget; `without_site_budget` is the same run's jobs
with no budget at all, at their trainers' own settings): aligned starts and random offsets with
no budget (the paper's 56 % and 53 %); then the site budget, holds planned (--stagger greedy),
with the grants as power limits only (--job-control off), with job control (the shipped PPO
policies: the paper's 50 %), with job control and the agent's power limit guard under it (PID),
with value-based grants (PID and PPO, guarded), and with reservations before the update instead
of staggering's holds (--stagger reserve). See CONFIGS and ROWS.
and demand response: a 20 % cut every 300 s with 10 s notice (DEMAND_RESPONSE): settle time
p50/p99 over every cut of every seed, and the tokens each cost; and the frontier
(FRONTIER_FRACTIONS): the value-based PPO row at site budgets from 40 % to 55 % of nameplate.

Usage: fleet_results.py HEADROOM OUT_DIR [--seeds N] [--duration-s S]
Writes each run's JSON (and seed 1's HTML report) to OUT_DIR; prints the tables.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

JOBS = "a100-72b-tp4:2,a100-14b-tp2:2,a100-7b-tp1:4"
NAMEPLATE_W = 16 * 400.0
# `headroom fleet`'s definitions (src/planning/fleet.h, docs/METRICS.md "Money and carbon").
MARGIN = 0.05
CAPACITY_USD_PER_KW_YEAR = 1000.0
CARBON_G_PER_KWH = 250.0

CONFIGS = {
    # name: fleet-sim options beyond the common ones (every site run staggered: --stagger greedy)
    "aligned": ["--offsets", "aligned", "--job-control", "off", "--stagger", "greedy"],
    "limits": ["--offsets", "random", "--job-control", "off", "--stagger", "greedy"],
    "ppo": ["--offsets", "random", "--job-control", "on", "--stagger", "greedy"],
    "pid-guard": ["--offsets", "random", "--job-control", "on", "--controller", "pid",
                  "--guard-power-limit", "--stagger", "greedy"],
    "pid-guard-value": ["--offsets", "random", "--job-control", "on", "--controller", "pid",
                        "--guard-power-limit", "--stagger", "greedy", "--allocation", "value"],
    "ppo-guard-value": ["--offsets", "random", "--job-control", "on", "--guard-power-limit",
                        "--stagger", "greedy", "--allocation", "value"],
    # Reservations before the update (coord/reservation.h) instead of staggering's holds.
    "pid-guard-value-reserve": ["--offsets", "random", "--job-control", "on", "--controller",
                                "pid", "--guard-power-limit", "--stagger", "reserve",
                                "--allocation", "value"],
    "ppo-guard-value-reserve": ["--offsets", "random", "--job-control", "on",
                                "--guard-power-limit", "--stagger", "reserve", "--allocation",
                                "value"],
}
# Demand response: (name, config, from, to as fractions of nameplate). The shipped PPO site from
# 75 % (its floors, each job's lowest actuation, need 57 %), and the best site by tokens from
# the 50 % of the table, without a reserve and with 4 % of the budget kept out of the grants.
DEMAND_RESPONSE = [("dr-ppo", "ppo", 0.75, 0.60, []),
                   ("dr-pid-guard-value", "pid-guard-value", 0.5, 0.4, []),
                   ("dr-pid-guard-value-reserve", "pid-guard-value", 0.5, 0.4,
                    ["--reserve-w", "128"])]
# The frontier: the best row (shipped PPO, guard, value-based grants) at site budgets from 40 % to
# 55 % of nameplate: the peak each budget buys against the tokens it costs.
FRONTIER_FRACTIONS = [0.40, 0.425, 0.45, 0.475, 0.50, 0.55]
FRONTIER_CONFIG = "ppo-guard-value"
# (row, config, which block of its JSON, the paper's figure)
ROWS = [
    ("aligned starts, no budget", "aligned", "without_site_budget", "56 %"),
    ("random offsets (phases staggered by chance), no budget", "limits", "without_site_budget",
     "53 %"),
    ("site budget, staggered; power limits only (--job-control off)", "limits", "site", "—"),
    ("+ job control (shipped PPO policies; floors: each job's lowest actuation)", "ppo", "site",
     "50 %"),
    ("+ job control (PID) with the power limit guard (floors: the lowest limit)", "pid-guard",
     "site", "—"),
    ("+ value-based grants (PID, guard)", "pid-guard-value", "site", "—"),
    ("+ value-based grants (shipped PPO, guard)", "ppo-guard-value", "site", "—"),
    ("+ reservations before the update (PID, guard, value)", "pid-guard-value-reserve", "site",
     "—"),
    ("+ reservations before the update (shipped PPO, guard, value)", "ppo-guard-value-reserve",
     "site", "—"),
]


def quantile(values, q):
    """Linear interpolation between order statistics (numpy's default)."""
    v = sorted(values)
    if not v:
        return float("nan")
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def run(headroom, out, name, seed, options, duration_s, html, budget_w=0.5 * NAMEPLATE_W):
    path = os.path.join(out, f"{name}-seed{seed}.json")
    argv = [headroom, "fleet-sim", "--jobs", JOBS, "--site-budget-w", str(budget_w),
            "--speed", "0", "--duration-s", str(duration_s), "--seed", str(seed), "--json"]
    argv += options
    if html:
        argv += ["--report", os.path.join(out, f"{name}-seed{seed}.html")]
    res = subprocess.run(argv, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"fleet_results: {' '.join(argv)}: exit {res.returncode}: {res.stderr.strip()}")
    with open(path, "w") as f:
        f.write(res.stdout)
    return json.loads(res.stdout)


def block(j, which):
    return j if which == "site" else j[which]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("headroom")
    ap.add_argument("out")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--duration-s", type=float, default=1800.0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    seeds = list(range(1, args.seeds + 1))
    results = {}
    total = (len(CONFIGS) + len(DEMAND_RESPONSE) + len(FRONTIER_FRACTIONS) - 1) * len(seeds)
    done = 0
    for name, options in CONFIGS.items():
        for s in seeds:
            results[(name, s)] = run(args.headroom, args.out, name, s, options, args.duration_s,
                                     s == seeds[0])
            done += 1
            print(f"fleet_results: {done}/{total} {name} seed {s}", file=sys.stderr, flush=True)
    dr_runs = {}
    for name, config, high, low, extra in DEMAND_RESPONSE:
        dr_runs[name] = {}
        for s in seeds:
            dr_runs[name][s] = run(
                args.headroom, args.out, name, s,
                CONFIGS[config] + ["--site-budget-schedule",
                                   f"steps:{low * NAMEPLATE_W:.0f}:{high * NAMEPLATE_W:.0f}:300",
                                   "--notice-s", "10"] + extra,
                args.duration_s, s == seeds[0], high * NAMEPLATE_W)
            done += 1
            print(f"fleet_results: {done}/{total} {name} seed {s}", file=sys.stderr, flush=True)
    frontier_runs = {}
    for fraction in FRONTIER_FRACTIONS:
        for s in seeds:
            if fraction == 0.5:  # the table's own row
                frontier_runs[(fraction, s)] = results[(FRONTIER_CONFIG, s)]
                continue
            frontier_runs[(fraction, s)] = run(
                args.headroom, args.out, f"frontier-{1000 * fraction:.0f}", s,
                CONFIGS[FRONTIER_CONFIG], args.duration_s, False, fraction * NAMEPLATE_W)
            done += 1
            print(f"fleet_results: {done}/{total} frontier {100 * fraction:g} % seed {s}",
                  file=sys.stderr, flush=True)

    rows = []
    for label, name, which, paper in ROWS:
        blocks = [block(results[(name, s)], which) for s in seeds]
        full = [results[(name, s)] for s in seeds]
        peaks = [b["peak_fraction_of_nameplate"]["30s"] for b in blocks]
        # As `headroom fleet`: nameplate / (q99 over trials of each one's largest 30 s x 1.05).
        factor = 1.0 / (quantile(peaks, 0.99) * (1.0 + MARGIN))
        over = {w: statistics.mean(b["violation_fraction"][w] for b in blocks)
                for w in ("0.5s", "30s", "5min")}
        tokens = sum(b["tokens"] for b in blocks)
        free_tokens = sum(f["without_site_budget"]["tokens"] for f in full)
        energy_mwh = sum(b["energy_j"] for b in blocks) / 3.6e9
        holds = (statistics.mean(f["holds"]["tokens_cost_pct"] for f in full)
                 if which == "site" else 0.0)
        hold_count = sum(f["holds"]["count"] for f in full) if which == "site" else 0
        not_admitted = (sum(sum(1 for job in f["jobs"] if not job["admitted"]) for f in full)
                        if which == "site" else 0)
        freed_kw_per_mw = 1000.0 * (1.0 - 1.0 / factor)
        rows.append({
            "row": label, "paper_peak": paper,
            "peak_p50": quantile(peaks, 0.5), "peak_p95": quantile(peaks, 0.95), "peak_max": max(peaks),
            "oversubscription_q99": factor, "over": over,
            "tokens_vs_no_budget_pct": 100.0 * (tokens / free_tokens - 1.0),
            "tokens_per_mwh": tokens / energy_mwh,
            "holds": hold_count, "holds_tokens_cost_pct": holds,
            "jobs_not_admitted": not_admitted,
            "freed_kw_per_mw_nameplate": freed_kw_per_mw,
            "freed_usd_per_year_per_mw": freed_kw_per_mw * CAPACITY_USD_PER_KW_YEAR,
            "carbon_kg_per_million_tokens": (energy_mwh * 1000.0 * CARBON_G_PER_KWH / 1000.0)
            / (tokens / 1e6),
        })
    # Every cut of every seed (settle_s.values: each decrease's settle time, in order).
    summary = {"rows": rows, "demand_response": []}
    for name, config, high, low, extra in DEMAND_RESPONSE:
        dr = dr_runs[name]
        settles = sorted(x for s in seeds for x in dr[s]["settle_s"]["values"])
        summary["demand_response"].append({
            "name": name, "config": " ".join([config] + extra), "from_fraction": high,
            "to_fraction": low,
            "events": sum(dr[s]["settle_s"]["events"] for s in seeds),
            "unsettled": sum(dr[s]["settle_s"]["unsettled"] for s in seeds),
            "settle_p50_s": quantile(settles, 0.5) if settles else None,
            "settle_p99_s": quantile(settles, 0.99) if settles else None,
            "settle_max_s": settles[-1] if settles else None,
            "tokens_lost_per_event": statistics.mean(dr[s]["tokens_lost_per_event"] for s in seeds),
            "schedule_tokens_cost_pct": statistics.mean(dr[s]["schedule_tokens_cost_pct"]
                                                        for s in seeds),
            "windows_30s_over": statistics.mean(dr[s]["violation_fraction"]["30s"] for s in seeds),
            "windows_05s_over": statistics.mean(dr[s]["violation_fraction"]["0.5s"] for s in seeds),
        })
    # Each budget: the peak, the mean power (both over nameplate), tokens against no budget,
    # and the tokens per joule against no budget (tokens = efficiency x energy, so a row's
    # tokens ratio is its efficiency ratio times its mean power ratio).
    summary["frontier"] = []
    for fraction in FRONTIER_FRACTIONS:
        runs = [frontier_runs[(fraction, s)] for s in seeds]
        peaks = [r["peak_fraction_of_nameplate"]["30s"] for r in runs]
        tokens = sum(r["tokens"] for r in runs)
        free_tokens = sum(r["without_site_budget"]["tokens"] for r in runs)
        energy = sum(r["energy_j"] for r in runs)
        free_energy = sum(r["without_site_budget"]["energy_j"] for r in runs)
        duration = sum(r["duration_s"] for r in runs)
        summary["frontier"].append({
            "site_budget_fraction": fraction,
            "peak_p95": quantile(peaks, 0.95),
            "oversubscription_q99": 1.0 / (quantile(peaks, 0.99) * (1.0 + MARGIN)),
            "mean_power_fraction": energy / duration / NAMEPLATE_W,
            "free_mean_power_fraction": free_energy / duration / NAMEPLATE_W,
            "windows_30s_over": statistics.mean(r["violation_fraction"]["30s"] for r in runs),
            "tokens_vs_no_budget_pct": 100.0 * (tokens / free_tokens - 1.0),
            "tokens_per_joule_vs_no_budget_pct": 100.0 * ((tokens / energy)
                                                          / (free_tokens / free_energy) - 1.0),
        })
    with open(os.path.join(args.out, "fleet_results.json"), "w") as f:
        json.dump(summary, f, indent=2)

    print(f"`scripts/fleet_results.py build/bin/headroom build/fleet-results` ({args.seeds} seeds, "
          f"{args.duration_s:.0f} s each; site budget 3,200 W = 50 % of the 6,400 W nameplate)\n")
    print("| | peak 30 s / nameplate p50 / p95 / max | paper | oversubscription q99 | "
          "30 s windows over 50 % (0.5 s / 5 min) | tokens vs no budget | tokens/MWh | "
          "holds (tokens) | jobs not admitted |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['row']} | {100 * r['peak_p50']:.1f} / {100 * r['peak_p95']:.1f} / "
              f"{100 * r['peak_max']:.1f} % | {r['paper_peak']} | {r['oversubscription_q99']:.2f}x | "
              f"{100 * r['over']['30s']:.1f} % ({100 * r['over']['0.5s']:.1f} / "
              f"{100 * r['over']['5min']:.1f} %) | {r['tokens_vs_no_budget_pct']:+.1f} % | "
              f"{r['tokens_per_mwh']:.3g} | {r['holds']} ({r['holds_tokens_cost_pct']:.2f} %) | "
              f"{r['jobs_not_admitted']} |")
    print("\n| | freed capacity per MW of nameplate | worth per year (at $1,000/kW-year) | "
          "kg CO2 per million tokens (0.25 kg/kWh) |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['row']} | {r['freed_kw_per_mw_nameplate']:.0f} kW | "
              f"${r['freed_usd_per_year_per_mw']:,.0f} | {r['carbon_kg_per_million_tokens']:.3f} |")
    print("\nDemand response: a 20 % cut every 300 s, each known 10 s ahead (30 cuts per row: 10 "
          "seeds x 3)\n")
    print("| site | cut | settle p50 / p99 / max | unsettled | tokens per cut | tokens cost | "
          "30 s (0.5 s) windows over the budget of the moment |")
    print("|---|---|---|---|---|---|---|")
    for d in summary["demand_response"]:
        print(f"| {d['config']} | {100 * d['from_fraction']:.0f} % -> {100 * d['to_fraction']:.0f} % | "
              f"{d['settle_p50_s']:.1f} / {d['settle_p99_s']:.1f} / {d['settle_max_s']:.1f} s | "
              f"{d['unsettled']} of {d['events']} | {d['tokens_lost_per_event']:.3g} | "
              f"{d['schedule_tokens_cost_pct']:.2f} % | {100 * d['windows_30s_over']:.2f} % "
              f"({100 * d['windows_05s_over']:.2f} %) |")
    print(f"\nThe frontier: {FRONTIER_CONFIG} (shipped PPO, guard, value-based grants) at other site "
          "budgets; no budget draws "
          f"{100 * summary['frontier'][0]['free_mean_power_fraction']:.1f} % of nameplate on "
          "average\n")
    print("| site budget / nameplate | peak 30 s p95 | oversubscription q99 | mean power | "
          "30 s windows over | tokens vs no budget | tokens per joule vs no budget |")
    print("|---|---|---|---|---|---|---|")
    for f in summary["frontier"]:
        print(f"| {100 * f['site_budget_fraction']:.1f} % | {100 * f['peak_p95']:.1f} % | "
              f"{f['oversubscription_q99']:.2f}x | {100 * f['mean_power_fraction']:.1f} % | "
              f"{100 * f['windows_30s_over']:.1f} % | {f['tokens_vs_no_budget_pct']:+.1f} % | "
              f"{f['tokens_per_joule_vs_no_budget_pct']:+.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
