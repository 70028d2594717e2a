#!/usr/bin/env python3
"""docs/TWIN.md's check of the decode curve below the lowest measured batch.

The twin continues decode below the lowest measured batch as memory-bound: a step's time
t(n) = t0 + c n and its energy above idle-with-the-model-loaded X(n) = e0 + e1 n, both linear
in n; power P(n) = idle_loaded + X(n) / t(n). The replaced recipe interpolated power on
log2(1 + n) toward idle_loaded. Neither can be checked below batch 8 (ML.ENERGY has nothing
there), so this holds out the lowest measured batch instead: from each configuration's
points at batches 16 and 32 alone, both recipes predict batch 8, and the measured batch-8
power and inter-token latency judge them.

Data: shared/power-data/mlenergy-v3/mlenergy_v3_llm_configs.csv (measured; never copied in),
dense models on H100 (idle with a model loaded: 120 W, CATALOGUE section 2), every task.

Usage: low_occupancy_check.py [CSV] [--json]
"""
import argparse
import csv
import json
import math
import os
import statistics
import sys

IDLE_LOADED_H100_W = 120.0


def predict(points):
    """points: {batch: (power_w, itl_s)} with 16 and 32; predictions at batch 8."""
    (p16, t16), (p32, t32) = points[16], points[32]
    # Memory-bound: linear step time and step energy above idle, through the two points.
    c = (t32 - t16) / 16.0
    t0 = t16 - 16.0 * c
    x16, x32 = (p16 - IDLE_LOADED_H100_W) * t16, (p32 - IDLE_LOADED_H100_W) * t32
    e1 = (x32 - x16) / 16.0
    e0 = x16 - 16.0 * e1
    t8 = t0 + 8.0 * c
    mem_bound = IDLE_LOADED_H100_W + (e0 + 8.0 * e1) / t8
    # The replaced recipe: log2(1 + n) from idle_loaded at 0 to the curve at the lowest batch.
    log_interp = IDLE_LOADED_H100_W + (p16 - IDLE_LOADED_H100_W) * math.log2(9) / math.log2(17)
    return mem_bound, log_interp, t8


def main():
    default = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "power-data",
                           "mlenergy-v3", "mlenergy_v3_llm_configs.csv")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="?", default=default)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not os.path.exists(a.csv):
        sys.exit(f"low_occupancy_check: {a.csv}: not found (shared/power-data is needed)")
    groups = {}
    with open(a.csv) as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            if row["gpu_model"] != "H100" or row["architecture"] != "Dense Transformer":
                continue
            try:
                batch = int(row["max_num_seqs"])
                power = float(row["avg_power_per_gpu_w"])
                itl = float(row["median_itl_ms"]) / 1000.0
            except ValueError as e:
                sys.exit(f"low_occupancy_check: {a.csv}:{line}: {e}")
            key = (row["task"], row["model_id"], row["num_gpus"])
            groups.setdefault(key, {})[batch] = (power, itl)
    rows = []
    for key, pts in sorted(groups.items()):
        if not all(b in pts for b in (8, 16, 32)):
            continue
        mem, log_interp, t8 = predict(pts)
        p8, itl8 = pts[8]
        rows.append({"task": key[0], "model": key[1], "gpus": int(key[2]), "measured_w": p8,
                     "memory_bound_w": mem, "log_interp_w": log_interp,
                     "memory_bound_err_pct": 100 * (mem / p8 - 1),
                     "log_interp_err_pct": 100 * (log_interp / p8 - 1),
                     "itl_measured_ms": 1000 * itl8, "itl_predicted_ms": 1000 * t8})
    if not rows:
        sys.exit("low_occupancy_check: no configuration with batches 8, 16 and 32")

    def mae(k):
        return statistics.mean(abs(r[k]) for r in rows)

    summary = {"configs": len(rows),
               "memory_bound_mean_abs_err_pct": mae("memory_bound_err_pct"),
               "log_interp_mean_abs_err_pct": mae("log_interp_err_pct"),
               "memory_bound_max_abs_err_pct": max(abs(r["memory_bound_err_pct"]) for r in rows),
               "log_interp_max_abs_err_pct": max(abs(r["log_interp_err_pct"]) for r in rows),
               "itl_mean_abs_err_pct": statistics.mean(
                   abs(r["itl_predicted_ms"] / r["itl_measured_ms"] - 1) * 100 for r in rows),
               "rows": rows}
    if a.json:
        print(json.dumps(summary, indent=2))
        return 0
    print("| task | model | GPUs | batch 8 measured | memory-bound | error | log2(1+n) to idle | "
          "error | ITL measured / predicted |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['task']} | {r['model']} | {r['gpus']} | {r['measured_w']:.0f} W | "
              f"{r['memory_bound_w']:.0f} W | {r['memory_bound_err_pct']:+.1f} % | "
              f"{r['log_interp_w']:.0f} W | {r['log_interp_err_pct']:+.1f} % | "
              f"{r['itl_measured_ms']:.1f} / {r['itl_predicted_ms']:.1f} ms |")
    print(f"\n{len(rows)} configurations: mean |error| memory-bound "
          f"{summary['memory_bound_mean_abs_err_pct']:.1f} % (max "
          f"{summary['memory_bound_max_abs_err_pct']:.1f} %), log2(1+n) to idle "
          f"{summary['log_interp_mean_abs_err_pct']:.1f} % (max "
          f"{summary['log_interp_max_abs_err_pct']:.1f} %); step time "
          f"{summary['itl_mean_abs_err_pct']:.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
