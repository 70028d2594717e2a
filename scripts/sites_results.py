#!/usr/bin/env python3
"""Three sites' spare power, one DiLoCo run: carbon per token by placement, and the loss reached
against the same run on dedicated workers (docs/SITE.md, "Several sites").

1. `headroom sites-sim` over a simulated day on the sample sites (examples/sites/: nuclear,
   solar, coal; each the paper's composite on 3,840 W), 8 workers of 80 W, every placement,
   each run's workers per round written with --schedule-dir.
2. The loss: `headroom diloco replay` (the run's arithmetic in one process; with every member in
   every round it is the real distributed run bit for bit) of each placement's membership,
   scaled to what this machine trains: 4 replicas (a round's 8 workers become 4, k -> ceil(k/2)),
   the day's rounds sampled evenly down to --rounds for the dedicated run and in proportion for
   the others (the same day: a placement that completed fewer rounds replays fewer).

  scripts/sites_results.py build/bin/headroom build/sites-results [--rounds 40] [--inner-steps 25]
"""
import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys

SITES = ["nuclear", "solar", "coal"]
BUDGET_W = 3840


def run(cmd, out):
    # Written under a temporary name and renamed once whole: a run that fails leaves nothing
    # for the next one to take as done.
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        subprocess.run(cmd, check=True, stdout=f, stderr=subprocess.DEVNULL)
    os.replace(tmp, out)
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("headroom")
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--inner-steps", type=int, default=25)
    ap.add_argument("--replicas", type=int, default=4)
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.makedirs(a.out, exist_ok=True)
    schedules = os.path.join(a.out, "schedules")
    sites_json = os.path.join(a.out, "sites.json")
    if not os.path.exists(sites_json):
        print("sites-sim: a simulated day, every placement ...", file=sys.stderr)
        cmd = [a.headroom, "sites-sim", "--schedule-dir", schedules]
        for s in SITES:
            cmd += ["--site", f"{s}:{root}/examples/sites/{s}.csv:{BUDGET_W}"]
        with open(sites_json, "w") as f:
            subprocess.run(cmd + ["--json"], check=True, stdout=f, stderr=subprocess.DEVNULL)
        subprocess.run(cmd + ["--report", os.path.join(a.out, "sites.html")], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sim = json.load(open(sites_json))
    runs = {r["policy"]: r for r in sim["runs"]}
    workers = sim["workers"]
    dedicated_rounds = runs["dedicated"]["rounds"]

    # The replays' schedules: the day sampled evenly, members scaled to the replicas.
    jobs = {}
    for policy, r in runs.items():
        name = policy.replace(":", "-")
        with open(os.path.join(schedules, name + ".csv")) as f:
            members = [int(line.split(",")[1]) for line in f
                       if line[0].isdigit()]
        rounds = max(1, round(a.rounds * r["rounds"] / dedicated_rounds))
        picked = [members[min(len(members) - 1, (i * len(members)) // rounds)]
                  for i in range(rounds)] if members else []
        if not picked:
            continue
        scaled = [max(1, math.ceil(k * a.replicas / workers)) for k in picked]
        path = os.path.join(a.out, f"replay-{name}.csv")
        with open(path, "w") as f:
            f.write(f"# {policy}: {rounds} of the day's {r['rounds']} rounds, "
                    f"members x {a.replicas}/{workers}\nround,workers\n")
            for i, k in enumerate(scaled):
                f.write(f"{i},{k}\n")
        jobs[policy] = path

    def replay(item):
        policy, path = item
        out = os.path.join(a.out, f"replay-{policy.replace(':', '-')}.json")
        if os.path.exists(out):
            return policy, json.load(open(out))
        print(f"replay {policy} ...", file=sys.stderr)
        cmd = [a.headroom, "diloco", "replay", "--schedule", path, "--workers",
               str(a.replicas), "--inner-steps", str(a.inner_steps), "--batch", "8",
               "--seq-len", "64", "--val-windows", "256", "--eval-every", "1000000",
               "--seed", "1", "--json"]
        return policy, run(cmd, out)

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        losses = dict(pool.map(replay, jobs.items()))

    ded = losses["dedicated"]["final_val_loss"]
    print(f"`scripts/sites_results.py {a.headroom} {a.out}` (a simulated day on examples/sites/, "
          f"{workers} workers of 80 W; replays: {a.replicas} replicas, H = {a.inner_steps}, "
          f"{a.rounds} rounds for the dedicated run)\n")
    print("| placement | rounds in the day | tokens vs dedicated | energy kWh | kg CO2 | "
          "g CO2 / M tokens | EUR | replay: rounds, mean members | final val loss | vs dedicated |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for policy in ["carbon", "spare"] + [f"single:{s}" for s in SITES] + ["dedicated"]:
        if policy not in runs or policy not in losses:
            continue
        r, l = runs[policy], losses[policy]
        tok = 100.0 * (r["tokens"] / runs["dedicated"]["tokens"] - 1.0)
        print(f"| {policy} | {r['rounds']:,} | {tok:+.1f} % | {r['energy_kwh']:.2f} | "
              f"{r['carbon_g'] / 1000:.3f} | {r['carbon_g_per_mtoken']:.4f} | {r['cost_eur']:.2f} | "
              f"{l['rounds']}, {l['mean_members']:.2f} | {l['final_val_loss']:.4f} | "
              f"{100.0 * (l['final_val_loss'] / ded - 1.0):+.2f} % |")
    print()
    for key in ["carbon_per_token_vs_spare_pct", "carbon_per_token_vs_single_pct",
                "tokens_vs_single_pct", "tokens_vs_dedicated_pct"]:
        print(f"{key}: {json.dumps(sim.get(key))}")


if __name__ == "__main__":
    main()
