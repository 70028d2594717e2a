#!/usr/bin/python3
"""The agent's overhead, side by side with its peer (bench/agent_peer.py: a Python standard-library
poll-and-serve loop doing the same job), measured the same way. See docs/PERFORMANCE.md.

Both read 8 GPUs every 0.5 s through the same NVML library (the fake libnvidia-ml of the test
tree, FAKE_NVML_GPUS=8), decide, record a trace and serve /v1/actuation. For each:
  idle        CPU (every thread's run time, /proc/PID/task/*/schedstat, over IDLE_S seconds)
              as % of one core,
              RSS (VmRSS) at the end, peak RSS (VmHWM)
  decision    latency p50 / p99 (telemetry read + decision + publication, measured in-process)
  API         wrk on loopback at ~1,000 requests/s on GET /v1/actuation, LOAD_S seconds at each
              of three pacings (D + 1 connections, each D = 7, 10, 13 ms apart: cpp-httplib
              0.11 waits on an idle keep-alive connection in 10 ms selects with a 1 ms sleep
              between them, so the pacing matters to its tail): achieved rate, latency p50 / p99,
              and the server's CPU under that load (whole process, /proc/PID/stat)
  flat out    wrk with 10 connections and no pacing for 10 s: the most requests/s, and p99
The subject runs on core 0 and wrk on core 1 (taskset), so the load tool does not steal its core.

Usage: agent_overhead.py HEADROOM FAKE_NVML_LIB [--idle-s 60] [--load-s 30] [--json FILE]
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def process_cpu_seconds(pid):
    """utime + stime of the whole process, ended threads included (/proc/PID/stat), in clock
    ticks of 10 ms: fine over seconds of load."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state): utime is field 14, stime field 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """Run time of the threads alive now, in ns (/proc/PID/task/*/schedstat, first field), for the
    idle measurement, where 10 ms ticks are too coarse. No thread ends while idle: neither
    subject has a connection open then."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            pass
    return total / 1e9


def memory_mb(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024.0
    return out["VmRSS"], out["VmHWM"]


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read().decode())


def wrk_ms(text):
    m = re.match(r"([\d.]+)(us|ms|s)$", text)
    value, unit = float(m.group(1)), m.group(2)
    return value * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


PACINGS_MS = (7, 10, 13)


def run_wrk(url, seconds, delay_ms=None):
    """delay_ms: D + 1 connections, each waiting D ms between requests (about 1,050 requests/s
    offered, whatever D); None: as fast as 10 connections go."""
    env = dict(os.environ, WRK_DELAY_MS=str(delay_ms or 0))
    connections = delay_ms + 1 if delay_ms else 10
    argv = ["taskset", "-c", "1", "wrk", "-t1", "-c%d" % connections, "-d%ds" % seconds,
            "--latency"]
    if delay_ms:
        argv += ["-s", os.path.join(ROOT, "bench", "wrk_rate.lua")]
    out = subprocess.run(argv + [url], capture_output=True, text=True, env=env,
                         check=True).stdout
    lat = dict(re.findall(r"^\s+(50|75|90|99)%\s+(\S+)$", out, re.M))
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)", out)
    return {"requests_per_s": rate, "p50_ms": wrk_ms(lat["50"]), "p99_ms": wrk_ms(lat["99"]),
            "errors": errors.group(0) if errors else None}


def measure(name, argv, env, idle_s, load_s, latency_of):
    p = subprocess.Popen(["taskset", "-c", "0"] + argv, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    port = None
    for _ in range(20):
        line = p.stderr.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        p.kill()
        sys.exit("%s did not start" % name)
    # Keep reading its log, so that a full pipe never blocks it.
    threading.Thread(target=p.stderr.read, daemon=True).start()
    base = "http://127.0.0.1:%d" % port
    print("%s: warming up, then %d s idle and 3 x %d s under load ..." % (name, idle_s, load_s),
          file=sys.stderr, flush=True)
    time.sleep(5)  # startup (library loading, first decisions) is not steady state
    c0, t0 = cpu_seconds(p.pid), time.monotonic()
    time.sleep(idle_s)
    c1, t1 = cpu_seconds(p.pid), time.monotonic()
    rss_idle, _ = memory_mb(p.pid)
    c1p = process_cpu_seconds(p.pid)
    paced = {d: run_wrk(base + "/v1/actuation", load_s, d) for d in PACINGS_MS}
    c2, t2 = process_cpu_seconds(p.pid), time.monotonic()
    saturated = run_wrk(base + "/v1/actuation", 10)
    rss, hwm = memory_mb(p.pid)
    decision = latency_of(base)
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)
    return {"name": name,
            "idle_cpu_pct": 100.0 * (c1 - c0) / (t1 - t0),
            "rss_mb": rss_idle, "peak_rss_mb": hwm, "rss_after_load_mb": rss,
            "decision_p50_ms": 1e3 * decision["p50"], "decision_p99_ms": 1e3 * decision["p99"],
            "decisions_measured": decision["samples"],
            "load_cpu_pct": 100.0 * (c2 - c1p) / (t2 - t1),
            "api": paced[10], "paced": {str(d): r for d, r in paced.items()},
            "api_p99_ms_worst": max(r["p99_ms"] for r in paced.values()),
            "saturated": saturated}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("headroom")
    ap.add_argument("fake_nvml")
    ap.add_argument("--idle-s", type=int, default=60)
    ap.add_argument("--load-s", type=int, default=20, help="seconds at each pacing")
    ap.add_argument("--json")
    args = ap.parse_args()
    env = dict(os.environ, FAKE_NVML_GPUS="8", FAKE_NVML_POWER_MW="300000",
               FAKE_NVML_LIMIT_MW="700000")
    with tempfile.TemporaryDirectory() as tmp:
        agent = measure(
            "headroom agent",
            [args.headroom, "agent", "--source", "nvml", "--nvml-library", args.fake_nvml,
             "--scenario", "h100-8b-tp1", "--controller", "ppo", "--policy",
             os.path.join(ROOT, "policies", "h100-8b-tp1.json"), "--listen", "127.0.0.1:0",
             "--trace-out", os.path.join(tmp, "agent.csv")],
            env, args.idle_s, args.load_s,
            lambda base: get_json(base + "/v1/status")["decision_latency_s"])
        budget = 600.0
        peer = measure(
            "python stdlib loop",
            ["/usr/bin/python3", os.path.join(ROOT, "bench", "agent_peer.py"), "--nvml-library",
             args.fake_nvml, "--budget-w", str(budget), "--listen", "127.0.0.1:0",
             "--trace-out", os.path.join(tmp, "peer.csv")],
            env, args.idle_s, args.load_s, lambda base: get_json(base + "/stats"))
    rows = [("idle CPU, % of one core", "idle_cpu_pct", "%.3f"),
            ("RSS, MB", "rss_mb", "%.1f"),
            ("peak RSS, MB", "peak_rss_mb", "%.1f"),
            ("decision p50, ms", "decision_p50_ms", "%.4f"),
            ("decision p99, ms", "decision_p99_ms", "%.4f"),
            ("API rate achieved (10 ms pacing), req/s", ("api", "requests_per_s"), "%.0f"),
            ("API p50 (10 ms pacing), ms", ("api", "p50_ms"), "%.3f")]
    rows += [("API p99 (%d ms pacing), ms" % d, ("paced", str(d), "p99_ms"), "%.3f")
             for d in PACINGS_MS]
    rows += [("API p99, worst pacing, ms", "api_p99_ms_worst", "%.3f"),
            ("CPU under API load, % of one core", "load_cpu_pct", "%.1f"),
            ("API flat out: req/s (10 connections)", ("saturated", "requests_per_s"), "%.0f"),
            ("API flat out: p99, ms", ("saturated", "p99_ms"), "%.3f")]

    def get(d, key):
        for k in key if isinstance(key, tuple) else (key,):
            d = d[k]
        return d

    print("8 GPUs (fake NVML) at 0.5 s; API load: wrk on loopback, ~1,050 req/s: D+1 connections"
          " each D ms apart")
    print("%-42s %16s %20s %10s" % ("", "headroom agent", "python stdlib loop", "ratio"))
    for label, key, fmt in rows:
        a, b = get(agent, key), get(peer, key)
        if "requests_per_s" in str(key):
            a, b = b, a  # higher is better
        ratio = "%.1fx" % (b / a) if a > 0 else "-"
        if "requests_per_s" in str(key):
            a, b = b, a
        print("%-42s %16s %20s %10s" % (label, fmt % a, fmt % b, ratio))
    print("(ratio: python / headroom, so > 1 is headroom ahead, except for the rates, where it is\n"
          " headroom / python)")
    for s in (agent, peer):
        for run, r in list(s["paced"].items()) + [("flat out", s["saturated"])]:
            if r["errors"]:
                print("%s (%s): wrk reported %s" % (s["name"], run, r["errors"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"agent": agent, "peer": peer}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
