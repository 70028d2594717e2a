#!/usr/bin/python3
"""The coordinator's API under hostile clients, side by side (issue 32, item 5: "a new client's
GET /v1/status on the coordinator p99 <= 100 ms under 64 trickling + 300 idle connections"):

- headroom coordinator on src/net (the agent's Boost.Asio/Beast event loop: deadlines, caps,
  idle eviction; budget requests on a worker);
- headroom coordinator as of BASELINE (cpp-httplib 0.11, a pool of 16 worker threads): the
  server it replaced, built from that commit (`make bench-hostile-coordinator` builds it).

Both lead a site of their own on one etcd this script starts (free loopback ports, a temporary
directory). For each: a fresh client's GET /v1/status (a new connection each, 2 s timeout) 300
times at 10 ms pacing, first with nobody else connected, then under 64 slow-trickle connections
(a header byte a second) plus 300 idle keep-alive ones, kept up by reopening whatever the server
closes (tests/hostile/hostile_http.py's Attack, the hostile suites' load). A request that times
out counts as 2,000 ms and as a failure; after 25 failures a subject counts as starved and its
run ends there (bench/agent_hostile.py's rules). Prints a table; --json FILE writes the numbers.

Usage: coordinator_hostile.py HEADROOM BASELINE_HEADROOM [--json FILE]
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "hostile"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from agent_hostile import IDLE, PACING_S, REQUESTS, TIMEOUT_S, TRICKLE, measure  # noqa: E402
from hostile_http import ETCD, Etcd  # noqa: E402

LISTENING = r"listening on http://[^ :]+:(\d+)/"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("headroom")
    ap.add_argument("baseline")
    ap.add_argument("--baseline-name", default="headroom df4cb03 (cpp-httplib 0.11, 16 threads)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not os.access(ETCD, os.X_OK):
        sys.exit("coordinator_hostile: %s is not installed (scripts/setup.sh)" % ETCD)
    etcd = Etcd()
    try:
        results = []
        for i, (name, binary) in enumerate([("headroom coordinator (src/net)", args.headroom),
                                            (args.baseline_name, args.baseline)]):
            argv = [binary, "coordinator", "--etcd", etcd.url, "--site", "bench-%d" % i,
                    "--site-budget-w", "1000", "--listen", "127.0.0.1:0"]
            print("measuring %s ..." % name, file=sys.stderr, flush=True)
            results.append(measure(name, argv, {}, b"/v1/status", LISTENING))
    finally:
        etcd.stop()
    print("\nA new client's GET /v1/status on the coordinator, %d requests, %d ms pacing, "
          "%.0f s timeout" % (REQUESTS, PACING_S * 1000, TIMEOUT_S))
    print("%-50s %28s   %s" % ("", "quiet: p50 / p99 / max ms",
                               "%d trickling + %d idle: p50 / p99 / max ms, failed"
                               % (TRICKLE, IDLE)))
    for r in results:
        q, a = r["quiet"], r["attacked"]
        print("%-50s %8.2f / %7.2f / %7.2f   %8.2f / %7.2f / %7.2f, %d/%d" % (
            r["name"], q["p50_ms"], q["p99_ms"], q["max_ms"], a["p50_ms"], a["p99_ms"],
            a["max_ms"], a["failures"], a["requests"]))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
