#!/usr/bin/python3
"""End to end against the evaluator: a twin-mode `headroom agent` with the PPO policy, the fake
trainer following it through the Python client, N accelerated simulated minutes; the agent's own
trace read by `headroom analyze` must agree with `headroom eval` for the same scenario and seed.

Usage: agreement_test.py HEADROOM_BINARY REPO_ROOT. Exit 0 on success.

Why they can agree: the agent's loop is deterministic in agent time whatever the wall clock
does, the twin plays the trainer of record (phase, step, tokens, group size in force, reported
before every decision), and the agent starts from the trainer's defaults as an evaluation episode
does. What differs is what is recorded: the agent writes the 1 s averaged telemetry it saw, once
per 0.5 s interval; eval scores the true power of every 0.1 s tick. Hence the tolerances:
  tokens                   |diff| <= 1 token + 0.1 %   (the same trajectory; whole tokens)
  energy_j                 |diff| <= 1 %               (trapezoid of averaged samples vs ticks)
  violation fraction       |diff| <= 1 point, at 0.5 s, 30 s and 5 min
  duration                 |diff| <= one interval
"""

import json
import os
import re
import subprocess
import sys
import tempfile

headroom, root = sys.argv[1], sys.argv[2]
SCENARIO = "a100-7b-tp1"
POLICY = os.path.join(root, "policies", "a100-7b-tp1.json")
STEPS = 12          # eval's horizon: 12 uncontrolled steps on seed 1 (~9.6 simulated minutes)
SEED = 1            # eval's first seed
SPEED = 60          # agent seconds per wall second
DEFAULTS = ["--initial-concurrency", "16", "--initial-group-size", "8"]  # the scenario's trainer

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


ev = subprocess.run([headroom, "eval", "--scenario", SCENARIO, "--policy", POLICY, "--seeds", "1",
                     "--steps", str(STEPS), "--controllers", "ppo", "--json"],
                    capture_output=True, text=True, check=True)
ev = json.loads(ev.stdout)
horizon_s = ev["horizon_s"][0]
ppo = ev["controllers"][0]
assert ppo["name"] == "ppo"

with tempfile.TemporaryDirectory() as tmp:
    trace = os.path.join(tmp, "agent.csv")
    agent = subprocess.Popen(
        [headroom, "agent", "--source", "twin", "--scenario", SCENARIO, "--seed", str(SEED),
         "--controller", "ppo", "--policy", POLICY, "--speed", str(SPEED), "--duration-s",
         str(horizon_s), "--listen", "127.0.0.1:0", "--trace-out", trace, *DEFAULTS],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = agent.stderr.readline()
    m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
    if not m:
        agent.kill()
        sys.exit("agent did not start: " + line + agent.stderr.read())
    url = "http://127.0.0.1:" + m.group(1)
    trainer = subprocess.Popen([sys.executable, os.path.join(root, "examples", "fake_trainer.py"),
                                "--agent", url, "--steps", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, agent_err = agent.communicate(timeout=600)
    t_out, t_err = trainer.communicate(timeout=120)
    check(agent.returncode == 0, "agent ran %.1f simulated s and exited 0" % horizon_s)
    check(trainer.returncode == 0 and "fake trainer:" in t_out,
          "fake trainer followed the agent until it stopped: " + (t_err[-300:] or "ok"))
    m = re.search(r"(\d+) steps, (\d+) concurrency changes", t_out)
    check(m is not None and int(m.group(2)) > 0, "the trainer's gate was resized live")

    an = subprocess.run([headroom, "analyze", trace, "--budget-w", str(ev["budget_w"]), "--json"],
                        capture_output=True, text=True)
    check(an.returncode == 0, "headroom analyze reads the agent's trace: " + an.stderr)
    an = json.loads(an.stdout)

tokens_eval, tokens_agent = ppo["tokens"]["mean"], an["tokens"]
check(abs(tokens_agent - tokens_eval) <= 1 + 0.001 * tokens_eval,
      "tokens: agent %.0f vs eval %.1f" % (tokens_agent, tokens_eval))
energy_eval, energy_agent = ppo["energy_j"]["mean"], an["energy_j"]
check(abs(energy_agent - energy_eval) <= 0.01 * energy_eval,
      "energy: agent %.0f J vs eval %.0f J (%+.2f %%)"
      % (energy_agent, energy_eval, 100 * (energy_agent / energy_eval - 1)))
windows = {w["label"]: w for w in an["windows"]}
for label in ("0.5s", "30s", "5min"):
    a = windows[label]["violation_fraction"]
    e = ppo["violation_fraction"][label]["mean"]
    check(abs(a - e) <= 0.01, "violations at %s: agent %.4f vs eval %.4f" % (label, a, e))
check(abs(an["duration_s"] - horizon_s) <= 0.5,
      "duration: agent %.1f s vs eval %.1f s" % (an["duration_s"], horizon_s))

print("agreement_test:", "FAILED" if failures else "ok")
sys.exit(1 if failures else 0)
