#!/usr/bin/python3
"""The peer of `headroom agent` in bench/agent_overhead.py: what a user would otherwise write —
a Python poll-and-serve loop with the standard library doing the same job.

Every interval it reads each GPU through NVML (ctypes; power, energy, power limit, SM clock,
utilisation — the fields the agent reads), decides a generation concurrency with a PI loop on
log2(concurrency) against the budget, appends a trace row per GPU (flushed every second), and
serves the decision as JSON on GET /v1/actuation (ThreadingHTTPServer). GET /stats gives its
decision latency (read + decide + publish), nearest-rank quantiles over the last 4096.

Usage: agent_peer.py --nvml-library LIB --budget-w W --listen 127.0.0.1:0 --trace-out FILE
Prints "listening on HOST:PORT" on stderr once serving. Stops on SIGTERM.
"""

import argparse
import ctypes
import json
import math
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nvml-library", default="libnvidia-ml.so.1")
    p.add_argument("--budget-w", type=float, required=True)
    p.add_argument("--interval-s", type=float, default=0.5)
    p.add_argument("--listen", default="127.0.0.1:9401")
    p.add_argument("--trace-out", required=True)
    args = p.parse_args()

    nvml = ctypes.CDLL(args.nvml_library)
    if nvml.nvmlInit_v2() != 0:
        sys.exit("nvmlInit failed")
    count = ctypes.c_uint()
    nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
    handles = []
    for i in range(count.value):
        h = ctypes.c_void_p()
        nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
        handles.append(h)

    lock = threading.Lock()
    decision = {"concurrency": 1, "group_size": 8, "seq": 0, "valid_for_s": 5.0,
                "reason": "starting"}
    latencies = []
    stopping = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # as the agent does (TCP_NODELAY)

        def log_message(self, *a):
            pass

        def _send(self, obj):
            body = (json.dumps(obj) + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path.startswith("/v1/actuation"):
                with lock:
                    self._send(dict(decision))
            elif self.path == "/stats":
                with lock:
                    v = sorted(latencies)
                q = lambda x: v[max(1, math.ceil(x * len(v))) - 1] if v else 0.0  # noqa: E731
                self._send({"p50": q(0.5), "p99": q(0.99), "max": v[-1] if v else 0.0,
                            "samples": len(v)})
            else:
                self.send_error(404)

    class Server(ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            pass  # a client that hangs up (wrk at its end) is not news

    host, port = args.listen.rsplit(":", 1)
    server = Server((host, int(port)), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("listening on %s:%d" % server.server_address, file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, lambda *a: stopping.set())

    trace = open(args.trace_out, "w")
    trace.write("t_s,gpu,power_w,energy_j,sm_clock_mhz,util_pct,concurrency\n")
    last_flush = 0.0
    integral = 0.0
    log2c = 0.0
    start = time.monotonic()
    k = 0
    while not stopping.is_set():
        t_s = k * args.interval_s
        delay = start + t_s - time.monotonic()
        if delay > 0 and stopping.wait(delay):
            break
        began = time.perf_counter()
        rows = []
        total = 0.0
        for g, h in enumerate(handles):
            mw, mj, lim = ctypes.c_uint(), ctypes.c_ulonglong(), ctypes.c_uint()
            clk, util = ctypes.c_uint(), Utilization()
            nvml.nvmlDeviceGetPowerUsage(h, ctypes.byref(mw))
            nvml.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(mj))
            nvml.nvmlDeviceGetEnforcedPowerLimit(h, ctypes.byref(lim))
            nvml.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(clk))  # NVML_CLOCK_SM
            nvml.nvmlDeviceGetUtilizationRates(h, ctypes.byref(util))
            total += mw.value / 1000.0
            rows.append((g, mw.value / 1000.0, mj.value / 1000.0, clk.value, util.gpu))
        job_w = total / len(handles)
        error = (args.budget_w - job_w) / args.budget_w
        integral = max(-2.0, min(2.0, integral + error * args.interval_s))
        log2c = max(0.0, min(9.0, log2c + 2.0 * error + 0.2 * integral))
        c = int(round(2 ** log2c))
        with lock:
            if c != decision["concurrency"]:
                decision.update(concurrency=c, seq=decision["seq"] + 1, reason="pi")
            latencies.append(time.perf_counter() - began)
            del latencies[:-4096]
        for g, w, e, clk, u in rows:
            trace.write("%.3f,%d,%.2f,%.3f,%d,%d,%d\n" % (t_s, g, w, e, clk, u, c))
        if t_s - last_flush >= 1.0:
            trace.flush()
            last_flush = t_s
        k += 1
    trace.close()
    server.shutdown()
    nvml.nvmlShutdown()


if __name__ == "__main__":
    main()
