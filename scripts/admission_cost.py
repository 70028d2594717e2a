#!/usr/bin/env python3
"""What chunked admission costs (issue 52): every built-in scenario with a rollout, run by
`headroom twin run` uncontrolled (its default concurrency and group size) over the same seeds
and the same fixed time, once as shipped (rollout.admission continuous) and once with
`admission = "chunked"` added to its [rollout]. Common random numbers give both the same
completions. Prints a markdown table: tokens, the mean rollout occupancy (sequences in flight
per engine over rollout ticks, as twin run reports it) and the change, each the mean over seeds.

Usage: admission_cost.py HEADROOM_BINARY [--seeds N] [--duration-s S] [--work DIR]
About 10 s on one core with the defaults (5 seeds, 7200 s: docs/RESULTS.md, "Issue 52: what
chunked admission costs").
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUMMARY = re.compile(
    r"wrote (?P<t>[\d.]+) s, (?P<steps>\d+) steps, [\d.]+ kWh, (?P<tokens>\d+) tokens, "
    r"mean rollout occupancy (?P<occ>[\d.]+) \((?P<admission>\w+) admission\)")


def chunked_copy(text):
    """The scenario's TOML with admission = "chunked" added to its [rollout] table."""
    lines = text.splitlines(keepends=True)
    table = None
    for i, line in enumerate(lines):
        header = re.match(r"\s*\[([^\]]+)\]", line)
        if header:
            table = header.group(1).strip()
        elif table == "rollout" and re.match(r"\s*concurrency\s*=", line):
            return "".join(lines[: i + 1] + ['admission = "chunked"\n'] + lines[i + 1:])
    return None  # no rollout: nothing to admit


def run(headroom, scenario, seed, duration_s, out):
    r = subprocess.run([headroom, "twin", "run", "--scenario", scenario, "--seed", str(seed),
                        "--duration-s", str(duration_s), "--out", out],
                       capture_output=True, text=True, check=True)
    m = SUMMARY.search(r.stderr)
    if not m:
        sys.exit(f"admission_cost: no summary in twin run's output: {r.stderr}")
    for name in (out, out + ".meta.json"):  # the trace and its sidecar: only the summary counts
        if os.path.exists(name):
            os.remove(name)
    return m


def value(text, key):
    m = re.search(rf"^\s*{key}\s*=\s*(\d+)", text, re.MULTILINE)
    return int(m.group(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("headroom")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--duration-s", type=float, default=7200.0)
    p.add_argument("--work", help="where the chunked scenarios and traces go (default: a new "
                   "temporary directory)")
    a = p.parse_args()
    temporary = a.work is None
    a.work = a.work or tempfile.mkdtemp(prefix="admission-cost-")
    os.makedirs(a.work, exist_ok=True)
    print(f"`scripts/admission_cost.py HEADROOM --seeds {a.seeds} --duration-s {a.duration_s:g}`:"
          f" each scenario uncontrolled for {a.duration_s:g} s of simulated time, seeds 1-{a.seeds}"
          ", means over seeds.\n")
    print("| scenario | concurrency | sequences per engine per step | tokens, continuous | "
          "tokens, chunked | tokens | rollout occupancy, continuous | chunked | occupancy | "
          "steps, continuous / chunked |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in sorted(os.listdir(os.path.join(ROOT, "scenarios"))):
        if not name.endswith(".toml"):
            continue
        text = open(os.path.join(ROOT, "scenarios", name)).read()
        chunked = chunked_copy(text)
        if chunked is None:
            continue
        path = os.path.join(a.work, name.replace(".toml", "-chunked.toml"))
        with open(path, "w") as f:
            f.write(chunked)
        base = name[: -len(".toml")]
        engines = value(text, "gpus") // value(text, "tp")
        per_engine = value(text, "prompts_per_step") * value(text, "group_size") / engines
        results = {"continuous": [], "chunked": []}
        for seed in range(1, a.seeds + 1):
            for admission, scenario in (("continuous", base), ("chunked", path)):
                m = run(a.headroom, scenario, seed, a.duration_s,
                        os.path.join(a.work, f"{base}-{admission}-{seed}.csv"))
                assert m.group("admission") == admission, (m.group(0), admission)
                results[admission].append(m)

        def mean(admission, key):
            return sum(float(m.group(key)) for m in results[admission]) / a.seeds

        tc, tk = mean("continuous", "tokens"), mean("chunked", "tokens")
        oc, ok = mean("continuous", "occ"), mean("chunked", "occ")
        sc, sk = mean("continuous", "steps"), mean("chunked", "steps")
        print(f"| `{base}` | {value(text, 'concurrency')} | {per_engine:g} | {tc:,.0f} | "
              f"{tk:,.0f} | {100 * (tk - tc) / tc:+.1f} % | {oc:.2f} | {ok:.2f} | "
              f"{100 * (ok - oc) / oc:+.1f} % | {sc:.1f} / {sk:.1f} |")
    if temporary:
        shutil.rmtree(a.work)


if __name__ == "__main__":
    main()
