#!/usr/bin/python3
"""An independent computation of `headroom analyze`'s definitions (docs/METRICS.md), in numpy.

Written from the definitions, not from the C++ code: whole-array operations where headroom
streams. Used by tools/check_against_reference.py to cross-check headroom on real traces, and
usable alone:

    reference_analyze.py TRACE [--format wide|long|nvidia-smi] [--gpus N] [--scope gpu|sum]
                         [--budget-w W] [--windows 0.5,30,300]
"""
import argparse
import json
import re
import sys

import numpy as np
import pandas as pd

GAP_FACTOR = 5.0
EPS = 1e-9
SEGMENT = 4096
PROVISIONAL_STEPS = 63


def read_series(path, fmt, gpus):
    """Returns a list of (t_s, power_w) numpy arrays, one per GPU."""
    if fmt == "long":
        df = pd.read_csv(path)
        return [(g["t_s"].to_numpy(float), g["power_w"].to_numpy(float))
                for _, g in df.groupby("gpu", sort=False)]
    if fmt == "wide":
        df = pd.read_csv(path)
        cols = [c for c in df.columns if re.fullmatch(r"p\d+_w", c)]
        out = []
        for c in cols:
            m = df[c].notna().to_numpy()
            out.append((df["t_s"].to_numpy(float)[m], df[c].to_numpy(float)[m]))
        return out
    if fmt == "nvidia-smi":
        df = pd.read_csv(path, skipinitialspace=True)
        df.columns = [c.strip() for c in df.columns]
        ts = pd.to_datetime(df["timestamp"], format="%Y/%m/%d %H:%M:%S.%f").astype("int64")
        t = (ts - ts.iloc[0]).to_numpy() / 1e9
        power_col = [c for c in df.columns if c.startswith("power.draw")][0]
        p = df[power_col].str.replace("W", "").str.strip().astype(float).to_numpy()
        if "index" in df.columns:
            g = df["index"].to_numpy()
        else:
            g = np.arange(len(df)) % gpus
        return [(t[g == k], p[g == k]) for k in sorted(set(g))]
    raise ValueError(fmt)


def window_stats(t, p, w, dt, budget):
    """(counted, over, max, means-by-k of counted windows) for one series."""
    t0, last = t[0], t[-1]
    k = np.floor((t - t0) / w + EPS).astype(np.int64)
    ks, start = np.unique(k, return_index=True)
    sums = np.add.reduceat(p, start)
    counts = np.diff(np.append(start, len(p)))
    means = sums / counts
    counted = t0 + (ks + 1) * w <= last + dt
    m = means[counted]
    over = int((m > budget).sum()) if budget is not None else 0
    return int(counted.sum()), over, (float(m.max()) if m.size else None), ks[counted], m


def welch(series_list, dt, lo, hi, grid):
    """Pooled Welch estimate per docs/METRICS.md."""
    n = SEGMENT
    win_full = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)
    acc = np.zeros(n // 2 + 1)
    segments = 0
    ss, count = 0.0, 0
    for t, p in series_list:
        ss += float(((p - p.mean()) ** 2).sum())
        count += len(p)
        # Runs between gaps (provisional dt: median of the first 63 steps).
        steps = np.diff(t)
        if grid or len(steps) == 0:
            runs = [p]
        else:
            d0 = float(np.median(steps[:PROVISIONAL_STEPS]))
            cut = np.nonzero(steps > GAP_FACTOR * d0)[0] + 1
            runs = np.split(p, cut)
        emitted = False
        for r in runs:
            for s in range(0, len(r) - n + 1, n // 2):
                seg = r[s:s + n]
                x = (seg - seg.mean()) * win_full
                acc += np.abs(np.fft.rfft(x)) ** 2 / (win_full ** 2).sum()
                segments += 1
                emitted = True
        if not emitted and len(runs[-1]) >= 4:
            r = runs[-1]
            w = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(len(r)) / len(r))
            x = np.zeros(n)
            x[:len(r)] = (r - r.mean()) * w
            acc += np.abs(np.fft.rfft(x)) ** 2 / (w ** 2).sum()
            segments += 1
    hi = min(hi, 0.5 / dt)
    if segments == 0:
        return {"band_hz": [lo, hi], "band_fraction": None, "dominant_hz": None}
    c = np.full(n // 2 + 1, 2.0)
    c[0] = c[-1] = 1.0
    power = c * acc
    f = np.arange(n // 2 + 1) / (n * dt)
    band = (f >= lo) & (f <= hi)
    band[0] = False
    var = ss / count
    frac = None
    if band.any() and var > 0:
        frac = float(min(1.0, max(0.0, power[band].sum() / (segments * n) / var)))
    k = 1 + int(np.argmax(power[1:]))
    return {"band_hz": [lo, hi], "band_fraction": frac, "dominant_hz": k / (n * dt)}


def analyze(series, scope, budget, windows, band=(0.1, 20.0)):
    steps = np.concatenate([np.diff(t) for t, _ in series])
    dt = float(np.median(steps))
    energy, gaps = 0.0, 0
    for t, p in series:
        d = np.diff(t)
        a = 0.5 * (p[1:] + p[:-1]) * d
        energy += float(a[d <= GAP_FACTOR * dt].sum())
        gaps += int((d > GAP_FACTOR * dt).sum())
    if scope == "sum":
        t_start = max(t[0] for t, _ in series)
        t_end = min(t[-1] for t, _ in series)
        n = int(np.floor((t_end - t_start) / dt)) + 2
        grid = t_start + np.arange(n) * dt
        grid = grid[grid <= t_end]
        total = np.zeros(len(grid))
        for t, p in series:
            total += p[np.searchsorted(t, grid, side="right") - 1]
        work = [(grid, total)]
    else:
        work = series
    out = {"samples": int(sum(len(t) for t, _ in series)), "gpus": len(series), "dt_s": dt,
           "energy_j": energy, "gaps": gaps,
           "mean_power_w": float(np.concatenate([p for _, p in work]).mean()),
           "peak_power_w": float(max(p.max() for _, p in work)),
           "duration_s": float(max(t[-1] for t, _ in series) - min(t[0] for t, _ in series)),
           "windows": []}
    for w in windows:
        counted, over, mx = 0, 0, None
        for t, p in work:
            c, o, m, _, _ = window_stats(t, p, w, dt, budget)
            counted += c
            over += o
            if m is not None:
                mx = m if mx is None else max(mx, m)
        out["windows"].append({"window_s": w, "windows_counted": counted,
                               "violation_fraction": (over / counted) if budget and counted else None,
                               "max_window_power_w": mx})
    ramp = None
    for t, p in work:
        _, _, _, ks, m = window_stats(t, p, 1.0, dt, None)
        adjacent = np.diff(ks) == 1
        if adjacent.any():
            r = float(np.abs(np.diff(m))[adjacent].max())
            ramp = r if ramp is None else max(ramp, r)
    out["max_ramp_w_per_s"] = ramp
    out["spectrum"] = welch(work, dt, band[0], band[1], grid=(scope == "sum"))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--format", default="long")
    ap.add_argument("--gpus", type=int, default=0)
    ap.add_argument("--scope", default="gpu")
    ap.add_argument("--budget-w", type=float)
    ap.add_argument("--windows", default="0.5,30,300")
    a = ap.parse_args()
    series = read_series(a.trace, a.format, a.gpus)
    res = analyze(series, a.scope, a.budget_w, [float(w) for w in a.windows.split(",")])
    json.dump(res, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
