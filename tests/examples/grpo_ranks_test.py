#!/usr/bin/python3
"""examples/grpo_torch/train.py on 2 ranks (gloo on 127.0.0.1) beside a fake agent.

Usage: grpo_ranks_test.py [REPO_ROOT]. Exit 0 pass, 1 fail, 77 skip (no torch, or no gloo).

The fake agent (http.server on 127.0.0.1:0, in a thread) answers GET /v1/actuation with a
decision that changes from one request to the next (concurrency 2, 3, 2, ...; group size 4 for
five requests, then 3 for five, ...) and records every POST /v1/report body. Checks:
- both ranks end with identical parameters (each rank's sha256 in the run's json);
- only rank 0 talked to the agent: rank 1 made no request, and the agent saw exactly the
  requests rank 0 counted;
- the concurrency changed only between chunks and the group size only at step boundaries:
  every chunk is at most the concurrency of the decision read just before it, each chunk's
  decision is the last one read, every record of a step has the group size read at its
  boundary, and both ranks cut the same chunks;
- the phases reported (startup, rollout with in_flight = the chunk, logprob, train, sync,
  checkpoint, stopped) and the checkpoint written.
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
RUN_TIMEOUT_S = 80.0


class FakeAgent(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.gets = []     # the decisions answered, in order
        self.reports = []  # the report bodies, in order
        self.other = []    # any other request

    def decide(self):
        with self.lock:
            i = len(self.gets)
            a = {"concurrency": (2, 3)[i % 2], "group_size": (4, 3)[(i // 5) % 2],
                 "seq": i + 1, "valid_for_s": 5, "reason": "test"}
            self.gets.append(a)
            return a


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
        if self.path.split("?")[0] == "/v1/actuation":
            self.answer(200, self.server.decide())
        else:
            with self.server.lock:
                self.server.other.append(("GET", self.path))
            self.answer(404, {"error": "not found"})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/v1/report":
            with self.server.lock:
                self.server.reports.append(json.loads(body))
            self.answer(200, {"ok": True})
        else:
            with self.server.lock:
                self.server.other.append(("POST", self.path))
            self.answer(404, {"error": "not found"})


class TwoRanks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = FakeAgent()
        threading.Thread(target=cls.agent.serve_forever, daemon=True).start()
        cls.tmp = tempfile.TemporaryDirectory()
        cls.json_path = os.path.join(cls.tmp.name, "run.json")
        cls.log_path = os.path.join(cls.tmp.name, "decisions.jsonl")
        cls.out = os.path.join(cls.tmp.name, "ckpt")
        cmd = [sys.executable, os.path.join(ROOT, "examples", "grpo_torch", "train.py"),
               "--small", "--ranks", "2", "--steps", str(STEPS), "--seed", "3",
               "--agent", "http://127.0.0.1:%d" % cls.agent.server_address[1],
               "--json", cls.json_path, "--decisions-log", cls.log_path,
               "--out", cls.out, "--checkpoint-every", "2"]
        t0 = time.monotonic()
        cls.proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, timeout=RUN_TIMEOUT_S)
        cls.seconds = time.monotonic() - t0
        cls.agent.shutdown()
        print("2 ranks, %d steps: %.1f s, exit %d" % (STEPS, cls.seconds, cls.proc.returncode))
        cls.record = None
        if cls.proc.returncode == 0:
            with open(cls.json_path) as f:
                cls.record = json.load(f)
            with open(cls.log_path) as f:
                cls.log = [json.loads(line) for line in f]

    @classmethod
    def tearDownClass(cls):
        cls.agent.server_close()
        cls.tmp.cleanup()

    def setUp(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-3000:])

    def test_ranks_identical(self):
        ranks = self.record["ranks"]
        self.assertEqual([r["rank"] for r in ranks], [0, 1])
        self.assertEqual(ranks[0]["param_sha256"], ranks[1]["param_sha256"])
        self.assertEqual(ranks[0]["chunk_sizes"], ranks[1]["chunk_sizes"])
        self.assertEqual(self.record["world"], 2)

    def test_only_rank0_talked_to_the_agent(self):
        r0, r1 = (r["agent_requests"] for r in self.record["ranks"])
        self.assertEqual(r1, {"actuation": 0, "report": 0})
        self.assertEqual(r0["actuation"], len(self.agent.gets))
        self.assertEqual(r0["report"], len(self.agent.reports))
        self.assertGreater(r0["actuation"], STEPS)
        self.assertEqual(self.agent.other, [])

    def test_decisions_applied_where_allowed(self):
        log, seen = self.log, self.record["decisions_seen"]
        self.assertEqual(log, self.record["decisions"])
        # Every decision rank 0 read, in order, is one the agent answered.
        self.assertEqual([a["seq"] for a in seen], [a["seq"] for a in self.agent.gets])
        by_seq = {a["seq"]: a for a in self.agent.gets}
        local_items = {}
        for step in range(STEPS):
            recs = [d for d in log if d["step"] == step]
            self.assertEqual(recs[0]["phase"], "step_begin")
            self.assertIsNone(recs[0]["chunk"])
            group = recs[0]["group_size"]
            self.assertEqual(group, by_seq[recs[0]["seq"]]["group_size"])
            chunks = recs[1:]
            self.assertEqual([d["chunk"] for d in chunks], list(range(len(chunks))))
            last_seq = recs[0]["seq"]
            for d in chunks:
                self.assertEqual(d["phase"], "rollout")
                self.assertEqual(d["group_size"], group)  # fixed for the step
                self.assertGreaterEqual(d["seq"], last_seq)
                self.assertEqual(d["concurrency"], by_seq[d["seq"]]["concurrency"])
                self.assertLessEqual(d["size"], d["concurrency"])
                last_seq = d["seq"]
            # Each chunk's decision is the one read just before it (at the boundary, then one
            # refresh between chunks): the seqs of a step are consecutive.
            seqs = [recs[0]["seq"]] + [d["seq"] for d in chunks[1:]]
            self.assertEqual(seqs, list(range(seqs[0], seqs[0] + len(seqs))))
            self.assertEqual(chunks[0]["seq"], recs[0]["seq"])
            local_items[step] = sum(d["size"] for d in chunks)
            self.assertEqual(local_items[step], 16 // 2 * group)  # this rank's share
            rec = self.record["steps"][step]
            self.assertEqual(rec["group_size"], group)
            self.assertEqual(rec["chunk_sizes"], [d["size"] for d in chunks])
            self.assertEqual(rec["chunk_sizes"], self.record["ranks"][1]["chunk_sizes"][step])
        # The agent's group size did change within a step (so the check above means something).
        self.assertGreater(len({a["group_size"] for a in self.agent.gets}), 1)
        self.assertGreater(len({d["concurrency"] for d in log}), 1)

    def test_phases_reported(self):
        reports = self.agent.reports
        phases = [r["phase"] for r in reports]
        self.assertEqual(phases[0], "startup")
        self.assertEqual(phases[-1], "stopped")
        for p in ("rollout", "logprob", "train", "sync", "checkpoint"):
            self.assertIn(p, phases)
        self.assertEqual(phases.count("checkpoint"), 1)  # after step 2 of 3
        self.assertEqual(phases.count("sync"), STEPS)
        rollouts = [r for r in reports if r["phase"] == "rollout"]
        self.assertEqual([r["in_flight"] for r in rollouts],
                         [d["size"] for d in self.log if d["phase"] == "rollout"])
        tokens = [r["tokens"] for r in reports]
        self.assertEqual(tokens, sorted(tokens))  # never goes back
        self.assertEqual(tokens[-1], self.record["steps"][-1]["tokens"])
        for r in reports:
            if r["phase"] in ("rollout", "logprob", "train", "sync", "checkpoint"):
                self.assertEqual(r["group_size"], self.record["steps"][r["step"]]["group_size"])
        ckpt = torch.load(os.path.join(self.out, "checkpoint.pt"))
        self.assertEqual(ckpt["step"], 2)
        self.assertFalse(os.path.exists(os.path.join(self.out, "checkpoint.pt.tmp")))


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)
