#!/usr/bin/python3
"""Validates the twin against the shared 8x H100 training traces (docs/TWIN.md).

For every trace, runs `headroom twin run --scenario h100-8b-ddp-train --checkpoint-every N`
for the trace's duration, then `headroom analyze --scope sum` on the measured trace and on the
twin's, and compares the largest 30 s and 5 min window power and the energy (mean power of the
summed series x duration, so that logger gaps count as the power before them). save1000 and save1
are the calibration traces (tools/derive_h100_ddp.py); save10/50/100/500 are held out; save200 is
the spare.

Usage: validate_twin_h100.py --headroom build/bin/headroom [--out-dir DIR] [--seeds N]
Exit status: 77 when the data is not next to the checkout.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77
TRACES = [("save1000", 1000, "calibration"), ("save1", 1, "calibration"),
          ("save10", 10, "validation"), ("save50", 50, "validation"),
          ("save100", 100, "validation"), ("save500", 500, "validation"),
          ("save200", 200, "spare")]


def data_dir():
    env = os.environ.get("HEADROOM_POWER_DATA")
    if env:
        return os.path.join(env, "h100-8gpu-training-traces")
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "shared", "power-data",
                                         "h100-8gpu-training-traces"))


def analyze(headroom, path, extra):
    out = subprocess.run([headroom, "analyze", path, "--json", "--scope", "sum",
                          "--windows", "30s,5min"] + extra,
                         check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    # Energy as mean node power x duration: the sum series holds each GPU's last sample across
    # the logger's gaps (save10 has 528 steps > 5 dt), which analyze's energy_j leaves out.
    return {"max30": j["windows"][0]["max_window_power_w"],
            "max300": j["windows"][1]["max_window_power_w"],
            "energy": j["mean_power_w"] * j["duration_s"], "duration": j["duration_s"],
            "gaps": j["gaps"]}


def quantile(values, q):
    """The q-quantile by linear interpolation between order statistics (numpy's default)."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--headroom", required=True)
    ap.add_argument("--out-dir")
    ap.add_argument("--seeds", type=int, default=21,
                    help="twin runs per trace, seeds 1..N (the twin's storage turns slow at a "
                         "random time): the median is compared, p10-p90 shown")
    ap.add_argument("--check-calibration", type=float, metavar="PCT",
                    help="exit 1 if a calibration trace is off by more than PCT percent")
    a = ap.parse_args()
    root = data_dir()
    if not os.path.isdir(root):
        print(f"no shared power data at {root}: skipped")
        return SKIP
    out_dir = a.out_dir or tempfile.mkdtemp(prefix="headroom_twin_h100_")
    seeds = range(1, a.seeds + 1)
    print(f"twin: median of {a.seeds} seeds [p10, p90]; err = median vs measured")
    print(f"{'trace':9} {'role':11} {'30 s max (W)':>34} {'5 min max (W)':>34} "
          f"{'energy (MJ)':>40}")
    print(f"{'':9} {'':11} {'measured twin [p10, p90] err':>34} "
          f"{'measured twin [p10, p90] err':>34} {'measured twin [p10, p90] err':>40}")
    worst = 0.0
    worst_calibration = 0.0
    inside = 0
    validation_cells = 0
    for name, every, role in TRACES:
        measured_path = os.path.join(root, f"h100x8_llm8b_ddp_{name}.csv")
        m = analyze(a.headroom, measured_path, ["--format", "wide"])
        runs = []
        for seed in seeds:
            twin_path = os.path.join(out_dir, f"twin_{name}_{seed}.csv")
            subprocess.run([a.headroom, "twin", "run", "--scenario", "h100-8b-ddp-train",
                            "--checkpoint-every", str(every),
                            "--duration-s", f"{m['duration']:.1f}",
                            "--seed", str(seed), "--out", twin_path],
                           check=True, capture_output=True)
            runs.append(analyze(a.headroom, twin_path, []))
            os.remove(twin_path)
        cells = []
        for key, scale, fmt in (("max30", 1, "{:.0f}"), ("max300", 1, "{:.0f}"),
                                ("energy", 1e-6, "{:.3f}")):
            values = [r[key] for r in runs]
            med, p10, p90 = quantile(values, 0.5), quantile(values, 0.1), quantile(values, 0.9)
            err = (med - m[key]) / m[key] * 100
            if role == "validation":
                worst = max(worst, abs(err))
                validation_cells += 1
                inside += p10 <= m[key] <= p90
            if role == "calibration":
                worst_calibration = max(worst_calibration, abs(err))
            f = lambda x: fmt.format(x * scale)
            cells.append(f"{f(m[key])} {f(med)} [{f(p10)}, {f(p90)}] {err:+.1f}%")
        print(f"{name:9} {role:11} {cells[0]:>34} {cells[1]:>34} {cells[2]:>40}")
    print(f"largest error on validation traces: {worst:.1f}%; "
          f"on calibration traces: {worst_calibration:.1f}%; "
          f"measured within the twin's p10-p90: {inside} of {validation_cells} validation values")
    if a.check_calibration is not None and worst_calibration > a.check_calibration:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
