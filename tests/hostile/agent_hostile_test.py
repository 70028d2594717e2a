#!/usr/bin/env python3
"""The agent against what operators and hostile clients do (issue 12), on the real binary: the
transport's suite (transport_suite.py, the coordinator's too: slow and idle clients, caps,
framing, Host, tokens, --listen, SIGTERM) and the agent's own (its routes, long-polls, the guard
after SIGTERM and SIGKILL, traces, options).

    agent_hostile_test.py HEADROOM FAKE_NVML_LIBRARY SOURCE_DIR

Every test starts its own agent on a free loopback port in a temporary directory and stops it by
PID, pass or fail. Standard library only. Waits are on conditions with deadlines (a line in a
log, a file's content, a socket's state), never sleeps standing in for synchronisation; the
only timed pauses are the load itself (a trickling client sends a byte a second).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile_http import Daemon, raw, wait_for  # noqa: E402
from transport_suite import TransportSuite  # noqa: E402

HEADROOM, FAKE_NVML, ROOT = sys.argv[1], sys.argv[2], sys.argv[3]
del sys.argv[1:4]

PPO_POLICY = os.path.join(ROOT, "policies", "a100-7b-tp1.json")


class Agent(Daemon):
    """`headroom agent ...` on a free port, on the twin unless --source says otherwise."""

    def __init__(self, *args, env=None, expect_start=True):
        argv = [HEADROOM, "agent", *args]
        if "--source" not in args:
            argv += ["--source", "twin"]
        if "--listen" not in args:
            argv += ["--listen", "127.0.0.1:0"]
        super().__init__(argv, r"listening on [^ ]+:(\d+)", env=env, expect_start=expect_start)


def run(*args, env=None, timeout=60):
    return subprocess.run([HEADROOM, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def get(port, path, headers=b"", host=b"127.0.0.1"):
    return raw(port, b"GET " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\n" + headers +
               b"Connection: close\r\n\r\n")


def post(port, body, content_type=b"application/json", headers=b"", path=b"/v1/report"):
    return raw(port, b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: " +
               content_type + b"\r\n" + headers + b"Content-Length: " + str(len(body)).encode() +
               b"\r\nConnection: close\r\n\r\n" + body)


REPORT = b'{"step": 1, "phase": "rollout", "tokens": 10, "in_flight": 4}'


def fake_nvml_env(tmp, power_mw=350000):
    return {"FAKE_NVML_GPUS": "2", "FAKE_NVML_POWER_MW": str(power_mw),
            "FAKE_NVML_LIMIT_MW": "400000",
            "FAKE_NVML_LIMIT_LOG": os.path.join(tmp, "limit.log"),
            "FAKE_NVML_LIMITS_FILE": os.path.join(tmp, "limits.txt")}


def slurp(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


class Serving(unittest.TestCase):
    def test_a_second_agent_on_a_port_in_use_fails_and_touches_nothing(self):
        with tempfile.TemporaryDirectory() as tmp, Agent("--speed", "1") as first:
            trace = os.path.join(tmp, "agent.csv")
            with open(trace, "w") as f:
                f.write("the trace of the run that just failed\n")
            r = run("agent", "--source", "twin", "--listen", "127.0.0.1:%d" % first.port, "--trace-out", trace,
                    "--duration-s", "5")
            self.assertEqual(r.returncode, 1, r.stderr)
            errors = [l for l in r.stderr.splitlines() if l.startswith("headroom: error:")]
            self.assertEqual(len(errors), 1, r.stderr)
            self.assertIn("the port is in use", errors[0])
            self.assertEqual(slurp(trace), "the trace of the run that just failed\n")
            self.assertEqual(sorted(os.listdir(tmp)), ["agent.csv"])  # not rotated either
            # The first one still answers every connection alone.
            for _ in range(20):
                self.assertEqual(get(first.port, b"/v1/status")[0], 200)

    def test_long_polls_wait_within_their_cap_and_answer_on_a_decision(self):
        with Agent("--speed", "1") as agent:
            seq = json.loads(get(agent.port, b"/v1/actuation")[2])["seq"]
            t0 = time.monotonic()
            status, _, body = get(agent.port, b"/v1/actuation?after=%d&timeout_s=20" % seq)
            self.assertEqual(status, 200)
            self.assertGreater(json.loads(body)["seq"], seq)
            self.assertLess(time.monotonic() - t0, 15.0)
            # timeout_s=0 answers at once whatever the sequence.
            status, _, body = get(agent.port, b"/v1/actuation?after=%d&timeout_s=0" % (10 ** 9))
            self.assertEqual(status, 200)


class Requests(unittest.TestCase):
    """Malformed and hostile requests: each answered with the status the docs give."""

    def test_every_bad_request_has_its_status(self):
        with Agent("--speed", "1", env={"HEADROOM_TOKEN": "s3cret"}) as agent:
            p = agent.port
            auth = b"Authorization: Bearer s3cret\r\n"
            cases = [
                # Invalid UTF-8 in a field: 400 naming it (was 500 with the exception text).
                (post(p, b'{"step": 1, "phase": "\xff", "tokens": 1, "in_flight": 0}',
                      headers=auth), 400, "field 'phase': invalid UTF-8"),
                (post(p, b'{"st\xc3\x28ep": 1}', headers=auth), 400, "invalid UTF-8"),
                # Wrong methods: 405 with Allow (was 404).
                (raw(p, b"DELETE /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), 405,
                 "method not allowed"),
                (raw(p, b"GET /v1/report HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), 405, "POST"),
                (raw(p, b"OPTIONS /v1/report HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), 405, "POST"),
                # Only JSON bodies (a web page cannot send one without a preflight).
                (post(p, b"step=1", b"application/x-www-form-urlencoded", auth), 415,
                 "application/json"),
                (post(p, REPORT, b"text/plain", auth), 415, "application/json"),
                # Size caps: a 64 KiB body (form-encoded was capped at 8 KiB, the docs say 64).
                (post(p, b" " * (64 * 1024 + 1), headers=auth), 413, "larger than 65536"),
                (raw(p, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 9000 +
                     b"\r\n\r\n"), 431, "header too large"),
                # Tokens: missing or wrong 401; the scheme in any case.
                (post(p, REPORT), 401, "bearer token"),
                (post(p, REPORT, headers=b"Authorization: Bearer wrong\r\n"), 401, "bearer"),
                (post(p, REPORT, headers=b"Authorization: Basic czNjcmV0\r\n"), 401, "bearer"),
                (post(p, REPORT, headers=b"Authorization: bearer s3cret\r\n"), 200, "ok"),
                (post(p, REPORT, headers=b"Authorization: BEARER s3cret\r\n"), 200, "ok"),
                (post(p, REPORT, b"application/json; charset=utf-8", auth), 200, "ok"),
                # Strict long-poll parameters (after=1e3 was read as 1, timeout_s=0x10 as 16).
                (get(p, b"/v1/actuation?after=1e3"), 400, "after"),
                (get(p, b"/v1/actuation?after=-1"), 400, "after"),
                (get(p, b"/v1/actuation?after=%31"), 400, "after"),
                (get(p, b"/v1/actuation?after=1&timeout_s=0x10"), 400, "timeout_s"),
                (get(p, b"/v1/actuation?after=1&timeout_s=nan"), 400, "timeout_s"),
                (get(p, b"/v1/actuation?after=1&timeout_s=inf"), 400, "timeout_s"),
                (get(p, b"/v1/actuation?after=1&timeout_s=31"), 400, "timeout_s"),
                (get(p, b"/v1/actuation?after=1&after=2"), 400, "repeated"),
                (get(p, b"/v1/actuation?after=1&wait=3"), 400, "unknown parameter"),
                (get(p, b"/v1/actuation?timeout_s=3"), 400, "only with after"),
                (get(p, b"/v1/history?after=soon"), 400, "after"),
                (get(p, b"/v1/history?after=nan"), 400, "after"),
                (get(p, b"/v1/status?x=1"), 400, "unknown parameter"),
                # Paths and hosts.
                (get(p, b"/v1/nothing"), 404, "no such path"),
                (get(p, b"/", host=b"evil.example.com:%d" % p), 403, "DNS rebinding"),
                (get(p, b"/v1/status", host=b"rebind.attacker.test"), 403, "Host"),
                (raw(p, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.test\r\n\r\n"), 400,
                 "Host: repeated"),
                (raw(p, b"GET /\x00 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), 400, "malformed"),
                (raw(p, b"BLAH\r\n\r\n"), 400, "malformed"),
                (raw(p, b"GET http://127.0.0.1/v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
                 400, "absolute path"),
            ]
            for i, ((status, headers, body), want, needle) in enumerate(cases):
                with self.subTest(case=i, want=want):
                    self.assertEqual(status, want, body)
                    self.assertIn(needle, body.decode("utf-8", "replace"))
                    self.assertIn(headers["content-type"], ("application/json",))
                    if want == 405:
                        self.assertIn("allow", headers)
            # Allowed: loopback and IP literals, localhost, HEAD.
            self.assertEqual(get(p, b"/", host=b"localhost:%d" % p)[0], 200)
            self.assertEqual(get(p, b"/v1/status", host=b"[::1]:%d" % p)[0], 200)
            status, headers, body = raw(p, b"HEAD /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                        b"Connection: close\r\n\r\n")
            self.assertEqual((status, body), (200, b""))
            self.assertGreater(int(headers["content-length"]), 0)
            # Still serving, and nothing it got was taken as a report but the good ones.
            s = json.loads(get(p, b"/v1/status")[2])
            self.assertEqual(s["report"]["step"], 1)

    def test_allow_host_and_token_on_reads(self):
        with tempfile.TemporaryDirectory() as tmp:
            token_file = os.path.join(tmp, "token")
            with open(token_file, "w") as f:
                f.write("t0ken-from-a-file\n")
            os.chmod(token_file, 0o600)
            with Agent("--speed", "1", "--token-file", token_file, "--token-on-reads",
                       "--allow-host", "gpu-node-7") as agent:
                p = agent.port
                self.assertEqual(get(p, b"/v1/status")[0], 401)
                self.assertEqual(get(p, b"/metrics")[0], 401)
                self.assertEqual(get(p, b"/v1/actuation")[0], 401)
                auth = b"Authorization: Bearer t0ken-from-a-file\r\n"
                self.assertEqual(get(p, b"/v1/status", auth)[0], 200)
                self.assertEqual(get(p, b"/v1/status", auth, host=b"GPU-NODE-7:10470")[0], 200)
                self.assertEqual(get(p, b"/v1/status", auth, host=b"gpu-node-8")[0], 403)
                # The page holds no data: served without the token (its scripts send it).
                status, headers, body = get(p, b"/")
                self.assertEqual(status, 200)
                self.assertIn(b"#token=", body)
                self.assertNotIn(b"t0ken-from-a-file", body)
                self.assertIn("frame-ancestors 'none'", headers["content-security-policy"])
                self.assertIsNone(agent.find("visible to every user"))

    def test_tokens_come_from_a_file_or_the_environment_and_are_checked(self):
        r = run("agent", "--source", "twin", "--token", "a", "--token-file", "/nonexistent", "--duration-s", "1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("give one", r.stderr)
        r = run("agent", "--source", "twin", "--token-file", "/nonexistent/token", "--duration-s", "1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot open", r.stderr)
        r = run("agent", "--source", "twin", "--token-on-reads", "--duration-s", "1", "--listen", "127.0.0.1:0")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--token-on-reads needs a token", r.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "token")
            with open(bad, "w") as f:
                f.write("two words\n")
            r = run("agent", "--source", "twin", "--token-file", bad, "--duration-s", "1")
            self.assertEqual(r.returncode, 2)
            self.assertIn("visible ASCII only", r.stderr)
        with Agent("--speed", "1", "--token", "on-the-command-line") as agent:
            self.assertIsNotNone(agent.find("visible to every user"))
            self.assertEqual(post(agent.port, REPORT,
                                  headers=b"Authorization: Bearer on-the-command-line\r\n")[0],
                             200)

class AgentTransport(TransportSuite, unittest.TestCase):
    """The transport's suite on the agent."""
    NAME = "agent"
    READ = b"/v1/actuation"
    WRITE, WRITE_BODY, WRITE_OK = b"/v1/report", REPORT, 200
    MAX_BODY = 64 * 1024

    def argv(self, *args):
        argv = [HEADROOM, "agent", "--source", "twin", "--speed", "1", *args]
        return argv if "--listen" in args else argv + ["--listen", "127.0.0.1:0"]

    def daemon(self, *args, env=None):
        return Agent("--speed", "1", *args, env=env)


class Shutdown(unittest.TestCase):
    def guard_args(self, tmp):
        return ["--source", "nvml", "--nvml-library", FAKE_NVML, "--guard-power-limit",
                "--budget-w", "300", "--guard-state", os.path.join(tmp, "guard-state.json")]

    def test_sigterm_restores_limits_first_and_stops_within_a_second_whatever_clients_do(self):
        with tempfile.TemporaryDirectory() as tmp:
            env = fake_nvml_env(tmp)
            log = env["FAKE_NVML_LIMIT_LOG"]
            with Agent("--speed", "1", *self.guard_args(tmp), env=env) as agent:
                wait_for("the guard to cap both GPUs",
                         lambda: slurp(log) == "0 300000\n1 300000\n")
                state = json.loads(slurp(os.path.join(tmp, "guard-state.json")))
                self.assertEqual([l["original_w"] for l in state["limits"]], [400.0, 400.0])
                # A slow client halfway through its header, one halfway through a body, and a
                # parked long-poll, all connected.
                slow = socket.create_connection(("127.0.0.1", agent.port))
                slow.sendall(b"GET /v1/status HTTP/1.1\r\nHo")
                body = socket.create_connection(("127.0.0.1", agent.port))
                body.sendall(b"POST /v1/report HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                             b"application/json\r\nContent-Length: 60000\r\n\r\n{\"step\"")
                poll = socket.create_connection(("127.0.0.1", agent.port))
                seq = json.loads(get(agent.port, b"/v1/actuation")[2])["seq"]
                poll.sendall(b"GET /v1/actuation?after=%d&timeout_s=30 HTTP/1.1\r\n"
                             b"Host: 127.0.0.1\r\n\r\n" % (seq + 10 ** 6))
                wait_for("the long-poll parked", lambda: json.loads(
                    get(agent.port, b"/v1/status")[2])["long_polls_waiting"] == 1)
                t0 = time.monotonic()
                code = agent.stop(signal.SIGTERM)
                elapsed_s = time.monotonic() - t0
                print("SIGTERM to exit with three clients connected: %.3f s" % elapsed_s)
                self.assertEqual(code, 0)
                self.assertLess(elapsed_s, 1.0)
                self.assertEqual(slurp(log), "0 300000\n1 300000\n0 400000\n1 400000\n")
                lines = agent.log()
                restored = [i for i, l in enumerate(lines) if "power limit restored" in l]
                stopped = [i for i, l in enumerate(lines) if "stopped after" in l]
                self.assertEqual(len(restored), 2, lines)
                self.assertLess(max(restored), stopped[0])
                self.assertFalse(os.path.exists(os.path.join(tmp, "guard-state.json")))
                for s in (slow, body, poll):
                    s.close()

    def test_a_repeated_sigterm_still_restores_the_limits(self):
        # GNU timeout signals the child and then its process group: two SIGTERMs at once.
        with tempfile.TemporaryDirectory() as tmp:
            env = fake_nvml_env(tmp)
            log = env["FAKE_NVML_LIMIT_LOG"]
            with Agent("--speed", "1", *self.guard_args(tmp), env=env) as agent:
                wait_for("the guard to cap both GPUs",
                         lambda: slurp(log) == "0 300000\n1 300000\n")
                for _ in range(3):
                    agent.p.send_signal(signal.SIGTERM)
                self.assertEqual(agent.stop(), 0)
                self.assertEqual(slurp(log), "0 300000\n1 300000\n0 400000\n1 400000\n")
                self.assertFalse(os.path.exists(os.path.join(tmp, "guard-state.json")))

    def test_after_sigkill_restore_limits_puts_them_back(self):
        with tempfile.TemporaryDirectory() as tmp:
            env = fake_nvml_env(tmp)
            limits = env["FAKE_NVML_LIMITS_FILE"]
            state = os.path.join(tmp, "guard-state.json")
            agent = Agent("--speed", "1", *self.guard_args(tmp), env=env)
            try:
                wait_for("the guard to cap both GPUs", lambda: slurp(limits) == "300000 300000 \n")
            finally:
                agent.stop(signal.SIGKILL)
            self.assertTrue(os.path.exists(state))  # a SIGKILL restores nothing by itself
            self.assertEqual(slurp(limits), "300000 300000 \n")
            r = run("agent", "--restore-limits", "--guard-state", state, "--nvml-library",
                    FAKE_NVML, env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(slurp(limits), "400000 400000 \n")
            self.assertFalse(os.path.exists(state))
            r = run("agent", "--restore-limits", "--guard-state", state, "--nvml-library",
                    FAKE_NVML, env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("no power limit to restore", r.stderr)
            # Killed again; the next agent restores the true originals before reading any limit
            # (or it would take the capped 300 W for the originals).
            agent = Agent("--speed", "1", *self.guard_args(tmp), env=env)
            try:
                wait_for("capped again", lambda: slurp(limits) == "300000 300000 \n")
            finally:
                agent.stop(signal.SIGKILL)
            env_quiet = dict(env, FAKE_NVML_POWER_MW="100000")
            r = run("agent", "--speed", "0", "--duration-s", "2", "--listen", "127.0.0.1:0",
                    *self.guard_args(tmp), env=env_quiet)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("restoring the power limits that agent", r.stderr)
            self.assertEqual(slurp(limits), "400000 400000 \n")
            self.assertFalse(os.path.exists(state))
            # A state file it cannot act on keeps the agent from starting, and is kept.
            with open(state, "w") as f:
                f.write('{"format": "headroom-guard-state", "version": 1, "pid": 1, '
                        '"nvml_library": "x", "limits": [{"nvml_index": 0, "original_w": -5}]}')
            r = run("agent", "--speed", "0", "--duration-s", "1", "--listen", "127.0.0.1:0",
                    *self.guard_args(tmp), env=env)
            self.assertEqual(r.returncode, 1)
            self.assertIn("limits[].original_w", r.stderr)
            self.assertTrue(os.path.exists(state))

    def test_service_restores_limits_after_the_agent_stops(self):
        with open(os.path.join(ROOT, "deploy", "headroom-agent@.service.in")) as f:
            unit = f.read()
        self.assertRegex(unit, r"(?m)^ExecStopPost=\+?@HEADROOM_BINDIR@/headroom agent "
                               r"--restore-limits")

    def test_sigint_during_a_slow_interval_stops_at_once(self):
        with Agent("--speed", "0.001", "--interval-s", "60") as agent:
            t0 = time.monotonic()
            self.assertEqual(agent.stop(signal.SIGINT), 0)
            self.assertLess(time.monotonic() - t0, 1.0)


class Traces(unittest.TestCase):
    def test_a_restart_keeps_the_earlier_trace(self):
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "agent.csv")
            for _ in range(3):
                r = run("agent", "--source", "twin", "--speed", "0", "--duration-s", "3",
                        "--listen", "127.0.0.1:0", "--trace-out", trace)
                self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(sorted(os.listdir(tmp)),
                             ["agent.1.csv", "agent.1.csv.meta.json", "agent.2.csv",
                              "agent.2.csv.meta.json", "agent.csv", "agent.csv.meta.json"])
            for name in ("agent.1.csv", "agent.2.csv", "agent.csv"):
                self.assertEqual(len(slurp(os.path.join(tmp, name)).splitlines()), 8)
            self.assertIn("agent.2.csv", r.stderr)

    def test_trace_out_equal_to_replay_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "in.csv")
            with open(trace, "w") as f:
                f.write("t_s,gpu,power_w\n0,0,100\n0.5,0,120\n1.0,0,110\n")
            before = slurp(trace)
            link = os.path.join(tmp, "link.csv")
            os.symlink(trace, link)
            for out in (trace, link, os.path.join(tmp, ".", "in.csv")):
                r = run("agent", "--source", "replay", "--replay", trace, "--trace-out", out,
                        "--budget-w", "300", "--speed", "0", "--duration-s", "1", "--listen",
                        "127.0.0.1:0")
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("refusing to overwrite an input", r.stderr)
                self.assertEqual(slurp(trace), before)

    def test_the_end_of_a_replay_is_logged_once(self):
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "in.csv")
            with open(trace, "w") as f:
                f.write("t_s,gpu,power_w\n0,0,100\n0.5,0,120\n1.0,0,110\n")
            r = run("agent", "--source", "replay", "--replay", trace, "--budget-w", "300",
                    "--speed", "0", "--duration-s", "20", "--listen", "127.0.0.1:0")
            self.assertEqual(r.returncode, 0, r.stderr)
            ended = [l for l in r.stderr.splitlines() if "the trace ended" in l]
            self.assertEqual(len(ended), 1, r.stderr)
            self.assertIn("the same failure 37 more time(s)", r.stderr)


class Options(unittest.TestCase):
    def test_nvml_without_a_scenario_decides_and_serves(self):
        # No --scenario: the agent's own ranges and safe values, and the GPUs' enforced power
        # limit for a budget (the fake's 400 W).
        with tempfile.TemporaryDirectory() as tmp:
            env = fake_nvml_env(tmp, power_mw=250000)
            with Agent("--source", "nvml", "--nvml-library", FAKE_NVML, "--speed", "4",
                       env=env) as agent:
                self.assertIsNotNone(agent.find(r"budget 400\.0 W per GPU: the GPUs' lowest"))
                wait_for("decisions", lambda: json.loads(
                    get(agent.port, b"/v1/status")[2])["decisions"] >= 4)
                status = json.loads(get(agent.port, b"/v1/status")[2])
                self.assertEqual(status["budget_w"], 400.0)
                self.assertEqual(status["power_w"], [250.0, 250.0])
                a = json.loads(get(agent.port, b"/v1/actuation")[2])
                self.assertTrue(1 <= a["concurrency"] <= 256, a)
                self.assertTrue(a["reason"].startswith("pid"), a)
        # A policy describes itself (version 4): on real GPUs it needs no scenario. It acts in
        # the envelope it was trained in, at that envelope's default budget.
        envelope = json.load(open(PPO_POLICY))["envelopes"][0]
        r = run("agent", "--source", "nvml", "--nvml-library", FAKE_NVML, "--controller", "ppo",
                "--policy", PPO_POLICY, "--speed", "0", "--duration-s", "1", "--listen",
                "127.0.0.1:0", env={"FAKE_NVML_GPUS": "1"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ppo controller, budget %.1f W per GPU" % envelope["budget_w"], r.stderr)
        # One trained on several: --scenario names the envelope.
        universal = os.path.join(ROOT, "policies", "universal.json")
        r = run("agent", "--source", "nvml", "--nvml-library", FAKE_NVML, "--controller", "ppo",
                "--policy", universal, "--duration-s", "1", env={"FAKE_NVML_GPUS": "1"})
        self.assertEqual(r.returncode, 2)
        self.assertIn("--scenario names the one this job is like", r.stderr)
        r = run("agent", "--source", "nvml", "--nvml-library", FAKE_NVML, "--controller", "ppo",
                "--policy", universal, "--scenario", "h100-8b-tp1", "--speed", "0",
                "--duration-s", "1", "--listen", "127.0.0.1:0", env={"FAKE_NVML_GPUS": "1"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ppo controller, budget 600.0 W per GPU", r.stderr)
        r = run("agent", "--source", "replay", "--replay", "x.csv", "--duration-s", "1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--budget-w: needed without --scenario", r.stderr)

    def test_a_posted_budget_moves_the_next_decision_the_trace_and_its_analysis(self):
        # A 2-GPU job (the fake NVML: 250 W each, enforced limit 400 W) with no scenario. A job
        # budget of 400 W posted mid-run is 200 W per GPU from the next decision on; the trace
        # carries it, and `headroom analyze` scores the trace against it as the agent did.
        with tempfile.TemporaryDirectory() as tmp:
            env = fake_nvml_env(tmp, power_mw=250000)
            trace = os.path.join(tmp, "agent.csv")
            token = os.path.join(tmp, "token")
            with open(token, "w") as f:
                f.write("budget-t0ken\n")
            os.chmod(token, 0o600)
            auth = b"Authorization: Bearer budget-t0ken\r\n"
            with Agent("--source", "nvml", "--nvml-library", FAKE_NVML, "--speed", "8",
                       "--trace-out", trace, "--token-file", token, "--floor-w", "220",
                       env=env) as agent:
                status = lambda: json.loads(get(agent.port, b"/v1/status")[2])  # noqa: E731
                wait_for("decisions", lambda: status()["decisions"] >= 6)
                self.assertEqual(post(agent.port, b'{"job_budget_w": 400}',
                                      path=b"/v1/budget")[0], 401)  # writes need the token
                code, _, body = post(agent.port, b'{"budget_per_gpu_w": -3}', headers=auth,
                                     path=b"/v1/budget")
                self.assertEqual(code, 400)
                self.assertIn(b"field 'budget_per_gpu_w'", body)
                before = status()
                self.assertEqual(before["budget_per_gpu_w"], 400.0)
                self.assertEqual(before["budget_from"], "the GPUs' enforced power limit")
                code, _, body = post(agent.port, b'{"job_budget_w": 400}', headers=auth,
                                     path=b"/v1/budget")
                self.assertEqual(code, 200, body)
                answer = json.loads(body)
                self.assertEqual(answer["budget_per_gpu_w"], 200.0)
                self.assertTrue(answer["below_floor"])
                after = wait_for("the new budget in a decision", lambda: (
                    lambda s: s if s["budget_per_gpu_w"] == 200.0 and
                    s["decisions"] >= before["decisions"] + 8 else None)(status()))
                self.assertEqual(after["job_budget_w"], 400.0)
                self.assertEqual(after["budget_from"], "POST /v1/budget")
                self.assertIn("below the job's floor 220.0 W", after["actuation"]["reason"])
                metrics = get(agent.port, b"/metrics")[2].decode()
                self.assertIn("headroom_job_budget_watts 400", metrics)
                history = json.loads(get(agent.port, b"/v1/history")[2])["points"]
                self.assertEqual(history[0]["budget_w"], 400.0)
                self.assertEqual(history[-1]["budget_w"], 200.0)
            self.assertTrue(agent.find(r"budget 200\.0 W per GPU from POST /v1/budget at t="))

            # The trace, read here: one row per GPU per decision, the budget in force on each.
            rows = []
            with open(trace) as f:
                header = f.readline().strip().split(",")
                self.assertEqual(header[-1], "budget_w")
                for line in f:
                    v = dict(zip(header, line.strip().split(",")))
                    rows.append((float(v["t_s"]), int(v["gpu"]), float(v["power_w"]),
                                 float(v["budget_w"])))
            budgets = sorted({b for _, _, _, b in rows})
            self.assertEqual(budgets, [200.0, 400.0])
            # Independently: 0.5 s windows hold one decision each; over when power > budget.
            over = sum(1 for _, _, p, b in rows if p > b)
            r = run("analyze", trace, "--windows", "0.5s,2s", "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            j = json.loads(r.stdout)
            self.assertIsNone(j["budget_w"])
            self.assertEqual(j["budget_schedule"]["source"], "column")
            self.assertEqual(j["budget_schedule"]["changes"], 1)
            self.assertEqual(j["windows"][0]["windows_counted"], len(rows))
            self.assertAlmostEqual(j["windows"][0]["violation_fraction"], over / len(rows), 12)
            # 2 s windows against the time-weighted mean budget (a step at one decision).
            change_t = min(t for t, _, _, b in rows if b == 200.0)
            t0, t_end = rows[0][0], rows[-1][0] + 0.5
            n2 = over2 = 0
            for k in range(int((t_end - t0) / 2.0 + 1e-9)):
                a, b = t0 + 2.0 * k, t0 + 2.0 * (k + 1)
                mean_b = (400.0 * max(0.0, min(b, change_t) - a) +
                          200.0 * max(0.0, b - max(a, change_t))) / 2.0
                for g in (0, 1):
                    ps = [p for t, gg, p, _ in rows if gg == g and a <= t < b]
                    n2 += 1
                    over2 += sum(ps) / len(ps) > mean_b
            self.assertEqual(j["windows"][1]["windows_counted"], n2)
            self.assertAlmostEqual(j["windows"][1]["violation_fraction"], over2 / n2, 12)
            # The agent's own 0.5 s fraction when it last answered: the same rule on the windows
            # closed by then (those of its decisions before the last one).
            closed = [(t, p, b) for t, g, p, b in rows if g == 0][:after["decisions"] - 1]
            self.assertEqual(after["windows"]["0.5s"], len(closed))
            self.assertAlmostEqual(after["violation_fraction"]["0.5s"],
                                   sum(1 for _, p, b in closed if p > b) / len(closed), 12)
            # 250 W never fits 200 W: the decrease never settles, on either GPU.
            self.assertEqual(j["settle_s"], {"p50": None, "p99": None, "max": None,
                                             "events": 2, "unsettled": 2})

    def test_ppo_budget_outside_the_trained_range_is_refused(self):
        r = run("agent", "--source", "twin", "--controller", "ppo", "--policy", PPO_POLICY, "--budget-w", "50",
                "--duration-s", "1", "--listen", "127.0.0.1:0")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("outside scenario 'a100-7b-tp1''s budget range", r.stderr)

    def test_guard_state_must_be_writable_before_anything_starts(self):
        r = run("agent", "--source", "nvml", "--nvml-library", FAKE_NVML, "--guard-power-limit",
                "--guard-state", "/nonexistent-dir/guard.json", "--duration-s", "1",
                env={"FAKE_NVML_GPUS": "1"})
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--guard-state: cannot write a state file in /nonexistent-dir", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
