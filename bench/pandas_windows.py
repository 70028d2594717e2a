#!/usr/bin/python3
"""The peer: the same window statistics as `headroom analyze --scope gpu`, computed with pandas.

Reads a long-format trace (t_s, gpu, power_w), then for each window length W computes, by the
definitions of docs/METRICS.md:
  dt                  median of all consecutive timestamp differences, pooled over GPUs
  window index        k = floor((t - t0_gpu) / W + 1e-9), t0_gpu = the GPU's first time
  window power        mean of the window's samples
  counted             t0_gpu + (k + 1) W <= last_gpu + dt
  violation_fraction  counted windows with power > budget / counted windows
  max_window_power_w  largest counted window power
and prints one JSON object shaped like headroom's: {"dt_s", "windows": [{window_s,
windows_counted, violation_fraction, max_window_power_w}]}.

Usage: pandas_windows.py TRACE.csv BUDGET_W [WINDOW_S ...]
"""
import json
import sys

import numpy as np
import pandas as pd


def main():
    path, budget_w = sys.argv[1], float(sys.argv[2])
    windows_s = [float(w) for w in sys.argv[3:]] or [0.5, 30.0, 300.0]
    df = pd.read_csv(path, usecols=["t_s", "gpu", "power_w"],
                     dtype={"t_s": "float64", "gpu": "int64", "power_w": "float64"})
    by_gpu = df.groupby("gpu", sort=False)["t_s"]
    steps = by_gpu.diff().dropna()
    dt_s = float(np.median(steps.to_numpy()))
    t0 = by_gpu.transform("first").to_numpy()
    last = by_gpu.transform("last").to_numpy()
    t = df["t_s"].to_numpy()
    out = {"dt_s": dt_s, "windows": []}
    for w in windows_s:
        k = np.floor((t - t0) / w + 1e-9).astype(np.int64)
        grouped = pd.DataFrame({"gpu": df["gpu"].to_numpy(), "k": k, "p": df["power_w"].to_numpy(),
                                "t0": t0, "last": last}).groupby(["gpu", "k"], sort=False)
        stats = grouped.agg(p=("p", "mean"), t0=("t0", "first"), last=("last", "first"))
        ks = stats.index.get_level_values("k").to_numpy()
        counted = stats["t0"].to_numpy() + (ks + 1) * w <= stats["last"].to_numpy() + dt_s
        p = stats["p"].to_numpy()[counted]
        out["windows"].append({
            "window_s": w,
            "windows_counted": int(counted.sum()),
            "violation_fraction": float((p > budget_w).mean()) if p.size else None,
            "max_window_power_w": float(p.max()) if p.size else None,
        })
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
