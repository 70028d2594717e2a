#!/usr/bin/python3
"""What operators and hostile inputs do to the headroom CLI (issue 12), against the real binary.

    /usr/bin/python3 tests/hostile/cli_hostile_test.py BINARY SOURCE_DIR [unittest options]

Python 3 standard library only. Every test has its own temporary directory; nothing sleeps to
synchronise: a test waits on a condition (a file appearing, a process ending) with a deadline.

- Every numeric option of every subcommand, found in its --help by its type (FLOAT, INT, UINT),
  refuses nan, inf, -inf, 1e999, 0x10 and '' with exit 2 and exactly one stderr line
  'headroom: error: ...' that names the option.
- An output that is also an input is refused, and the input is left as it was.
- Outputs through symlinks: the link stays a link, its target gets the content.
- SIGTERM during a long twin run (or synth) leaves no temporary file, and the status still says
  "killed by SIGTERM"; the projected size was announced before the run.
- Units where the docs require them (--windows 0.5), fleet COPIES (':-1', ':1000000000'), a
  missing fleet trace, a NUL byte in a gpu cell, 1e308 W, an output larger than the disk.

HOSTILE_TIMEOUT_S (default 30) bounds each command: a command that ran longer was accepting
what it should refuse (on the code before issue 12, 'twin run --duration-s nan' never ended).
"""

import concurrent.futures
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

if len(sys.argv) < 3:
    sys.exit(__doc__)
BINARY = os.path.abspath(sys.argv[1])
SOURCE = os.path.abspath(sys.argv[2])
del sys.argv[1:3]
TIMEOUT_S = float(os.environ.get("HOSTILE_TIMEOUT_S", "30"))
BAD_NUMBERS = ["nan", "inf", "-inf", "1e999", "0x10", ""]
TRACE = "t_s,gpu,power_w\n0,0,100\n0.5,0,200\n1,0,300\n1.5,0,250\n2,0,150\n"


def dynamics_trace():
    """A trace `twin calibrate --fit-dynamics` can fit: concurrency steps every 30 s, a
    first-order lag towards each level, AR(1) noise (as tests/twin/calibrate_test.cc)."""
    import math
    import random
    rng = random.Random(2)
    level = {8: 300.0, 16: 380.0, 64: 500.0}
    schedule = [8, 64, 16, 64, 8, 16, 8, 64, 16, 8]
    lagged, noise, rows = 300.0, 0.0, ["t_s,gpu,power_w,concurrency"]
    for seg in range(20):
        c = schedule[seg % 10]
        for _ in range(300):
            tau = 0.8 if level[c] > lagged else 0.3
            lagged += (level[c] - lagged) * (1.0 - math.exp(-0.1 / tau))
            noise = 0.9 * noise + 4.0 * math.sqrt(1 - 0.81) * rng.gauss(0.0, 1.0)
            rows.append(f"{len(rows) - 1:d}e-1,0,{lagged + noise:.2f},{c}")
    return "\n".join(rows) + "\n"


class Outcome:
    def __init__(self, returncode, out, err, timed_out):
        self.returncode, self.out, self.err, self.timed_out = returncode, out, err, timed_out

    def __repr__(self):
        return (f"exit {self.returncode}{' (timed out)' if self.timed_out else ''}, "
                f"stderr {self.err[:400]!r}")


def headroom(args, cwd, timeout=TIMEOUT_S):
    """Runs the binary; a run past `timeout` is killed and reported as timed out."""
    try:
        p = subprocess.run([BINARY] + list(args), cwd=cwd, capture_output=True, text=True,
                           errors="replace", timeout=timeout, stdin=subprocess.DEVNULL)
        return Outcome(p.returncode, p.stdout, p.stderr, False)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        return Outcome(None, "", err or "", True)


def wait_for(condition, deadline_s, what):
    """Polls `condition` until it holds; fails after `deadline_s`."""
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(0.005)  # polling interval, not synchronisation


class HostileTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="headroom_hostile_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, text, mode="w"):
        with open(self.path(name), mode) as f:
            f.write(text)
        return self.path(name)

    def read(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()

    def assert_one_line_error(self, r, status, *needles):
        self.assertFalse(r.timed_out, f"ran past {TIMEOUT_S} s: {r}")
        self.assertEqual(r.returncode, status, r)
        lines = r.err.splitlines()
        self.assertEqual(len(lines), 1, f"expected one stderr line: {r}")
        self.assertTrue(lines[0].startswith("headroom: error:"), r)
        for needle in needles:
            self.assertIn(needle, lines[0], r)

    def temporaries(self):
        return [p for p in glob.glob(os.path.join(self.dir, "**", "*"), recursive=True)
                if ".tmp." in os.path.basename(p)]


# ---- every numeric option -------------------------------------------------------------------

# A valid command per subcommand, as {flag: value}; an option under test replaces its own entry.
def base_commands(d):
    trace = os.path.join(d, "t.csv")
    out = os.path.join(d, "out")
    return {
        ("analyze",): [trace],
        ("fleet",): [trace, "--nameplate-w", "400", "--windows", "1s", "--risk-window", "1s"],
        ("synth",): ["--duration-s", "1", "--out", out + ".csv"],
        ("twin", "run"): ["--scenario", "a100-7b-tp1", "--steps", "1", "--out", out + ".csv"],
        ("twin", "authority"): ["--scenario", "a100-7b-tp1", "--steps", "1", "--seeds", "1"],
        ("twin", "calibrate"): ["--trace", trace, "--fit-dynamics", "--out", out + ".toml"],
        ("train",): ["--scenario", "a100-7b-tp1", "--timesteps", "10", "--out", out + ".json"],
        ("eval",): ["--scenario", "a100-7b-tp1", "--seeds", "1", "--steps", "1"],
        ("agent",): ["--source", "twin", "--speed", "0", "--duration-s", "1", "--listen",
                     "127.0.0.1:0"],
        ("pilot", "plan"): ["--baseline", trace, "--effect", "10%"],
        ("pilot", "report"): ["--blocks", os.path.join(d, "blocks.csv"), "--traces", trace],
        ("fleet-sim",): ["--site-budget-w", "3840", "--speed", "0", "--duration-s", "1"],
        # Options are checked before etcd is reached (it is not here: exit 1 if they pass).
        ("coordinator",): ["--etcd", "http://127.0.0.1:1", "--site", "s", "--site-budget-w",
                           "1000", "--listen", "127.0.0.1:0"],
    }


HELP_OPTION = re.compile(r"^\s+(?:-\w,)?(--[\w-]+) (FLOAT|INT|UINT)\b")


def numeric_options(command, cwd):
    """{flag: number of values} of every option --help shows as FLOAT, INT or UINT."""
    r = headroom(list(command) + ["--help"], cwd)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(command)} --help: {r}")
    options = {}
    for line in r.out.splitlines():
        m = HELP_OPTION.match(line)
        if m:
            # The type runs to the description (two blanks): "INT:[1, 1048576] x 2".
            kind = re.split(r"\s{2,}", line[m.start(2):])[0]
            values = re.match(r"[^ ]*(?: [^ ]*\])? x (\d+)\b", kind)
            options[m.group(1)] = int(values.group(1)) if values else 1
    return options


def without(args, flag):
    """`args` without `flag` and the value after it (flags in the base take one value)."""
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == flag:
            skip = i + 1 < len(args) and not args[i + 1].startswith("--")
            continue
        out.append(a)
    return out


class NumericOptions(HostileTest):
    def test_every_numeric_option_refuses_non_numbers_in_one_line(self):
        self.write("t.csv", TRACE)
        bases = base_commands(self.dir)
        cases = []
        for command, base in bases.items():
            options = numeric_options(command, self.dir)
            self.assertTrue(options, f"no numeric option found in {' '.join(command)} --help")
            for flag, count in options.items():
                for bad in BAD_NUMBERS:
                    cases.append((command, flag, bad,
                                  list(command) + without(base, flag) + [flag] + [bad] * count))
        # 9 subcommands x ~6 options x 6 values: a few seconds, on two workers per core.
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            outcomes = list(pool.map(lambda c: headroom(c[3], self.dir), cases))
        checked = set()
        for (command, flag, bad, args), r in zip(cases, outcomes):
            with self.subTest(command=" ".join(command), option=flag, value=bad):
                self.assert_one_line_error(r, 2, flag)
            checked.add((command, flag))
        # The sweep found what the docs promise: every command's numeric options.
        for must in [(("twin", "run"), "--power-limit-w"), (("twin", "run"), "--duration-s"),
                     (("agent",), "--interval-s"), (("agent",), "--valid-for-s"),
                     (("fleet",), "--budget-w"), (("analyze",), "--budget-w"),
                     (("eval",), "--budget-w"), (("train",), "--seed"),
                     (("synth",), "--duration-s"), (("fleet",), "--nameplate-w"),
                     (("agent",), "--concurrency-range")]:
            self.assertIn(must, checked)

    def test_finite_but_absurd_values_are_out_of_range(self):
        self.write("t.csv", TRACE)
        t = self.path("t.csv")
        for args, flag in [
            (["fleet", t, "--nameplate-w", "400", "--windows", "1s", "--risk-window", "1s",
              "--budget-w", "1e308"], "--budget-w"),
            (["analyze", t, "--budget-w", "1e308"], "--budget-w"),
            (["analyze", t, "--nameplate-w", "1e308"], "--nameplate-w"),
            (["twin", "run", "--scenario", "a100-7b-tp1", "--steps", "1", "--power-limit-w",
              "1e308", "--out", self.path("o.csv")], "--power-limit-w"),
            (["eval", "--scenario", "a100-7b-tp1", "--budget-w", "1e308"], "--budget-w"),
            (["train", "--scenario", "a100-7b-tp1", "--timesteps", "10", "--seed",
              "99999999999999999999", "--out", self.path("p.json")], "--seed"),
        ]:
            with self.subTest(args=" ".join(args[:2]), option=flag):
                self.assert_one_line_error(headroom(args, self.dir), 2, flag, "out of range")

    def test_the_known_runaways_are_refused_at_once(self):
        # Before: twin run and synth never ended (and filled the disk), agent busy-looped,
        # twin run wrote 0 W rows, analyze and fleet reported 0 % over budget.
        t = self.write("t.csv", TRACE)
        out = self.path("o.csv")
        agent = ["agent", "--source", "twin", "--speed", "0", "--listen", "127.0.0.1:0"]
        for args, flag in [
            (["twin", "run", "--scenario", "a100-7b-tp1", "--duration-s", "nan", "--out", out],
             "--duration-s"),
            (["synth", "--duration-s", "nan", "--out", out], "--duration-s"),
            (agent + ["--interval-s", "nan", "--duration-s", "1"], "--interval-s"),
            (agent + ["--valid-for-s", "nan", "--duration-s", "1"], "--valid-for-s"),
            (["twin", "run", "--scenario", "a100-7b-tp1", "--steps", "1", "--power-limit-w",
              "nan", "--out", out], "--power-limit-w"),
            (["analyze", t, "--budget-w", "nan"], "--budget-w"),
            (["fleet", t, "--nameplate-w", "400", "--windows", "1s", "--risk-window", "1s",
              "--budget-w", "nan"], "--budget-w"),
        ]:
            with self.subTest(args=" ".join(args[:2]), option=flag):
                self.assert_one_line_error(headroom(args, self.dir, timeout=min(TIMEOUT_S, 10)),
                                           2, flag, "'nan' is not a number")
                self.assertFalse(os.path.exists(out))
                self.assertEqual(self.temporaries(), [])

    def test_durations_need_their_unit(self):
        t = self.write("t.csv", TRACE)
        self.assert_one_line_error(headroom(["analyze", t, "--windows", "0.5"], self.dir), 2,
                                   "--windows", "unit")
        self.assert_one_line_error(
            headroom(["fleet", t, "--nameplate-w", "400", "--risk-window", "30"], self.dir), 2,
            "--risk-window", "unit")
        self.assertEqual(headroom(["analyze", t, "--windows", "0.5s,1s"], self.dir).returncode,
                         0)


# ---- fleet COPIES and files -----------------------------------------------------------------

class Fleet(HostileTest):
    def test_copies_are_a_bounded_count_not_a_file_name(self):
        t = self.write("a.csv", TRACE)
        self.assert_one_line_error(headroom(["fleet", t + ":-1", "--nameplate-w", "400"],
                                            self.dir), 2, "COPIES")
        self.assert_one_line_error(
            headroom(["fleet", t + ":1000000000", "--nameplate-w", "400"], self.dir,
                     timeout=min(TIMEOUT_S, 10)), 2, "COPIES", "1000000000")

    def test_a_missing_trace_says_it_cannot_be_opened(self):
        self.assert_one_line_error(headroom(["fleet", self.path("nope.csv")], self.dir), 1,
                                   "nope.csv: cannot open")


# ---- trace bytes and values -----------------------------------------------------------------

class TraceValues(HostileTest):
    def test_a_nul_byte_in_a_gpu_cell_is_an_error_naming_the_spot(self):
        t = self.write("nul.csv", b"t_s,gpu,power_w\n0,0\x00,100\n1,0,100\n", mode="wb")
        self.assert_one_line_error(headroom(["analyze", t], self.dir), 1,
                                   "nul.csv:2:2", "control byte 0x00")

    def test_1e308_watts_is_not_a_reading(self):
        t = self.write("big.csv", "t_s,gpu,power_w\n0,0,100\n1,0,1e308\n")
        self.assert_one_line_error(headroom(["analyze", t], self.dir), 1,
                                   "big.csv:3:3", "power_w", "10000 W")


# ---- budgets that move ----------------------------------------------------------------------

class BudgetSchedules(HostileTest):
    def test_a_bad_schedule_is_one_line_naming_file_line_and_field(self):
        t = self.write("t.csv", TRACE)
        bad = self.write("b.csv", "t_s,budget_w\n0,300\n10,-1\n")
        self.assert_one_line_error(headroom(["analyze", t, "--budget-schedule", bad], self.dir),
                                   1, "b.csv:3", "field 'budget_w'")
        order = self.write("o.csv", "t_s,budget_w\n5,300\n5,200\n")
        self.assert_one_line_error(headroom(["analyze", t, "--budget-schedule", order],
                                            self.dir), 1, "o.csv:3", "field 't_s'")
        self.assert_one_line_error(
            headroom(["analyze", t, "--budget-schedule", self.path("nope.csv")], self.dir), 1,
            "the budget schedule", "nope.csv: cannot open")
        good = self.write("g.csv", "t_s,budget_w\n0,300\n")
        self.assert_one_line_error(
            headroom(["analyze", t, "--budget-schedule", good, "--budget-w", "300"], self.dir),
            2, "--budget-w and --budget-schedule")

    def test_checkpoint_selection_needs_one_scenario_at_its_own_budgets(self):
        base = ["train", "--timesteps", "10", "--select-checkpoints", "2",
                "--out", self.path("p.json")]
        self.assert_one_line_error(
            headroom(base + ["--scenario", "a100-7b-tp1,h100-8b-tp1"],
                     self.dir), 2, "--select-checkpoints", "one --scenario")
        self.assert_one_line_error(
            headroom(base + ["--scenario", "a100-7b-tp1", "--budget-w", "300"], self.dir), 2,
            "--select-checkpoints", "--budget-w")
        self.assert_one_line_error(
            headroom(base + ["--scenario", "a100-7b-tp1", "--cost-window-s", "7"], self.dir), 2,
            "--select-checkpoints", "--cost-window-s")
        self.assertFalse(os.path.exists(self.path("p.json")))

    def test_eval_generators_and_references_are_checked_before_anything_runs(self):
        base = ["eval", "--scenario", "a100-7b-tp1", "--seeds", "1", "--steps", "1"]
        self.assert_one_line_error(headroom(base + ["--budget-schedule", "steps:400:300:60"],
                                            self.dir), 2, "HIGH_W")
        self.assert_one_line_error(headroom(base + ["--budget-schedule", "steps:nan:400:60"],
                                            self.dir), 2, "LOW_W")
        self.assert_one_line_error(headroom(base + ["--controllers", "static-oracle"], self.dir),
                                   2, "static-oracle", "--budget-schedule")
        self.assert_one_line_error(
            headroom(base + ["--budget-schedule", "steps:100:400:10", "--controllers", "ppo",
                             "--policy", os.path.join(SOURCE, "policies", "a100-7b-tp1.json")],
                     self.dir), 2, "budget range", "where the policy was trained")


# ---- outputs --------------------------------------------------------------------------------

class Outputs(HostileTest):
    def test_an_output_that_is_an_input_is_refused(self):
        t = self.write("t.csv", TRACE)
        scenario = self.path("s.toml")
        shutil.copy(os.path.join(SOURCE, "scenarios", "a100-7b-tp1.toml"), scenario)
        policy = self.path("p.json")
        shutil.copy(os.path.join(SOURCE, "policies", "a100-7b-tp1.json"), policy)
        before = {}
        for p in (t, scenario, policy):
            with open(p, "rb") as f:
                before[p] = f.read()
        os.symlink("t.csv", self.path("t-link.csv"))
        for args in [
            ["analyze", t, "--report", t],
            ["analyze", t, "--report", self.path("t-link.csv")],
            ["fleet", t, "--nameplate-w", "400", "--report", t],
            ["twin", "calibrate", "--trace", t, "--fit-dynamics", "--out", t],
            ["twin", "run", "--scenario", scenario, "--steps", "1", "--out", scenario],
            ["train", "--scenario", scenario, "--timesteps", "10", "--out", scenario],
            ["eval", "--scenario", scenario, "--seeds", "1", "--steps", "1", "--report",
             scenario],
            ["eval", "--scenario", "a100-7b-tp1", "--policy", policy, "--seeds", "1", "--steps",
             "1", "--report", policy],
        ]:
            with self.subTest(args=" ".join(args[:2])):
                self.assert_one_line_error(headroom(args, self.dir), 2,
                                           "refusing to overwrite an input")
        for p, text in before.items():
            with open(p, "rb") as f:
                self.assertEqual(f.read(), text, p)
        self.assertTrue(os.path.islink(self.path("t-link.csv")))

    def test_outputs_through_symlinks_keep_the_link(self):
        t = self.write("t.csv", dynamics_trace())
        os.mkdir(self.path("data"))
        runs = [
            ("run.csv", ["twin", "run", "--scenario", "a100-7b-tp1", "--steps", "1", "--out"]),
            ("synth.csv", ["synth", "--duration-s", "10", "--out"]),
            ("report.html", ["analyze", t, "--report"]),
            ("fleet.html", ["fleet", t, "--nameplate-w", "400", "--windows", "1s",
                            "--risk-window", "1s", "--report"]),
            ("dyn.toml", ["twin", "calibrate", "--trace", t, "--fit-dynamics", "--out"]),
            ("policy.json", ["train", "--scenario", "a100-7b-tp1", "--timesteps", "200",
                             "--envs", "1", "--out"]),
            ("eval.html", ["eval", "--scenario", "a100-7b-tp1", "--controllers",
                           "uncontrolled", "--seeds", "1", "--steps", "1", "--report"]),
        ]
        for i, (name, args) in enumerate(runs):
            with self.subTest(output=name):
                target = os.path.join("data", name)
                if i % 2 == 0:
                    self.write(target, "old content\n")  # an existing target is replaced
                os.symlink(target, self.path(name))  # else a dangling link, created through
                r = headroom(args + [self.path(name)], self.dir)
                self.assertEqual(r.returncode, 0, r)
                self.assertTrue(os.path.islink(self.path(name)), name)
                self.assertEqual(os.readlink(self.path(name)), target)
                content = self.read(target)
                self.assertGreater(len(content), 20)
                self.assertNotEqual(content, b"old content\n")
        self.assertEqual(self.temporaries(), [])

    def check_sigterm_leaves_no_temporary(self, args, out):
        p = subprocess.Popen([BINARY] + args + ["--out", out], cwd=self.dir,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: self.temporaries() or p.poll() is not None, 60,
                     "the temporary file")
            self.assertIsNone(p.poll(), "the run ended before it could be signalled")
            self.assertTrue(self.temporaries())
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, -signal.SIGTERM, "killed by SIGTERM, not an exit")
        self.assertEqual(self.temporaries(), [], "a temporary file survived SIGTERM")
        self.assertFalse(os.path.exists(out))
        return err

    def test_sigterm_during_a_long_twin_run_leaves_no_temporary_file(self):
        err = self.check_sigterm_leaves_no_temporary(
            ["twin", "run", "--scenario", "a100-7b-tp1", "--duration-s", "3000000"],
            self.path("long.csv"))
        self.assertRegex(err, r"twin run: about \d[\d.]* [kMGT]?B to write to ")

    def test_sigterm_during_synth_leaves_no_temporary_file(self):
        err = self.check_sigterm_leaves_no_temporary(
            ["synth", "--gpus", "64", "--duration-s", "100000"], self.path("synth.csv"))
        self.assertRegex(err, r"synth: about \d[\d.]* [kMGT]?B to write to ")

    def test_an_output_larger_than_the_disk_is_refused_before_writing(self):
        out = self.path("huge.csv")
        r = headroom(["synth", "--gpus", "4096", "--duration-s", "10000000", "--interval-s",
                      "0.001", "--out", out], self.dir, timeout=min(TIMEOUT_S, 10))
        self.assert_one_line_error(r, 1, "synth: about", "PB to write to", "free")
        self.assertEqual(os.listdir(self.dir), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
