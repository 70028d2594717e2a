#!/usr/bin/python3
"""End to end against the evaluator: a twin-mode `headroom agent` with the PPO policy, the fake
trainer following it through the Python client, N accelerated simulated minutes; the agent's own
trace read by `headroom analyze` must agree with `headroom eval` for the same scenario and seed.

Usage: agreement_test.py HEADROOM_BINARY REPO_ROOT. Exit 0 on success. Two cases: the 1-GPU
7B job and the 4-GPU 72B job (the paper's generation-only proxy), whose 30 s windows do go over.

Why they can agree: the agent's loop is deterministic in agent time whatever the wall clock
does, the twin plays the trainer of record (phase, step, tokens, group size in force, reported
before every decision), and the agent starts from the trainer's defaults as an evaluation episode
does. What differs is what is recorded: the agent writes the 1 s averaged telemetry it saw, once
per 0.5 s interval; eval scores the true power of every 0.1 s tick. Both are scored on the job's
power (scope sum, budget x GPUs). Hence the tolerances:
  tokens                   |diff| <= 1 token + 0.1 %   (the same trajectory; whole tokens)
  energy_j                 |diff| <= 1 %               (trapezoid of averaged samples vs ticks)
  violation fraction       |diff| <= 2 points at 0.5 s (averaged vs true power near the
                           budget), 1 point at 30 s and 5 min
  duration                 |diff| <= one interval
"""

import json
import os
import re
import subprocess
import sys
import tempfile

headroom, root = sys.argv[1], sys.argv[2]

# (scenario, policy, eval steps, agent speed, the scenario trainer's defaults, GPUs)
CASES = [
    # ~9.6 simulated minutes at 60x; no 30 s window over budget
    ("a100-7b-tp1", "a100-7b-tp1.json", 12, 60, (16, 8), 1),
    # ~35 simulated minutes of the 4-GPU 72B job at 200x; 30 s windows over budget
    ("a100-72b-tp4", "a100-72b-tp4.json", 8, 200, (8, 8), 4),
]
SEED = 1  # eval's first seed

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run_case(scenario, policy, steps, speed, defaults, gpus):
    print("== %s: eval seed %d, %d steps; agent at %dx with the fake trainer" %
          (scenario, SEED, steps, speed))
    policy = os.path.join(root, "policies", policy)
    ev = subprocess.run([headroom, "eval", "--scenario", scenario, "--policy", policy,
                         "--seeds", "1", "--steps", str(steps), "--controllers", "ppo", "--json"],
                        capture_output=True, text=True, check=True)
    ev = json.loads(ev.stdout)
    horizon_s = ev["horizon_s"][0]
    ppo = ev["controllers"][0]
    assert ppo["name"] == "ppo"

    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "agent.csv")
        agent = subprocess.Popen(
            [headroom, "agent", "--source", "twin", "--scenario", scenario, "--seed", str(SEED),
             "--controller", "ppo", "--policy", policy, "--speed", str(speed), "--duration-s",
             str(horizon_s), "--listen", "127.0.0.1:0", "--trace-out", trace,
             "--initial-concurrency", str(defaults[0]), "--initial-group-size", str(defaults[1]),
             # eval moves group size at any decision (the twin applies it at the next step
             # boundary); the agent's step rules (docs/TRAINERS.md) are lifted to agree with it.
             "--group-size-min-steps", "0"],
            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = agent.stderr.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if not m:
            agent.kill()
            sys.exit("agent did not start: " + line + agent.stderr.read())
        url = "http://127.0.0.1:" + m.group(1)
        trainer = subprocess.Popen(
            [sys.executable, os.path.join(root, "examples", "fake_trainer.py"), "--agent", url,
             "--steps", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _, agent_err = agent.communicate(timeout=600)
        t_out, t_err = trainer.communicate(timeout=120)
        check(agent.returncode == 0, "agent ran %.1f simulated s and exited 0" % horizon_s)
        check(trainer.returncode == 0 and "fake trainer:" in t_out,
              "fake trainer followed the agent until it stopped: " + (t_err[-300:] or "ok"))
        m = re.search(r"(\d+) steps, (\d+) concurrency changes", t_out)
        check(m is not None and int(m.group(2)) > 0, "the trainer's gate was resized live")

        # eval scores the job's power (the sum over its GPUs) against budget x GPUs.
        an = subprocess.run([headroom, "analyze", trace, "--scope", "sum", "--budget-w",
                             str(ev["budget_w"] * gpus), "--json"],
                            capture_output=True, text=True)
        check(an.returncode == 0, "headroom analyze reads the agent's trace: " + an.stderr)
        an = json.loads(an.stdout)

    tokens_eval, tokens_agent = ppo["tokens"]["mean"], an["tokens"]
    check(abs(tokens_agent - tokens_eval) <= 1 + 0.001 * tokens_eval,
          "tokens: agent %.0f vs eval %.1f" % (tokens_agent, tokens_eval))
    energy_eval, energy_agent = ppo["energy_j"]["mean"], an["energy_j"]
    check(abs(energy_agent - energy_eval) <= 0.01 * energy_eval,
          "energy: agent %.0f J vs eval %.0f J (%+.3f %%)"
          % (energy_agent, energy_eval, 100 * (energy_agent / energy_eval - 1)))
    windows = {w["label"]: w for w in an["windows"]}
    for label, tolerance in (("0.5s", 0.02), ("30s", 0.01), ("5min", 0.01)):
        a = windows[label]["violation_fraction"]
        e = ppo["violation_fraction"][label]["mean"]
        check(abs(a - e) <= tolerance,
              "violations at %s: agent %.4f vs eval %.4f" % (label, a, e))
    check(abs(an["duration_s"] - horizon_s) <= 0.5,
          "duration: agent %.1f s vs eval %.1f s" % (an["duration_s"], horizon_s))


for case in CASES:
    run_case(*case)
print("agreement_test:", "FAILED" if failures else "ok")
sys.exit(1 if failures else 0)
