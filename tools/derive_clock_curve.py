#!/usr/bin/python3
"""Derives the twin's [power_limit] curve from the Perseus A100 stage profile (GPT-3 175B stages,
the fitting file) and reports its error on the BLOOM 176B stages (held out).

At each locked SM clock: power = all stages' forward+backward energy / their time, normalised
to 1410 MHz; time factor = their time / time at 1410 MHz.

Usage: derive_clock_curve.py [DATA_DIR]   (default ../shared/power-data/perseus-a100-stage-profile)
"""
import os
import sys

import numpy as np
import pandas as pd

here = os.path.dirname(os.path.abspath(__file__))
root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    here, "..", "..", "shared", "power-data", "perseus-a100-stage-profile")
CLOCKS = [1410, 1365, 1320, 1275, 1230, 1185, 1140, 1095, 1050, 1005, 960, 915, 870]


def curve(name):
    d = pd.read_csv(os.path.join(root, f"{name}+a100_sxm_bf16.csv"))
    g = d.groupby("frequency")[["time", "energy"]].sum()
    power = g.energy / g.time
    return power / power.loc[1410], g.time / g.time.loc[1410]


fit_p, fit_t = curve("gpt3-175b")
held_p, held_t = curve("bloom")
print("power_fraction = [" + ", ".join(f"{fit_p.loc[c]:.4f}" for c in CLOCKS) + "]")
print("time_factor = [" + ", ".join(f"{fit_t.loc[c]:.4f}" for c in CLOCKS) + "]")
# Held out: the fitted curve's time factor at BLOOM's power fractions, against BLOOM's.
order = np.argsort(fit_p.values)
predicted = np.interp(held_p.values, fit_p.values[order], fit_t.values[order])
error = np.abs(predicted - held_t.values)
print(f"BLOOM (held out): time-factor error mean {error.mean():.3f}, max {error.max():.3f} "
      f"over {len(error)} clocks")
