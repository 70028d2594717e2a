#!/usr/bin/env python3
"""The GRPO example (examples/grpo_torch/train.py) beside a real `headroom agent` (issue 34).

Usage: grpo_agent_test.py HEADROOM FAKE_NVML SOURCE_DIR

- boundaries, replay and fake NVML: the agent steers the trainer from telemetry it does not
  cause (a replayed trace whose power swings across the budget; the fake NVML library at a
  constant power) with the shipped PPO policy, `--group-size-choices 4,8,16` and
  `--group-size-min-steps 3`. The trainer runs its small preset with --time-scale 0.01 (a
  rollout then lasts about a second, longer than the agent's 0.5 s decisions). From the
  trainer's engine log (every engine step: running, the cap in force), its log of every
  decision it applied, and what the agent says it decided: the cap moves within steps, no
  engine step runs more than the cap, and while requests wait every step runs the whole cap;
  the group size is one per step, the one read at that step's boundary, always one of the
  choices, and it changes at least 3 steps after the previous change; the agent did change it.
- rehearsal: `--source twin --twin-follows-trainer`: the agent's own trace follows the trainer's
  reported phases and steps (its phase column holds only phases the trainer reported, its last
  step is the trainer's last), and the twin's simulated power in the train phase is the
  scenario's training power.

Exit 0 pass, 1 fail, 77 when torch (with Gloo) is not importable. Every agent is started on a
free port (port 0, read from its log) in a temporary directory and stopped by PID.
"""
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

HEADROOM, FAKE_NVML, ROOT = (os.path.abspath(a) for a in sys.argv[1:4])
SCENARIO = "a100-7b-tp1"
POLICY = os.path.join(ROOT, "policies", SCENARIO + ".json")
CHOICES = (4, 8, 16)
MIN_STEPS = 3


def have_torch():
    r = subprocess.run(["/usr/bin/python3", "-c",
                        "import torch.distributed as d; assert d.is_gloo_available()"],
                       capture_output=True)
    return r.returncode == 0


class Agent:
    """A headroom agent on a free port, stopped by PID at exit."""

    def __init__(self, tmp, args, env=None):
        self.log_path = os.path.join(tmp, "agent.log")
        self.log = open(self.log_path, "w")
        self.p = subprocess.Popen([HEADROOM, "agent", "--listen", "127.0.0.1:0", *args],
                                  stdout=self.log, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, **(env or {})))
        self.url = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.p.poll() is None:
            with open(self.log_path) as f:
                m = re.search(r"listening on (?:http://)?127\.0\.0\.1:(\d+)", f.read())
            if m:
                self.url = "http://127.0.0.1:" + m.group(1)
                break
            time.sleep(0.02)
        if self.url is None:
            self.stop()
            with open(self.log_path) as f:
                raise RuntimeError("the agent did not start: " + f.read())

    def status(self):
        with urllib.request.urlopen(self.url + "/v1/status", timeout=5) as r:
            return json.loads(r.read().decode())

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


def train(tmp, url, steps, extra=()):
    """Runs the example to the end; returns its --json record, with its --engine-log lines
    under "engine_log"."""
    out = os.path.join(tmp, "run.json")
    engine_log = os.path.join(tmp, "engine.jsonl")
    r = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "examples", "grpo_torch", "train.py"),
                        "--agent", url, "--steps", str(steps), "--seed", "3", "--json", out,
                        "--engine-log", engine_log, "--max-group-size", "16", "--quiet", *extra],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError("train.py failed: " + r.stderr[-2000:])
    with open(out) as f:
        run = json.load(f)
    with open(engine_log) as f:
        run["engine_log"] = [json.loads(line) for line in f]
    return run


PACED = ["--small", "--time-scale", "0.01"]  # rollouts of about a second
OCCUPANCY = 0.9  # running / cap while requests wait


class Boundaries(unittest.TestCase):
    def check(self, run, status):
        decisions = run["decisions"]
        by_step = {}
        for d in decisions:
            by_step.setdefault(d["step"], []).append(d)
        self.assertEqual(sorted(by_step), list(range(len(by_step))))
        groups = []
        concurrencies_within_a_step = 0
        for step in sorted(by_step):
            recs = by_step[step]
            begin = [d for d in recs if d["phase"] == "step_begin"]
            self.assertEqual(len(begin), 1, f"step {step}: one boundary")
            group = begin[0]["group_size"]
            # One group size per step, the one read at its boundary, among the choices.
            # ... and the step's group throughout (cap changes carry none: group_size null).
            self.assertTrue(all(d["group_size"] in (group, None) for d in recs), f"step {step}")
            self.assertTrue(all(d["phase"] in ("step_begin", "cap") for d in recs))
            self.assertEqual(run["steps"][step]["group_size"], group)
            self.assertIn(group, CHOICES, f"step {step}")
            groups.append(group)
            lines = [x for x in run["engine_log"] if x["step"] == step]
            self.assertTrue(lines, f"step {step}: a rollout")
            for x in lines:
                self.assertLessEqual(x["running"], x["cap"], f"step {step}: {x}")
                if x["waiting"]:
                    self.assertGreaterEqual(x["running"], OCCUPANCY * x["cap"], f"step {step}: {x}")
            if len({x["cap"] for x in lines}) > 1:
                concurrencies_within_a_step += 1
        # Every decision the trainer saw announced a group size among the choices.
        for a in run["decisions_seen"]:
            self.assertIn(a["group_size"], CHOICES)
        changes = [s for s in range(1, len(groups)) if groups[s] != groups[s - 1]]
        for before, after in zip(changes, changes[1:]):
            self.assertGreaterEqual(after - before, MIN_STEPS, f"group changes at {changes}")
        # The run exercised what it checks.
        self.assertGreaterEqual(len(changes), 1, f"groups {groups}")
        self.assertGreaterEqual(concurrencies_within_a_step, 1)
        self.assertGreaterEqual(status["group_size_changes"], len(changes))
        self.assertIn(status["actuation"]["group_size"], CHOICES)

    def agent_args(self):
        return ["--scenario", SCENARIO, "--controller", "ppo", "--policy", POLICY,
                "--budget-w", "300", "--group-size-choices", ",".join(map(str, CHOICES)),
                "--group-size-min-steps", str(MIN_STEPS), "--initial-group-size", "8"]

    def test_beside_an_agent_replaying_a_trace(self):
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "power.csv")
            with open(trace, "w") as f:
                f.write("t_s,gpu,power_w\n")
                for k in range(2400):  # 240 s at 0.1 s: a 20 s swing between 230 and 370 W
                    t = 0.1 * k
                    w = 300 + 70 * (1 if (t // 10) % 2 == 0 else -1)
                    f.write(f"{t:.1f},0,{w}\n")
            agent = Agent(tmp, ["--source", "replay", "--replay", trace, *self.agent_args()])
            try:
                run = train(tmp, agent.url, 40, PACED)
                self.check(run, agent.status())
            finally:
                agent.stop()

    def test_beside_an_agent_on_the_fake_nvml(self):
        with tempfile.TemporaryDirectory() as tmp:
            agent = Agent(tmp, ["--source", "nvml", "--nvml-library", FAKE_NVML,
                                *self.agent_args()],
                          env={"FAKE_NVML_GPUS": "1", "FAKE_NVML_POWER_MW": "250000",
                               "FAKE_NVML_LIMIT_MW": "400000"})
            try:
                run = train(tmp, agent.url, 40, PACED)
                self.check(run, agent.status())
            finally:
                agent.stop()


class Rehearsal(unittest.TestCase):
    def test_the_twin_follows_the_trainers_phases_and_steps(self):
        import tomllib  # noqa: F401 (3.11: the scenario file)
        with open(os.path.join(ROOT, "scenarios", SCENARIO + ".toml"), "rb") as f:
            train_w = tomllib.load(f)["train"]["power_w"]
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "agent.csv")
            agent = Agent(tmp, ["--source", "twin", "--twin-follows-trainer", "--scenario",
                                SCENARIO, "--controller", "ppo", "--policy", POLICY,
                                "--group-size-choices", "8", "--interval-s", "0.1",
                                "--trace-out", trace])
            try:
                # Slow steps (a long training phase), so the agent's 0.1 s decisions see them.
                run = train(tmp, agent.url, 12, ["--epochs", "4"])
                st = agent.status()
            finally:
                agent.stop()
            with open(trace) as f:
                rows = list(csv.DictReader(f))
        reported = {"idle", "rollout", "logprob", "train", "sync", "checkpoint", "stopped"}
        phases = [r["phase"] for r in rows]
        seen = set(phases) - {"startup"}  # before the trainer's first report
        self.assertTrue(seen <= reported, seen)
        self.assertIn("rollout", seen)
        self.assertIn("train", seen)
        steps = [int(r["step"]) for r in rows]
        self.assertEqual(steps, sorted(steps))
        self.assertEqual(max(steps), len(run["steps"]) - 1)
        # Group fixed by its one choice: every step ran 8.
        self.assertTrue(all(s["group_size"] == 8 for s in run["steps"]))
        self.assertEqual(st["group_size_changes"], 0)
        # The twin's power while the trainer trains: the scenario's training power (its lag and
        # noise aside: the mean over the train rows after the first second of each).
        train_power = [float(r["power_w"]) for r in rows if r["phase"] == "train"]
        self.assertGreater(len(train_power), 10)
        mean = sum(train_power) / len(train_power)
        self.assertLess(abs(mean - train_w) / train_w, 0.2, (mean, train_w))


if __name__ == "__main__":
    if not have_torch():
        print("grpo_agent_test: skipped: torch with Gloo is not importable", file=sys.stderr)
        sys.exit(77)
    sys.argv[1:] = sys.argv[4:]
    unittest.main()
