#!/usr/bin/python3
"""A new client's latency while hostile clients hold connections, side by side (issue 12):

- headroom agent (Boost.Asio/Beast: one event loop, deadlines, caps, idle eviction);
- headroom agent as of 4f35f76, on cpp-httplib 0.11 (a worker thread per connection, 64 of
  them) — the server it replaced, built from that commit by `make bench-hostile`;
- bench/agent_peer.py, a Python standard-library ThreadingHTTPServer doing the same job.

For each: a fresh client's GET /v1/actuation (a new connection each, 2 s timeout as the Python
client's) 300 times at 10 ms pacing, first with nobody else connected, then under 64
slow-trickle connections (a header byte a second) plus 300 idle keep-alive ones, kept up by
reopening whatever the server closes. A request that times out counts as 2,000 ms and as a
failure; after 25 failures a subject counts as starved and its run ends there. Prints a table;
--json FILE writes the numbers.

Usage: agent_hostile.py HEADROOM BASELINE_HEADROOM FAKE_NVML [--json FILE]
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "hostile"))
from hostile_http import Attack, percentile, raw  # noqa: E402

REQUESTS = 300
PACING_S = 0.010
TIMEOUT_S = 2.0
TRICKLE, IDLE = 64, 300


LISTENING = r"listening on [^ :]+:(\d+)"  # the agent's start line


def start(argv, env, listening=LISTENING):
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, **env))
    for _ in range(50):
        line = p.stderr.readline()
        m = re.search(listening, line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, int(m.group(1))
        if not line:
            break
    p.kill()
    sys.exit("did not start: %s" % " ".join(argv))


MAX_FAILURES = 25  # then the subject is starved: the rest would only add timeouts


def latencies(port, path=b"/v1/actuation"):
    out, failures = [], 0
    for _ in range(REQUESTS):
        if failures >= MAX_FAILURES:
            break
        t0 = time.monotonic()
        try:
            status, _, _ = raw(port, b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                               b"Connection: close\r\n\r\n", timeout_s=TIMEOUT_S)
            ok = status == 200
        except (OSError, ConnectionError):
            ok = False
        ms = 1000.0 * (time.monotonic() - t0)
        if not ok:
            failures += 1
            ms = max(ms, 1000.0 * TIMEOUT_S)
        out.append(ms)
        time.sleep(PACING_S)
    return {"p50_ms": percentile(out, 0.5), "p99_ms": percentile(out, 0.99), "max_ms": max(out),
            "failures": failures, "requests": len(out)}


def measure(name, argv, env, path=b"/v1/actuation", listening=LISTENING):
    """A subject's latencies with nobody else connected, then under the attack."""
    p, port = start(argv, env, listening)
    try:
        quiet = latencies(port, path)
        attack = Attack(port, trickle=TRICKLE, idle=IDLE)
        attack.start()
        deadline = time.monotonic() + 90  # a server with a short listen backlog accepts slowly
        while time.monotonic() < deadline and attack.counts() != {"trickle": TRICKLE, "idle": IDLE}:
            time.sleep(0.05)
        established = attack.counts()
        loaded = latencies(port, path)
        attack.stopping.set()
        attack.join()
        loaded["attack_established"] = established
        return {"name": name, "quiet": quiet, "attacked": loaded}
    finally:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("headroom")
    ap.add_argument("baseline")
    ap.add_argument("fake_nvml")
    ap.add_argument("--json")
    args = ap.parse_args()
    env = {"FAKE_NVML_GPUS": "8", "FAKE_NVML_POWER_MW": "250000", "FAKE_NVML_LIMIT_MW": "400000"}
    agent_args = ["agent", "--source", "nvml", "--nvml-library", args.fake_nvml, "--scenario",
                  "a100-7b-tp1", "--listen", "127.0.0.1:0"]
    with tempfile.TemporaryDirectory() as tmp:
        subjects = [
            ("headroom (Boost.Beast)", [args.headroom] + agent_args),
            ("headroom 4f35f76 (cpp-httplib 0.11)", [args.baseline] + agent_args),
            ("Python ThreadingHTTPServer", ["/usr/bin/python3",
                                            os.path.join(ROOT, "bench", "agent_peer.py"),
                                            "--nvml-library", args.fake_nvml, "--budget-w",
                                            "300", "--listen", "127.0.0.1:0", "--trace-out",
                                            os.path.join(tmp, "peer.csv")]),
        ]
        results = []
        for name, argv in subjects:
            print("measuring %s ..." % name, file=sys.stderr, flush=True)
            results.append(measure(name, argv, env))
    print("\nA new client's GET /v1/actuation, %d requests, %d ms pacing, %.0f s timeout"
          % (REQUESTS, PACING_S * 1000, TIMEOUT_S))
    print("%-38s %28s   %s" % ("", "quiet: p50 / p99 / max ms",
                               "64 trickling + 300 idle: p50 / p99 / max ms, failed"))
    for r in results:
        q, a = r["quiet"], r["attacked"]
        print("%-38s %8.2f / %7.2f / %7.2f   %8.2f / %7.2f / %7.2f, %d/%d" % (
            r["name"], q["p50_ms"], q["p99_ms"], q["max_ms"], a["p50_ms"], a["p99_ms"],
            a["max_ms"], a["failures"], a["requests"]))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
