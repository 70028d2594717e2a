#!/usr/bin/python3
"""Cross-checks `headroom analyze` against tools/reference_analyze.py on the shared 8x H100
training traces (wide CSVs and the raw nvidia-smi log), scope sum and scope gpu.

The data lives outside the project (../shared/power-data next to the checkout, or
$HEADROOM_POWER_DATA); without it this exits 77, which ctest reports as skipped.
Agreement: counts equal; everything else within a relative 1e-9 (1e-6 for the spectrum, whose
FFTs differ in rounding).
"""
import argparse
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_analyze as ref  # noqa: E402

SKIP = 77


def data_dir():
    env = os.environ.get("HEADROOM_POWER_DATA")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "shared", "power-data"))


def close(a, b, rel):
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)


def compare(name, got, want):
    problems = []
    for key in ("samples", "gpus", "gaps"):
        if got[key] != want[key]:
            problems.append(f"{key}: headroom {got[key]} reference {want[key]}")
    for key in ("dt_s", "energy_j", "mean_power_w", "peak_power_w", "duration_s",
                "max_ramp_w_per_s"):
        if not close(got[key], want[key], 1e-9):
            problems.append(f"{key}: headroom {got[key]} reference {want[key]}")
    for g, w in zip(got["windows"], want["windows"]):
        for key in ("windows_counted",):
            if g[key] != w[key]:
                problems.append(f"{w['window_s']}s {key}: headroom {g[key]} reference {w[key]}")
        for key in ("violation_fraction", "max_window_power_w"):
            if not close(g[key], w[key], 1e-9):
                problems.append(f"{w['window_s']}s {key}: headroom {g[key]} reference {w[key]}")
    for key in ("band_fraction", "dominant_hz"):
        if not close(got["spectrum"][key], want["spectrum"][key], 1e-6):
            problems.append(f"spectrum {key}: headroom {got['spectrum'][key]} "
                            f"reference {want['spectrum'][key]}")
    status = "agrees" if not problems else "DIFFERS"
    print(f"{name}: {status}")
    for p in problems:
        print(f"  {p}")
    return not problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--headroom", required=True)
    a = ap.parse_args()
    root = os.path.join(data_dir(), "h100-8gpu-training-traces")
    if not os.path.isdir(root):
        print(f"no shared power data at {root}: skipped")
        return SKIP
    cases = []
    for f in sorted(os.listdir(root)):
        if f.endswith(".csv"):
            cases.append((os.path.join(root, f), "wide", 0))
    cases.append((os.path.join(root, "raw-nvidia-smi", "ckpt1000.csv"), "nvidia-smi", 8))
    windows = [0.5, 30.0, 300.0]
    ok = True
    for path, fmt, gpus in cases:
        series = ref.read_series(path, fmt, gpus)
        for scope, budget in (("sum", 4000.123), ("gpu", 500.123)):
            args = [a.headroom, "analyze", path, "--json", "--scope", scope, "--budget-w",
                    str(budget), "--windows", "0.5s,30s,5min"]
            if gpus:
                args += ["--gpus", str(gpus)]
            got = json.loads(subprocess.run(args, check=True, capture_output=True,
                                            text=True).stdout)
            want = ref.analyze(series, scope, budget, windows)
            ok &= compare(f"{os.path.basename(path)} ({fmt}, scope {scope})", got, want)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
