#!/usr/bin/python3
"""End to end: a twin-mode `headroom agent`, the Python client and the fake trainer.

Usage: client_test.py HEADROOM_BINARY REPO_ROOT. Exit 0 on success. No sleeps: the agent's port
is read from its log line, and the client's clock is injected to test the fallback.
"""

import os
import re
import signal
import subprocess
import sys
import tempfile

headroom, root = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(root, "clients", "python"))
from headroom_client import AgentClient  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def start_agent(*extra, env=None):
    p = subprocess.Popen([headroom, "agent", "--source", "twin", "--scenario", "a100-7b-tp1",
                          "--controller", "ppo", "--policy",
                          os.path.join(root, "policies", "a100-7b-tp1.json"),
                          "--listen", "127.0.0.1:0", "--valid-for-s", "2", *extra],
                         stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, **(env or {})))
    seen = ""
    for _ in range(20):  # warnings may come first
        line = p.stderr.readline()
        seen += line
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            return p, "http://127.0.0.1:" + m.group(1)
        if not line:
            break
    p.kill()
    raise SystemExit("agent did not start: " + seen + p.stderr.read())


with tempfile.TemporaryDirectory() as tmp:
    trace = os.path.join(tmp, "agent.csv")
    agent, url = start_agent("--speed", "20", "--trace-out", trace, env={"HEADROOM_TOKEN": "t0k"})

    now = [1000.0]
    client = AgentClient(url, token="t0k", safe_concurrency=1, safe_group_size=8,
                         clock=lambda: now[0])
    a = client.actuation()
    check(set(a) >= {"concurrency", "group_size", "seq", "valid_for_s", "reason"}, "keys")
    check(1 <= a["concurrency"] <= 16, "concurrency in range")
    b = client.actuation(wait_s=10)
    check(b["seq"] > a["seq"], "long-poll returns a newer decision")
    check(client.report(1, "rollout", 100, 4), "report accepted with the token")
    check(not AgentClient(url).report(1, "rollout", 100, 4), "report refused without the token")

    r = subprocess.run([sys.executable, os.path.join(root, "examples", "fake_trainer.py"),
                        "--agent", url, "--token", "t0k", "--steps", "2"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, "fake trainer runs: " + r.stderr[-500:])
    check("step 1:" in r.stdout, "fake trainer did two steps")

    # The agent dies: the last decision holds for valid_for_s, then the safe values.
    last = client.actuation()
    agent.kill()
    agent.wait()
    held = client.actuation()
    check(held["seq"] == last["seq"] and held["concurrency"] == last["concurrency"],
          "last decision held while valid")
    now[0] += 2.1
    fb = client.actuation()
    check(fb["concurrency"] == 1 and fb["group_size"] == 8, "safe values after valid_for_s")
    check(fb["reason"].startswith("fallback:"), "fallback reason")

    # SIGTERM: a clean stop, the trace complete and readable by headroom analyze.
    agent, url = start_agent("--speed", "20", "--trace-out", trace)
    c = AgentClient(url)
    c.actuation()  # may be the initial decision, made before any interval ...
    c.actuation(wait_s=5)  # ... this newer one closes an interval, whose row is then written
    agent.send_signal(signal.SIGTERM)
    out, err = agent.communicate(timeout=30)
    check(agent.returncode == 0, "exit 0 on SIGTERM: " + err[-300:])
    check("stopped after" in err, "stop logged")
    r = subprocess.run([headroom, "analyze", trace, "--budget-w", "314.6", "--json"],
                       capture_output=True, text=True)
    check(r.returncode == 0, "the agent's trace is readable: " + r.stderr)

# An answer that is not a decision (null valid_for_s, a string, a missing field) is a fallback,
# never an exception in the trainer.
import http.server
import threading


class Malformed(http.server.BaseHTTPRequestHandler):
    bodies = [b'{"concurrency": 4, "group_size": 8, "seq": 1, "valid_for_s": null, "reason": ""}',
              b'{"concurrency": "4", "group_size": 8, "seq": 1, "valid_for_s": 5, "reason": ""}',
              b'{"group_size": 8, "seq": 1, "valid_for_s": 5}', b'[1, 2]', b'not json']

    serving = 0  # which body

    def do_GET(self):
        body = Malformed.bodies[Malformed.serving]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


stub = http.server.HTTPServer(("127.0.0.1", 0), Malformed)
threading.Thread(target=stub.serve_forever, daemon=True).start()
for i in range(len(Malformed.bodies)):
    Malformed.serving = i
    c = AgentClient("http://127.0.0.1:%d" % stub.server_port, safe_concurrency=2,
                    safe_group_size=4)
    a = c.actuation(wait_s=float("nan"))
    check(a["concurrency"] == 2 and a["reason"].startswith("fallback:"),
          "malformed answer %d is a fallback: %s" % (i, a))
stub.shutdown()


# A site's hold (staggering): taken once per hold_id at the step boundary, never from a
# malformed answer.
class Holding(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(Holding.body)))
        self.end_headers()
        self.wfile.write(Holding.body)

    def log_message(self, *args):
        pass


def decision(hold_s, hold_id):
    return ('{"concurrency": 4, "group_size": 8, "seq": 3, "valid_for_s": 5, "reason": "", '
            '"hold_s": %s, "hold_id": %s}' % (hold_s, hold_id)).encode()


stub = http.server.HTTPServer(("127.0.0.1", 0), Holding)
threading.Thread(target=stub.serve_forever, daemon=True).start()
c = AgentClient("http://127.0.0.1:%d" % stub.server_port)
Holding.body = decision(12.5, 7)
check(c.take_hold() == 12.5, "a hold is taken")
check(c.take_hold() == 0.0, "the same hold only once")
Holding.body = decision(4, 8)
check(c.take_hold() == 4.0, "the next hold is taken")
for bad in [decision("null", 9), decision('"5"', 9), decision(-1, 9), decision(5, "null"),
            decision(5, 0)]:
    Holding.body = bad
    check(c.take_hold() == 0.0, "not a hold: %s" % bad)
Holding.body = decision(0, 0)
check(c.take_hold() == 0.0, "no hold")
# Standby (not admitted): held every time it is asked, until admitted.
Holding.body = decision(0, 0).replace(b'"hold_id": 0', b'"hold_id": 0, "site": true, "standby": true')
check(c.take_hold() == 1.0, "standby: held")
check(c.take_hold() == 1.0, "standby: held again")
check(c.site, "a site's answer says so")
Holding.body = decision(0, 0).replace(b'"hold_id": 0', b'"hold_id": 0, "site": true, "standby": false')
check(c.take_hold() == 0.0, "admitted: no hold")
stub.shutdown()
stub.server_close()
# In a site, an agent unheard past valid_for_s holds the trainer (fail closed); outside one,
# the safe values run.
now = [0.0]
for site, held in [(True, 1.0), (False, 0.0)]:
    c = AgentClient("http://127.0.0.1:%d" % stub.server_port, clock=lambda: now[0], site=site,
                    timeout_s=0.2)
    a = c.actuation()
    check(a["reason"].startswith("fallback"), "unreachable: fallback")
    check(c.take_hold(a) == held, "site=%s: take_hold %s when unreachable" % (site, held))

print("client_test:", "FAILED" if failures else "ok")
sys.exit(1 if failures else 0)
