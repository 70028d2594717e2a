#!/usr/bin/python3
"""examples/grpo_torch/train.py on 2 ranks (gloo on 127.0.0.1) beside a fake agent.

Usage: grpo_ranks_test.py [REPO_ROOT]. Exit 0 pass, 1 fail, 77 skip (no torch, or no gloo).

The fake agent (http.server on 127.0.0.1:0, in a thread) publishes a new decision every
PUBLISH_S (concurrency 2, 3, 5, ...; group size 4, 3, 4, ...), answers GET
/v1/actuation?step=K with the decision fixed at step K's first read (as the agent does: the same
group size to every rank), GET /v1/actuation?after=SEQ&timeout_s=T as a long-poll, GET
/v1/status with max_hold_s, and records every POST /v1/report body. The trainer runs with
--time-scale, so that rollouts last long enough for the cap to change within them. Checks:
- both ranks end with identical parameters, and ran the same group size each step: the one the
  agent fixed for that step, read by each rank itself (every rank read every step once);
- only rank 0 reported;
- every engine step of both ranks kept running <= the cap in force and ran the whole cap while
  requests waited; the caps each engine ran are, in order, among the follower's changes (a
  change applies from an engine step on, never out of order), and they changed within a step;
- the phases reported (startup, rollout with in_flight <= the cap and progress in [0, 1],
  logprob, train, sync, checkpoint, stopped) and the checkpoint written.
"""

import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))
try:
    import torch
    import torch.distributed as dist
except ImportError:
    print("SKIP: torch is not importable")
    sys.exit(77)
if not dist.is_available() or not dist.is_gloo_available():
    print("SKIP: torch.distributed with gloo is not available")
    sys.exit(77)

STEPS = 3
RUN_TIMEOUT_S = 120.0
PUBLISH_S = 0.03  # a new decision this often
SAFE_CONCURRENCY = 16
CONCURRENCIES = (2, 3, 5)
GROUPS = (4, 3)
OCCUPANCY = 0.9


class FakeAgent(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.cond = threading.Condition()
        self.published = []  # every decision, in order (seq = index + 1)
        self.by_step = {}    # step -> the decision fixed at its first read
        self.step_reads = {}  # step -> reads
        self.reports = []    # the report bodies, in order
        self.other = []      # any other request
        self.stopping = False
        self.publish()

    def publish(self):
        with self.cond:
            i = len(self.published)
            self.published.append({"concurrency": CONCURRENCIES[i % len(CONCURRENCIES)],
                                   "group_size": GROUPS[i % len(GROUPS)], "seq": i + 1,
                                   "valid_for_s": 5, "reason": "test"})
            self.cond.notify_all()

    def publisher(self):
        while not self.stopping:
            time.sleep(PUBLISH_S)
            self.publish()

    def current(self):
        with self.cond:
            return dict(self.published[-1])

    def for_step(self, step):
        with self.cond:
            if step not in self.by_step:
                self.by_step[step] = dict(self.published[-1], step=step)
            self.step_reads[step] = self.step_reads.get(step, 0) + 1
            return dict(self.by_step[step])

    def after(self, seq, timeout_s):
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while self.published[-1]["seq"] <= seq and time.monotonic() < deadline:
                self.cond.wait(deadline - time.monotonic())
            # A follower that reads slower than decisions come skips some; one that skipped a
            # whole cycle of CONCURRENCIES would read the cap it has again (no change to see
            # within a step, on a busy machine): then it gets the next decision, which differs.
            if 0 < seq <= len(self.published) and not self.stopping and \
                    self.published[-1]["concurrency"] == self.published[seq - 1]["concurrency"]:
                self.publish()
            return dict(self.published[-1])


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        agent = self.server
        if url.path == "/v1/actuation" and "step" in q:
            self.answer(200, agent.for_step(int(q["step"])))
        elif url.path == "/v1/actuation" and "after" in q:
            self.answer(200, agent.after(int(q["after"]), float(q.get("timeout_s", 10))))
        elif url.path == "/v1/actuation":
            self.answer(200, agent.current())
        elif url.path == "/v1/status":
            self.answer(200, {"max_hold_s": 0.0})
        else:
            with agent.cond:
                agent.other.append(("GET", self.path))
            self.answer(404, {"error": "not found"})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/v1/report":
            with self.server.cond:
                self.server.reports.append(json.loads(body))
            self.answer(200, {"ok": True})
        else:
            with self.server.cond:
                self.server.other.append(("POST", self.path))
            self.answer(404, {"error": "not found"})


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def is_subsequence(xs, ys):
    it = iter(ys)
    return all(any(x == y for y in it) for x in xs)


def collapse(values):
    out = []
    for v in values:
        if not out or out[-1] != v:
            out.append(v)
    return out


class TwoRanks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = FakeAgent()
        threading.Thread(target=cls.agent.serve_forever, daemon=True).start()
        threading.Thread(target=cls.agent.publisher, daemon=True).start()
        cls.tmp = tempfile.TemporaryDirectory()
        cls.json_path = os.path.join(cls.tmp.name, "run.json")
        cls.log_path = os.path.join(cls.tmp.name, "decisions.jsonl")
        cls.engine_path = os.path.join(cls.tmp.name, "engine.jsonl")
        cls.out = os.path.join(cls.tmp.name, "ckpt")
        cmd = [sys.executable, os.path.join(ROOT, "examples", "grpo_torch", "train.py"),
               "--small", "--ranks", "2", "--steps", str(STEPS), "--seed", "3",
               "--agent", "http://127.0.0.1:%d" % cls.agent.server_address[1],
               "--safe-concurrency", str(SAFE_CONCURRENCY), "--time-scale", "0.005",
               "--heartbeat-s", "0.5", "--json", cls.json_path, "--decisions-log", cls.log_path,
               "--engine-log", cls.engine_path, "--out", cls.out, "--checkpoint-every", "2"]
        t0 = time.monotonic()
        cls.proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, timeout=RUN_TIMEOUT_S)
        cls.seconds = time.monotonic() - t0
        cls.agent.stopping = True
        cls.agent.shutdown()
        print("2 ranks, %d steps: %.1f s, exit %d" % (STEPS, cls.seconds, cls.proc.returncode))
        cls.record = None
        if cls.proc.returncode == 0:
            with open(cls.json_path) as f:
                cls.record = json.load(f)
            cls.log = read_jsonl(cls.log_path)
            cls.engine = [read_jsonl(cls.engine_path), read_jsonl(cls.engine_path + ".rank1")]

    @classmethod
    def tearDownClass(cls):
        cls.agent.server_close()
        cls.tmp.cleanup()

    def setUp(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-3000:])

    def test_ranks_identical_and_groups_fixed_per_step(self):
        ranks = self.record["ranks"]
        self.assertEqual([r["rank"] for r in ranks], [0, 1])
        self.assertEqual(ranks[0]["param_sha256"], ranks[1]["param_sha256"])
        self.assertEqual(self.record["world"], 2)
        fixed = [self.agent.by_step[k]["group_size"] for k in range(STEPS)]
        self.assertEqual(ranks[0]["group_sizes"], fixed)
        self.assertEqual(ranks[1]["group_sizes"], fixed)
        self.assertEqual([s["group_size"] for s in self.record["steps"]], fixed)
        self.assertEqual(self.agent.step_reads, {k: 2 for k in range(STEPS)})  # each rank once
        for r in ranks:
            self.assertEqual(r["agent_requests"]["actuation_for_step"], STEPS)
            self.assertGreater(r["agent_requests"]["actuation"], 0)  # its cap follower
        steps0 = [d for d in self.log if d["phase"] == "step_begin"]
        self.assertEqual([d["group_size"] for d in steps0], fixed)
        self.assertEqual([d["seq"] for d in steps0],
                         [self.agent.by_step[k]["seq"] for k in range(STEPS)])

    def test_only_rank0_reported(self):
        r0, r1 = (r["agent_requests"] for r in self.record["ranks"])
        self.assertEqual(r1["report"], 0)
        self.assertEqual(r0["report"], len(self.agent.reports))
        self.assertEqual(self.agent.other, [])

    def test_engine_steps_keep_to_the_cap(self):
        published = {a["concurrency"] for a in self.agent.published} | {SAFE_CONCURRENCY}
        # The gate starts at the safe concurrency; the follower's first answer resizes it.
        follower = [SAFE_CONCURRENCY] + [d["concurrency"] for d in self.log if d["phase"] == "cap"]
        self.assertEqual(self.log, self.record["decisions"])
        for rank, lines in enumerate(self.engine):
            self.assertEqual({x["rank"] for x in lines}, {rank})
            self.assertEqual([x["engine_step"] for x in lines], list(range(len(lines))))
            self.assertEqual(sorted({x["step"] for x in lines}), list(range(STEPS)))
            for x in lines:
                self.assertIn(x["cap"], published)
                self.assertLessEqual(x["running"], x["cap"], x)
                if x["waiting"]:
                    self.assertGreaterEqual(x["running"], OCCUPANCY * x["cap"], x)
            if rank == 0:  # the caps rank 0 ran, in order, are among its follower's (which
                # skips decisions published faster than it reads them; so may the engine)
                self.assertTrue(is_subsequence(collapse([x["cap"] for x in lines]), follower),
                                (collapse([x["cap"] for x in lines]), follower))
            changed = [k for k in range(STEPS)
                       if len({x["cap"] for x in lines if x["step"] == k}) > 1]
            self.assertTrue(changed, "rank %d: the cap never changed within a step" % rank)
        for rec in self.record["steps"]:
            mine = [x for x in self.engine[0] if x["step"] == rec["step"]]
            self.assertEqual(rec["engine_steps"], len(mine))
            self.assertEqual(sum(n for _, n in rec["caps"]), len(mine))

    def test_phases_reported(self):
        reports = self.agent.reports
        phases = [r["phase"] for r in reports]
        self.assertEqual(phases[0], "startup")
        self.assertEqual(phases[-1], "stopped")
        for p in ("rollout", "logprob", "train", "sync", "checkpoint"):
            self.assertIn(p, phases)
        self.assertEqual(reports[-1]["step"], STEPS - 1)
        caps = max(x["cap"] for x in self.engine[0])
        for r in reports:
            if r["phase"] == "rollout":
                self.assertLessEqual(r["in_flight"], caps)
                self.assertTrue(0.0 <= r["progress"] <= 1.0)
                self.assertEqual((r["engines"], r["admission"]), (1, "continuous"))
            if r["phase"] in ("rollout", "logprob", "train", "sync", "checkpoint"):
                self.assertEqual(r["group_size"], self.record["steps"][r["step"]]["group_size"])
        self.assertTrue(any(r["phase"] == "rollout" and r["in_flight"] > 0 for r in reports))
        tokens = [r["tokens"] for r in reports]
        self.assertEqual(tokens, sorted(tokens))  # never goes back
        self.assertEqual(tokens[-1], self.record["steps"][-1]["tokens"])
        ckpt = torch.load(os.path.join(self.out, "checkpoint.pt"))
        self.assertEqual(ckpt["step"], 2)
        self.assertFalse(os.path.exists(os.path.join(self.out, "checkpoint.pt.tmp")))


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)
