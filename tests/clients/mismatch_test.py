#!/usr/bin/python3
"""End to end, a trainer that ignores the agent's group size (issue 52): a real `headroom agent`
(the twin following the trainer, the shipped 7B policy, no --group-size-choices) and a trainer
process whose GRPO group size is fixed at 12 while the agent announces its scenario's 8.

Checks, against the agent's own answers (its /v1/status, /metrics, log and decisions):
  - the mismatch is flagged by the end of the trainer's second step boundary (step 1), with a
    WARN line naming both numbers, /v1/status trainer.mismatch and the metric;
  - from then on every decision's group size is the trainer's 12 (pinned): decisions stop
    changing G;
  - a trainer that is then silent past --report-timeout-s is taken as gone (trainer.state
    "silent", the safe actuation), and comes back with its next report.
Usage: mismatch_test.py HEADROOM_BINARY REPO_ROOT. Exit 0 on success.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

headroom, root = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(root, "clients", "python"))
from headroom_client import AgentClient  # noqa: E402

TRAINER_G = 12  # not a size the policy picks (it moves G by x2 steps from 8)
decided = []
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def get(url, path):
    with urllib.request.urlopen(url + path, timeout=5) as r:
        body = r.read().decode()
    return json.loads(body) if path != "/metrics" else body


def main():
    agent = subprocess.Popen(
        [headroom, "agent", "--source", "twin", "--scenario", "a100-7b-tp1", "--controller",
         "ppo", "--policy", os.path.join(root, "policies", "a100-7b-tp1.json"),
         "--twin-follows-trainer", "--listen", "127.0.0.1:0", "--report-timeout-s", "2"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines = []
    listening = threading.Event()
    url = [None]

    def read_log():  # the agent's log, kept whole; the port from its listening line
        for line in agent.stderr:
            lines.append(line)
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            if m:
                url[0] = "http://127.0.0.1:" + m.group(1)
                listening.set()
        listening.set()

    reader = threading.Thread(target=read_log, daemon=True)
    reader.start()
    try:
        if not listening.wait(60) or url[0] is None:
            raise SystemExit("agent did not start: " + "".join(lines))
        run(url[0], lines)
    finally:
        agent.terminate()
        agent.wait(timeout=30)
        reader.join(timeout=10)
    warn = [l for l in lines if "trainer mismatch" in l]
    check(len(warn) == 1, "one mismatch line in the agent's log: %r" % warn)
    check(warn and decided and " WARN " in warn[0] and "group size is 12" in warn[0]
          and "decision is %d" % decided[0] in warn[0],
          "the line is WARN with both numbers: %r" % warn)
    check(any("taken as gone" in l and " WARN " in l for l in lines),
          "the silent trainer is said in the log")
    if failures:
        print("%d failed" % len(failures))
        return 1
    print("mismatch_test: ok")
    return 0


def run(url, lines):
    client = AgentClient(url, safe_concurrency=1, safe_group_size=TRAINER_G)
    first = client.actuation()
    check(first["group_size"] == 8, "the agent announces its scenario's 8: %r" % first)
    flagged_at = None
    after = []  # decisions' group sizes once flagged
    tokens = 0
    for step in range(6):
        if hasattr(client, "actuation_for_step"):
            client.actuation_for_step(step)  # the step's decision, as a rank reads it
        # The trainer's group size is its own: it never applies the decision's.
        for phase in ("rollout", "logprob", "train"):
            client.report(step, phase, tokens, 8 if phase == "rollout" else 0,
                          group_size=TRAINER_G)
            tokens += 100
            st = get(url, "/v1/status")
            if flagged_at is None and st["trainer"]["mismatch"]["group_size"]:
                flagged_at = step
            if flagged_at is not None:
                # Wait for the next decision, then read what it announces.
                a = client.actuation(wait_s=2.0)
                after.append(a["group_size"])
    check(flagged_at is not None and flagged_at <= 1,
          "flagged within 2 step boundaries (at step %r)" % flagged_at)
    check(after and all(g == TRAINER_G for g in after),
          "once flagged, every decision keeps the trainer's 12: %r" % after)
    st = get(url, "/v1/status")
    m = st["trainer"]["mismatch"]
    check(m["group_size_trainer"] == TRAINER_G and m["group_size_decided"] != TRAINER_G
          and m["pinned_group_size"] == TRAINER_G, "status mismatch: %r" % m)
    decided.append(m["group_size_decided"])
    check(st["trainer"]["state"] == "reporting", "reporting: %r" % st["trainer"])
    check(isinstance(st["trainer"]["last_report_unix_s"], float)
          and abs(st["trainer"]["last_report_unix_s"] - time.time()) < 60, "last report time")
    metrics = get(url, "/metrics")
    check('headroom_trainer_mismatch{kind="group_size"} 1' in metrics, "the metric")
    # Silent past --report-timeout-s 2: the safe actuation.
    seq = client.actuation()["seq"]
    deadline = time.monotonic() + 30
    state = None
    while time.monotonic() < deadline:
        a = client.actuation(wait_s=1.0)
        if a["seq"] != seq:
            seq = a["seq"]
        state = get(url, "/v1/status")["trainer"]["state"]
        if state == "silent" and a["reason"].startswith("safe: the trainer has not reported"):
            break
    check(state == "silent", "taken as gone after the timeout: %r" % state)
    check(a["concurrency"] == 1, "the safe concurrency: %r" % a)
    client.report(6, "rollout", tokens, 1, group_size=TRAINER_G)
    check(get(url, "/v1/status")["trainer"]["state"] == "reporting", "back with its report")
    check('headroom_trainer_up 1' in get(url, "/metrics"), "up again")


if __name__ == "__main__":
    sys.exit(main())
