#!/usr/bin/env python3
"""CPU seconds one etcd request costs: the figure behind fleet-sim's membership energy.

Starts its own single-member etcd (Debian's etcd-server) on free loopback ports in a temporary
directory, sends N gets and N puts of a member-sized value through the v3 JSON gateway on one
kept-alive connection (as the coordinator's clients do), and prints the etcd process's CPU
seconds per request (from /proc) and this client's. Stops etcd by PID, pass or fail.

  scripts/etcd_request_cost.py [N]
"""
import base64
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    tmp = tempfile.mkdtemp(prefix="etcd-cost-")
    client, peer = free_port(), free_port()
    etcd = subprocess.Popen(
        ["etcd", "--data-dir", f"{tmp}/data",
         "--listen-client-urls", f"http://127.0.0.1:{client}",
         "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"default=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", client, timeout=5)
        key = base64.b64encode(b"/headroom/site/members/diloco-1").decode()
        value = base64.b64encode(json.dumps(
            {"job": "diloco-1", "demand_w": 320.0, "power_w": 160.0, "phase": "train",
             "class": "opportunistic", "floor_w": 0.0, "nameplate_w": 320.0}).encode()).decode()

        def post(path, body):
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            return r.status

        deadline = time.monotonic() + 20
        while True:
            try:
                if post("/v3/kv/put", {"key": key, "value": value}) == 200:
                    break
            except OSError:
                conn.close()
            if time.monotonic() > deadline:
                raise SystemExit("etcd did not start")
            time.sleep(0.1)
        print(f"{'request':8} {'etcd CPU ms':>12} {'client CPU ms':>14} {'wall ms':>8}")
        for kind, path, body in [("get", "/v3/kv/range", {"key": key}),
                                 ("put", "/v3/kv/put", {"key": key, "value": value})]:
            s0, c0, w0 = cpu_s(etcd.pid), time.process_time(), time.monotonic()
            for _ in range(n):
                post(path, body)
            s1, c1, w1 = cpu_s(etcd.pid), time.process_time(), time.monotonic()
            print(f"{kind:8} {1000 * (s1 - s0) / n:12.3f} {1000 * (c1 - c0) / n:14.3f} "
                  f"{1000 * (w1 - w0) / n:8.3f}")
    finally:
        etcd.send_signal(signal.SIGTERM)
        try:
            etcd.wait(10)
        except subprocess.TimeoutExpired:
            etcd.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
