#!/usr/bin/python3
"""End to end, a site's hold (staggering, docs/SITE.md): a grant in etcd asking a job to wait
before a step reaches the trainer through the agent and the Python client, and the site sees
the job held.

Starts its own etcd (free loopback ports, a temporary directory, stopped by PID) and a
`headroom agent --site-etcd` on NVML (the fake library: its phases come from the trainer alone, as
in production); the trainer is a loop on clients/python's AgentClient, as a real one would be:
at each step boundary it reads the actuation and takes a hold (take_hold), reporting "idle"
while it waits. The test writes the grant the leader would write for the agent's lease
(hold_s, hold_step a few steps ahead of the member's, read from its member key) and checks that
  - the agent's actuation carries the hold (GET /v1/actuation: hold_s, hold_id);
  - the trainer waits it once, for the grant's hold_s, and not again for the same hold;
  - the member publishes itself held (its timeline's held_left_s > 0), then goes on stepping.
Usage: hold_test.py HEADROOM_BINARY FAKE_NVML_LIBRARY REPO_ROOT. Exit 0 on success, 77 without
etcd.
"""

import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ETCD = "/usr/bin/etcd"
headroom, fake_nvml, root = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(root, "clients", "python"))
sys.path.insert(0, os.path.join(root, "tests", "site"))
from headroom_client import AgentClient  # noqa: E402
from chaos import b64, free_ports, post, wait_until  # noqa: E402  (the chaos test's helpers)

HOLD_S = 2.0
ROLLOUT_S, REST_S = 0.6, 0.3  # the trainer's phases (its work, not synchronisation)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def main():
    if not os.access(ETCD, os.X_OK):
        print("hold_test: skipped: /usr/bin/etcd is not installed (scripts/setup.sh)")
        return 77
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            return run(tmp, procs)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()


class Trainer(threading.Thread):
    """A GRPO step loop on the Python client: holds taken at the step boundary."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.client = AgentClient(url, safe_concurrency=1, safe_group_size=8)
        self.stop = threading.Event()
        self.holds = []  # (step, seconds)
        self.step = 0
        self.steps_after_hold = 0

    def run(self):
        while not self.stop.is_set():
            a = self.client.actuation()  # at the step boundary
            # Holds until there are none: standby until the first grant, then the site's.
            while (hold := self.client.take_hold(a)) > 0 and not self.stop.is_set():
                self.client.report(self.step, "idle", 0, 0)
                t0 = time.monotonic()
                self.stop.wait(hold)
                if not a.get("standby"):
                    self.holds.append((self.step, hold, time.monotonic() - t0))
                a = self.client.actuation()
            self.client.report(self.step, "rollout", 0, a["concurrency"])
            self.stop.wait(ROLLOUT_S)
            self.client.report(self.step, "train", 0, 0)
            self.stop.wait(REST_S)
            if self.holds:
                self.steps_after_hold += 1
            self.step += 1


def run(tmp, procs):
    client_port, peer_port = free_ports(2)
    etcd_url = f"http://127.0.0.1:{client_port}"
    procs.append(subprocess.Popen(
        [ETCD, "--name", "m0", "--data-dir", f"{tmp}/etcd", "--listen-client-urls", etcd_url,
         "--advertise-client-urls", etcd_url, "--listen-peer-urls",
         f"http://127.0.0.1:{peer_port}", "--initial-advertise-peer-urls",
         f"http://127.0.0.1:{peer_port}", "--initial-cluster",
         f"m0=http://127.0.0.1:{peer_port}"],
        stdout=open(f"{tmp}/etcd.log", "wb"), stderr=subprocess.STDOUT))

    def healthy():
        try:
            return "header" in post(etcd_url + "/v3/maintenance/status", {}, 0.5)
        except Exception:
            return False

    if not wait_until(healthy, 20):
        print("hold_test: etcd did not start")
        return 1
    site, job = "holdsite", "job-hold"
    env = dict(os.environ, FAKE_NVML_GPUS="1", FAKE_NVML_POWER_MW="250000",
               FAKE_NVML_LIMIT_MW="400000")
    agent = subprocess.Popen(
        [headroom, "agent", "--source", "nvml", "--nvml-library", fake_nvml, "--scenario",
         "a100-7b-tp1", "--controller", "pid", "--interval-s", "0.05", "--listen",
         "127.0.0.1:0", "--site-etcd", f"etcd://127.0.0.1:{client_port}", "--site", site, "--job",
         job, "--lease-ttl-s", "3", "--floor-w", "200", "--node-overhead-w", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    procs.append(agent)
    url, seen = None, ""
    for _ in range(40):
        line = agent.stderr.readline()
        seen += line
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            url = "http://127.0.0.1:" + m.group(1)
            break
        if not line:
            break
    if not url:
        print("hold_test: agent did not start: " + seen)
        return 1

    def drain():  # the agent's stderr from here on, so that it never blocks
        with open(f"{tmp}/agent.log", "w") as f:
            for line in agent.stderr:
                f.write(line)

    threading.Thread(target=drain, daemon=True).start()

    def member():
        try:
            r = post(etcd_url + "/v3/kv/range", {"key": b64(f"/headroom/{site}/members/{job}")})
            kvs = r.get("kvs") or []
            if not kvs:
                return None
            v = json.loads(base64.b64decode(kvs[0]["value"]).decode())
            v["_lease"] = int(kvs[0].get("lease", 0))
            return v
        except Exception:
            return None

    trainer = Trainer(url)
    trainer.start()
    # The member's timeline appears once it has seen a rollout and the rest of a step.
    m = wait_until(lambda: (lambda v: v if v and v.get("timeline") else None)(member()), 30)
    check(m is not None, "the agent registered with a step timeline")
    if not m:
        trainer.stop.set()
        return 1

    # The member publishes itself held while it is (its timeline's held_left_s), watched here.
    member_held = threading.Event()
    stop_watch = threading.Event()

    def watch_member():
        while not stop_watch.is_set() and not member_held.is_set():
            v = member()
            if v and v.get("timeline", {}).get("held_left_s", 0) > 0:
                member_held.set()
            time.sleep(0.05)

    threading.Thread(target=watch_member, daemon=True).start()

    # A grant for a step a few ahead of the member's key (published every second, it may lag
    # the trainer by a step): the hold is pending from the start of the step before it, a whole
    # step for the trainer to see it at its boundary. Asked for the very next step it could
    # arrive as that step begins, and rightly not be taken ("if it has not begun"): then again
    # for a later one, up to five times.
    actuation_hold = None
    for seq in range(1, 6):
        m = member()
        step = m["timeline"]["step"]
        grant = {"job": job, "term": 1, "seq": seq, "lease": m["_lease"], "job_budget_w": 300.0,
                 "admitted": True, "reason": "hold test", "hold_s": HOLD_S, "hold_step": step + 3}
        post(etcd_url + "/v3/kv/put",
             {"key": b64(f"/headroom/{site}/grants/{job}"), "value": b64(json.dumps(grant))})

        def actuation_has_hold():
            try:
                with urllib.request.urlopen(url + "/v1/actuation", timeout=1.0) as r:
                    a = json.loads(r.read().decode())
                return a if a.get("hold_s", 0) > 0 else None
            except Exception:
                return None

        actuation_hold = wait_until(actuation_has_hold, 4 * (ROLLOUT_S + REST_S) + 2, 0.02)
        if actuation_hold:
            break
    check(actuation_hold is not None, "GET /v1/actuation carries the hold")
    if actuation_hold:
        check(actuation_hold["hold_s"] == HOLD_S, "hold_s is the grant's: %s" % actuation_hold)
        check(isinstance(actuation_hold.get("hold_id"), int) and actuation_hold["hold_id"] != 0,
              "a hold_id names it")
    # The trainer waits it once, then goes on stepping with the same grant in place.
    wait_until(lambda: trainer.steps_after_hold >= 4, 30)
    trainer.stop.set()
    trainer.join(timeout=10)
    check(len(trainer.holds) == 1, "the trainer held once: %s" % trainer.holds)
    if trainer.holds:
        check(trainer.holds[0][1] == HOLD_S, "for the grant's hold_s: %s" % (trainer.holds,))
    check(trainer.steps_after_hold >= 4, "and went on stepping: %d" % trainer.steps_after_hold)
    check(member_held.wait(10), "the member published itself held (timeline held_left_s > 0)")
    stop_watch.set()
    agent.terminate()
    check(agent.wait(timeout=20) == 0, "the agent stops cleanly")
    if failures:
        print("hold_test: %d failures" % len(failures))
        return 1
    print("hold_test: ok: held %.2f s at step %d" % (trainer.holds[0][2], trainer.holds[0][0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
