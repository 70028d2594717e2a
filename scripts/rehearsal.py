#!/usr/bin/python3
"""The rehearsal (issue 52, `make rehearsal`): the example GRPO trainer at a 7B job's time scale,
with long-tailed completion lengths and two ranks, beside a real agent in a real site, with a
long site hold in the middle. No GPU: the agent's twin follows the trainer (its phases, steps
and sequences in flight) and draws the 7B scenario's power for them.

What runs, each started here and stopped by PID, pass or fail:
  - etcd (free loopback ports, a temporary directory): the site's store;
  - `headroom agent --source twin --twin-follows-trainer` in the site, the fixed-group 7B
    policy, `--max-hold-s` above the hold;
  - the site's grants, written as its leader would (an admitting grant, then one with the
    hold before a step in the middle of the run);
  - `examples/grpo_torch/train.py --ranks 2 --time-scale S` (continuous batching under the
    agent's cap, sampled EOS), once refused (a collective timeout below the agent's longest
    hold) and once for the run.

What it checks, against records the agent and the trainer keep apart:
  1. phases: every decision the agent took (its /v1/history, read every 20 s) was taken on the
     trainer's phase at that instant (the trainer's --phase-log: each report as sent and
     taken). A decision made while a report was on its way (between its sending and its
     answer) is counted apart; a decision on another phase, or on none while the trainer ran,
     is a failure;
  2. admission: at every engine step of both ranks, running <= the cap in force, and while
     sequences waited, running >= 90 % of the cap (continuous admission);
  3. the hold: both ranks waited it out at the step boundary (the trainer's phase log says
     idle for about the hold), and the run went on to its last step and exited 0;
  4. the refusal: the same trainer with a collective timeout below the agent's --max-hold-s
     did not start, and said so in one line naming both numbers.

Usage: rehearsal.py HEADROOM_BINARY REPO_ROOT [--quick] [--hold-s S] [--steps N]
       [--time-scale S] [--out DIR] [--json]
Prints each check as a line (ok / FAIL); the report (every figure above) goes to OUT/report.json
and, with --json, to stdout after the checks.
Defaults: the full rehearsal (a 40-minute hold, phases of minutes: about 75 minutes).
--quick: a 20 s hold and a small time scale (about 2 minutes; the ctest `rehearsal_quick`).
Exit 0 when every check passes, 1 otherwise, 77 without etcd or torch.
"""

import argparse
import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "site"))
from chaos import b64, free_ports, get, post, wait_until  # noqa: E402  (the chaos test's helpers)

ETCD = "/usr/bin/etcd"
SITE, JOB = "rehearsal", "grpo"
BUDGET_PER_GPU_W = 314.6  # the 7B scenario's (the paper's replay cap)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("headroom")
    p.add_argument("root")
    p.add_argument("--quick", action="store_true",
                   help="a 20 s hold at time scale 0.02 (the ctest)")
    p.add_argument("--hold-s", type=float, help="the site's hold (default 2400; --quick 20)")
    p.add_argument("--steps", type=int, default=4, help="GRPO steps (default 4)")
    p.add_argument("--time-scale", type=float,
                   help="the trainer's --time-scale (default 1: a 7B job's; --quick 0.02)")
    p.add_argument("--out", help="keep the logs and report.json here (default: a temporary dir)")
    p.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    a = p.parse_args(argv)
    if a.hold_s is None:
        a.hold_s = 20.0 if a.quick else 2400.0
    if a.time_scale is None:
        a.time_scale = 0.02 if a.quick else 1.0
    if a.steps < 3:
        p.error("--steps must be >= 3 (a step before the hold, its step, one after)")
    return a


class Run:
    """Every process started, stopped by PID at the end; the checks' inputs."""

    def __init__(self, args, out):
        self.args, self.out = args, out
        self.procs = []
        self.history = {}  # agent t_s -> history point
        self.failures, self.notes = [], []
        self.report = {"hold_s": args.hold_s, "time_scale": args.time_scale,
                       "steps": args.steps}

    def check(self, cond, what):
        print(("ok   " if cond else "FAIL ") + what, flush=True)
        if not cond:
            self.failures.append(what)
        return cond

    def progress(self, what):
        print("rehearsal: %s (%s)" % (what, time.strftime("%H:%M:%S")), file=sys.stderr,
              flush=True)

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    # -- the site

    def start_etcd(self):
        client_port, peer_port = free_ports(2)
        self.etcd = "http://127.0.0.1:%d" % client_port
        peer = "http://127.0.0.1:%d" % peer_port
        self.procs.append(subprocess.Popen(
            [ETCD, "--name", "m0", "--data-dir", os.path.join(self.out, "etcd"),
             "--listen-client-urls", self.etcd, "--advertise-client-urls", self.etcd,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", "m0=" + peer],
            stdout=open(os.path.join(self.out, "etcd.log"), "wb"), stderr=subprocess.STDOUT))

        def healthy():
            try:
                return "header" in post(self.etcd + "/v3/maintenance/status", {}, 0.5)
            except Exception:
                return False
        return wait_until(healthy, 30)

    def member(self):
        try:
            r = post(self.etcd + "/v3/kv/range", {"key": b64("/headroom/%s/members/%s" %
                                                              (SITE, JOB))})
            kvs = r.get("kvs") or []
            if not kvs:
                return None
            v = json.loads(base64.b64decode(kvs[0]["value"]).decode())
            v["_lease"] = int(kvs[0].get("lease", 0))
            return v
        except Exception:
            return None

    def grant(self, seq, lease, **extra):
        g = {"job": JOB, "term": 1, "seq": seq, "lease": lease,
             "job_budget_w": BUDGET_PER_GPU_W, "admitted": True, "reason": "rehearsal"}
        g.update(extra)
        post(self.etcd + "/v3/kv/put", {"key": b64("/headroom/%s/grants/%s" % (SITE, JOB)),
                                        "value": b64(json.dumps(g))})

    # -- the agent

    def start_agent(self):
        root = self.args.root
        self.agent = subprocess.Popen(
            [self.args.headroom, "agent", "--source", "twin", "--twin-follows-trainer",
             "--scenario", "a100-7b-tp1", "--controller", "ppo", "--policy",
             os.path.join(root, "policies", "a100-7b-tp1-fixed-group.json"),
             "--group-size-choices", "8", "--listen", "127.0.0.1:0",
             "--site-etcd", "etcd://" + self.etcd[len("http://"):], "--site", SITE,
             "--job", JOB, "--node-overhead-w", "0",
             "--max-hold-s", "%g" % (self.args.hold_s + 600.0),
             "--trace-out", os.path.join(self.out, "agent.csv")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.procs.append(self.agent)
        self.url = None
        seen = []
        for _ in range(80):
            line = self.agent.stderr.readline()
            if not line:
                break
            seen.append(line)
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            if m:
                self.url = "http://127.0.0.1:" + m.group(1)
                break
        log = open(os.path.join(self.out, "agent.log"), "w")
        log.writelines(seen)

        def drain():
            for line in self.agent.stderr:
                log.write(line)
            log.close()
        threading.Thread(target=drain, daemon=True).start()
        return self.url

    def read_history(self):
        """Keeps every decision /v1/history still holds (the last 5 minutes)."""
        try:
            h = get(self.url + "/v1/history")
        except Exception as e:
            self.notes.append("history unread: %s" % e)
            return
        for p in h.get("points", []):
            self.history[p["t_s"]] = p

    # -- the trainer

    def trainer_command(self, tag, collective_timeout_s, steps):
        a = self.args
        return [sys.executable, os.path.join(a.root, "examples", "grpo_torch", "train.py"),
                "--agent", self.url, "--ranks", "2", "--small", "--steps", str(steps),
                "--time-scale", "%g" % a.time_scale,
                "--cost-scenario", os.path.join(a.root, "scenarios", "a100-7b-tp1.toml"),
                "--safe-group-size", "8", "--max-group-size", "8",
                "--collective-timeout-s", "%g" % collective_timeout_s,
                "--phase-log", os.path.join(self.out, tag + ".phases.jsonl"),
                "--engine-log", os.path.join(self.out, tag + ".engine.jsonl"),
                "--json", os.path.join(self.out, tag + ".run.json"), "--quiet"]


def run(args, out):
    r = Run(args, out)
    try:
        return rehearse(r)
    finally:
        r.stop()
        r.report["failures"] = r.failures
        with open(os.path.join(out, "report.json"), "w") as f:
            json.dump(r.report, f, indent=1)
        if args.json:
            print(json.dumps(r.report, indent=1))


def rehearse(r):
    a = r.args
    r.progress("etcd")
    if not r.start_etcd():
        return r.check(False, "etcd started") and 1
    r.progress("the agent")
    if not r.start_agent():
        return r.check(False, "the agent started") and 1
    m = wait_until(r.member, 30)
    if not r.check(m is not None, "the agent registered in the site"):
        return 1
    lease = m["_lease"]
    r.grant(1, lease)  # admitted, the 7B budget

    # 4. The refusal: a collective timeout below the agent's longest hold.
    max_hold_s = get(r.url + "/v1/status")["max_hold_s"]
    low = max_hold_s / 2.0
    refused = subprocess.run(r.trainer_command("refused", low, 1), capture_output=True,
                             text=True, timeout=600)
    lines = [l for l in refused.stderr.splitlines() if l.strip()]
    r.report["refusal"] = lines
    r.check(refused.returncode != 0 and len(lines) == 1 and "%g" % max_hold_s in lines[0]
            and "%g" % low in lines[0],
            "a trainer whose collective timeout (%g s) is below the agent's longest hold (%g s) "
            "is refused in one line naming both: %r" % (low, max_hold_s, lines))

    # The run.
    r.progress("the trainer: %d steps at time scale %g, a %g s hold" %
               (a.steps, a.time_scale, a.hold_s))
    trainer = subprocess.Popen(r.trainer_command("run", 86400.0, a.steps),
                               stdout=subprocess.DEVNULL,
                               stderr=open(os.path.join(r.out, "trainer.log"), "w"))
    r.procs.append(trainer)
    hold_written = False
    last_history = 0.0
    while trainer.poll() is None:
        now = time.monotonic()
        if now - last_history >= 20.0:
            r.read_history()
            last_history = now
        if not hold_written:
            # The hold before the step after the first whole one: the member counts steps by
            # the phases it saw (its timeline's step); the hold is for its next.
            try:
                rep = get(r.url + "/v1/status").get("report") or {}
            except Exception:
                rep = {}
            mem = r.member()
            if (rep.get("step", 0) >= 1 and rep.get("phase") == "rollout" and mem
                    and mem.get("timeline")):
                hold_step = mem["timeline"]["step"] + 1
                r.grant(2, lease, hold_s=a.hold_s, hold_step=hold_step)
                r.report["hold_step"] = hold_step
                r.report["hold_written_at_trainer_step"] = rep["step"]
                hold_written = True
                r.progress("the hold written, before the member's step %d" % hold_step)
        time.sleep(0.5)
    r.read_history()
    r.check(trainer.returncode == 0, "the trainer ran its %d steps and exited 0 (rc %s)" %
            (a.steps, trainer.returncode))
    r.check(hold_written, "the hold was written in the middle of the run")
    check_phases(r)
    check_admission(r)
    check_hold(r)
    return 1 if r.failures else 0


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def check_phases(r):
    """1: every decision on the trainer's phase at its instant."""
    reports = [x for x in read_jsonl(os.path.join(r.out, "run.phases.jsonl")) if x["ok"]]
    reports.sort(key=lambda x: x["sent_unix_s"])
    points = [p for p in sorted(r.history.values(), key=lambda p: p["t_s"])
              if p.get("unix_s")]
    if not r.check(reports and points, "the trainer's phase log (%d reports) and the agent's "
                   "decisions (%d) are there" % (len(reports), len(points))):
        return
    first, last = reports[0]["sent_unix_s"], reports[-1]["acked_unix_s"]
    wrong, in_delivery, counted = [], 0, 0
    j = -1
    for p in points:
        t = p["unix_s"]
        if t < reports[0]["acked_unix_s"] or t > last:
            continue  # before the agent heard the trainer, or after it stopped
        while j + 1 < len(reports) and reports[j + 1]["sent_unix_s"] <= t:
            j += 1
        cur = reports[j]
        prev = reports[j - 1] if j > 0 else None
        counted += 1
        if p.get("phase") == cur["phase"]:
            continue
        if t <= cur["acked_unix_s"] and prev is not None and p.get("phase") == prev["phase"]:
            in_delivery += 1  # the report of the new phase was on its way
            continue
        wrong.append((round(t - first, 1), p.get("phase"), cur["phase"]))
    r.report["decisions_checked"] = counted
    r.report["decisions_in_delivery"] = in_delivery
    r.report["decisions_on_another_phase"] = len(wrong)
    phases_s = {}
    for x, y in zip(reports, reports[1:]):
        phases_s[x["phase"]] = max(phases_s.get(x["phase"], 0.0),
                                   y["sent_unix_s"] - x["sent_unix_s"])
    r.report["longest_report_gap_s"] = round(max(
        (y["sent_unix_s"] - x["sent_unix_s"] for x, y in zip(reports, reports[1:])),
        default=0.0), 2)
    r.check(counted > 0 and not wrong,
            "%d decisions, 0 taken on a phase other than the trainer's (%d while a report was "
            "on its way; first wrong: %r)" % (counted, in_delivery, wrong[:5]))


def check_admission(r):
    """2: running <= cap at every engine step; >= 90 % of it while sequences waited."""
    steps = read_jsonl(os.path.join(r.out, "run.engine.jsonl")) + read_jsonl(
        os.path.join(r.out, "run.engine.jsonl.rank1"))
    over = [s for s in steps if s["running"] > s["cap"]]
    waiting = [s for s in steps if s["waiting"] > 0]
    under = [s for s in waiting if s["running"] < 0.9 * s["cap"]]
    r.report["engine_steps"] = len(steps)
    r.report["engine_steps_over_cap"] = len(over)
    r.report["engine_steps_waiting"] = len(waiting)
    r.report["engine_steps_waiting_under_90pct"] = len(under)
    r.check(steps and not over, "%d engine steps (both ranks), in flight <= the cap at every "
            "one (%d over)" % (len(steps), len(over)))
    r.check(waiting and not under, "while sequences waited (%d steps), occupancy >= 90 %% of "
            "the cap (%d under)" % (len(waiting), len(under)))


def check_hold(r):
    """3: the hold waited out at the step boundary, then the run went on."""
    reports = [x for x in read_jsonl(os.path.join(r.out, "run.phases.jsonl")) if x["ok"]]
    idle_runs, start = [], None
    for x in reports:
        if x["phase"] == "idle" and start is None:
            start = x["sent_unix_s"]
        elif x["phase"] != "idle" and start is not None:
            idle_runs.append(x["sent_unix_s"] - start)
            start = None
    longest = max(idle_runs, default=0.0)
    r.report["longest_idle_s"] = round(longest, 1)
    hold_s = r.args.hold_s
    r.check(hold_s * 0.95 <= longest <= hold_s + 60.0,
            "the trainer held at a step boundary for %.0f s (the hold: %g s)" % (longest, hold_s))
    try:
        run = json.load(open(os.path.join(r.out, "run.run.json")))
        done = len(run.get("steps", []))
    except Exception:
        done = 0
    r.check(done == r.args.steps, "every step ran, after the hold too (%d of %d)" %
            (done, r.args.steps))


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    if not os.access(ETCD, os.X_OK):
        print("rehearsal: skipped: /usr/bin/etcd is not installed (scripts/setup.sh)")
        return 77
    try:
        import torch  # noqa: F401
    except ImportError:
        print("rehearsal: skipped: needs PyTorch (python3-torch)")
        return 77
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        rc = run(args, args.out)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            rc = run(args, tmp)
    print("rehearsal: %s" % ("passed" if rc == 0 else "FAILED"), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
