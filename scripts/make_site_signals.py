#!/usr/bin/env python3
"""Makes the sample site signals in examples/sites/ (docs/SITE.md, "Several sites").

Each site is the paper's 16-GPU composite on 60 % of its nameplate (3,840 W), its own seed and
random offsets, run by `headroom fleet-sim` for a simulated day; its spare power each minute is
the least of (site budget - the site's true power) over that minute's seconds (what was free
for the whole minute). Price and carbon intensity are hourly, their magnitudes from public
figures named below, their shapes stated:

  nuclear  carbon 56 g/kWh flat (France 2023, Ember via Our World in Data: lifecycle
           intensity of generation); price 97 EUR/MWh flat (the 2023 European day-ahead
           average, FfE "European day-ahead electricity prices in 2023").
  solar    carbon 381 g/kWh mean (Germany 2023, Ember via OWID), shaped by the sun: x (1 - 0.45
           sin) between 06:00 and 20:00, the daily mean kept at 381 (assumed shape: solar
           output peaking at 13:00); price 86.2 EUR/MWh 08:00-20:00 and 63.7 otherwise (the
           German 2023 EPEX peak and off-peak averages, FfE "German electricity prices on EPEX
           Spot 2023").
  coal     carbon 713 g/kWh flat (India 2023, Ember via OWID); price 60 EUR/MWh flat
           (assumed: cheap and dirty).

  scripts/make_site_signals.py build/bin/headroom examples/sites
"""
import csv
import math
import os
import subprocess
import sys
import tempfile

BUDGET_W = 3840.0
DAY_S = 86400


def carbon(site, hour):
    if site == "nuclear":
        return 56.0
    if site == "coal":
        return 713.0
    # solar: a dip while the sun is up, rescaled so that the daily mean is 381.
    raw = [1.0 - (0.45 * math.sin(math.pi * (h + 0.5 - 6.0) / 14.0) if 6 <= h < 20 else 0.0)
           for h in range(24)]
    return 381.0 * raw[hour] * 24.0 / sum(raw)


def price(site, hour):
    if site == "nuclear":
        return 97.0
    if site == "coal":
        return 60.0
    return 86.2 if 8 <= hour < 20 else 63.7


def spare_per_minute(headroom, seed, duration_s):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "power.csv")
        subprocess.run([headroom, "fleet-sim", "--site-budget-w", str(BUDGET_W), "--speed", "0",
                        "--duration-s", str(duration_s), "--seed", str(seed), "--offsets",
                        "random", "--power-csv", path], check=True, stdout=subprocess.DEVNULL)
        minutes = {}
        with open(path) as f:
            for row in csv.DictReader(f):
                m = int(float(row["t_s"]) // 60)
                free = float(row["site_budget_w"]) - float(row["site_power_w"])
                minutes[m] = min(minutes.get(m, math.inf), max(0.0, free))
        return [minutes.get(m, 0.0) for m in range(duration_s // 60)]


def main():
    headroom, out = sys.argv[1], sys.argv[2]
    duration_s = int(sys.argv[3]) if len(sys.argv) > 3 else DAY_S
    os.makedirs(out, exist_ok=True)
    for seed, site in [(11, "nuclear"), (12, "solar"), (13, "coal")]:
        spare = spare_per_minute(headroom, seed, duration_s)
        with open(os.path.join(out, f"{site}.csv"), "w") as f:
            f.write(f"# {site}: made by scripts/make_site_signals.py (its docstring says how);\n")
            f.write(f"# spare: headroom fleet-sim, the composite at {BUDGET_W:.0f} W, seed {seed}, "
                    "random offsets, the least free watts of each minute\n")
            f.write("t_s,spare_w,price_eur_per_mwh,carbon_g_per_kwh\n")
            for m, w in enumerate(spare):
                hour = (m // 60) % 24
                f.write(f"{m * 60},{w:.1f},{price(site, hour):.1f},{carbon(site, hour):.1f}\n")
        print(f"{site}: {len(spare)} minutes, mean spare {sum(spare) / len(spare):.0f} W")


if __name__ == "__main__":
    main()
