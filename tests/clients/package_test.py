#!/usr/bin/python3
"""Unit tests of the headroom-client package (clients/python): batched, the version, the
HeadroomCallback's step boundary and reports against an in-process fake agent, rank0_actuation
without a process group and with a fake torch.distributed (ranks 0 and 1 of a group, in this
process), HeadroomCallback reading the agent on every rank, phase names. Standard library only; one process, no network beyond 127.0.0.1.

Usage: package_test.py. Exit 0 on success, 1 on a failure. FakeAgent is also used by
rank0_test.py.
"""

import ast
import contextlib
import http.server
import json
import os
import re
import sys
import threading
import types
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENT_DIR = os.path.join(ROOT, "clients", "python")
sys.path.insert(0, CLIENT_DIR)
import headroom_client  # noqa: E402
from headroom_client import (AgentClient, HeadroomCallback, batched,  # noqa: E402
                             rank0_actuation)

TORCH_IMPORTED = "torch" in sys.modules  # by importing the package (it must not)


def decision(seq=1, concurrency=4, group_size=8, **extra):
    """An answer of GET /v1/actuation."""
    return dict(dict(concurrency=concurrency, group_size=group_size, seq=seq, valid_for_s=5.0,
                     reason="test"), **extra)


class FakeAgent:
    """The agent's actuation API on 127.0.0.1 (a free port), in a thread: GET /v1/actuation
    answers the scripted decisions in turn (the last one again once they run out); POST
    /v1/report is recorded. Counts every request."""

    def __init__(self, *answers):
        self.lock = threading.Lock()
        self.answers = list(answers)  # guarded by lock, as the two below
        self.reports = []
        self.requests = 0
        agent = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                with agent.lock:
                    agent.requests += 1
                    a = agent.answers.pop(0) if len(agent.answers) > 1 else agent.answers[0]
                self._answer(200, a)

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n).decode())
                with agent.lock:
                    agent.requests += 1
                    agent.reports.append(body)
                self._answer(200, {"ok": True})

            def _answer(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_port
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)  # poll 0.05 s: stop() returns soon
        self.thread.start()

    def script(self, *answers):
        with self.lock:
            self.answers = list(answers)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class Batched(unittest.TestCase):
    def test_int(self):
        self.assertEqual(list(batched(range(10), 3)), [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]])
        self.assertEqual(list(batched("ab", 5)), [["a", "b"]])

    def test_callable_read_before_each_chunk(self):
        limits = iter([2, 3, 1, 4])
        calls = []

        def concurrency():
            calls.append(1)
            return next(limits)

        it = batched(range(7), concurrency)
        self.assertEqual(next(it), [0, 1])
        self.assertEqual(len(calls), 1)  # not read ahead of the chunk it sizes
        self.assertEqual(next(it), [2, 3, 4])
        self.assertEqual(next(it), [5])
        self.assertEqual(next(it), [6])
        self.assertRaises(StopIteration, next, it)
        self.assertEqual(len(calls), 4)  # once per chunk, not again at the end

    def test_change_mid_iteration_applies_to_next_chunk(self):
        limit = [3]
        chunks = []
        for chunk in batched(range(10), lambda: limit[0]):
            chunks.append(chunk)
            limit[0] = 5 if len(chunks) == 1 else 1
        self.assertEqual(chunks, [[0, 1, 2], [3, 4, 5, 6, 7], [8], [9]])

    def test_values_that_are_not_a_count_are_one(self):
        for bad in [True, False, 2.0, 2.5, None, 0, -3, "4", float("inf")]:
            self.assertEqual(list(batched([1, 2, 3], bad)), [[1], [2], [3]], bad)
            self.assertEqual(list(batched([1, 2, 3], lambda: bad)), [[1], [2], [3]], bad)

    def test_generator_consumed_lazily(self):
        taken = []

        def gen():
            for i in range(9):
                taken.append(i)
                yield i

        it = batched(gen(), 4)
        self.assertEqual(next(it), [0, 1, 2, 3])
        self.assertEqual(taken, [0, 1, 2, 3])
        self.assertEqual(list(it), [[4, 5, 6, 7], [8]])
        self.assertEqual(taken, list(range(9)))

    def test_empty(self):
        self.assertEqual(list(batched([], 4)), [])
        self.assertEqual(list(batched(iter(()), lambda: 2)), [])


class Package(unittest.TestCase):
    def test_version_agrees_with_the_project(self):
        with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
            cmake = re.search(r"project\(\s*headroom\s+VERSION\s+([0-9.]+)", f.read())
        with open(os.path.join(CLIENT_DIR, "pyproject.toml")) as f:
            pyproject = re.search(r'(?m)^version\s*=\s*"([^"]+)"', f.read())
        self.assertIsNotNone(cmake, "project(headroom VERSION ...) in CMakeLists.txt")
        self.assertIsNotNone(pyproject, "version = ... in pyproject.toml")
        self.assertEqual(pyproject.group(1), cmake.group(1))
        self.assertEqual(headroom_client.__version__, cmake.group(1))

    def test_exports_and_typed(self):
        for name in ["AgentClient", "ConcurrencyGate", "ThreadConcurrencyGate", "CapFollower",
                     "Heartbeat", "batched", "rank0_actuation", "HeadroomCallback",
                     "CollectiveTimeoutError", "__version__"]:
            self.assertIn(name, headroom_client.__all__)
            self.assertTrue(hasattr(headroom_client, name), name)
        self.assertTrue(os.path.isfile(os.path.join(CLIENT_DIR, "headroom_client", "py.typed")))
        self.assertIn("take_hold", headroom_client.__doc__)  # the usage doc

    def test_standard_library_only(self):
        self.assertFalse(TORCH_IMPORTED, "importing headroom_client imported torch")
        stdlib = getattr(sys, "stdlib_module_names", None)
        if stdlib is None:
            self.skipTest("Python < 3.10 has no sys.stdlib_module_names")
        package = os.path.join(CLIENT_DIR, "headroom_client")
        for name in sorted(os.listdir(package)):
            if not name.endswith(".py"):
                continue
            with open(os.path.join(package, name)) as f:
                tree = ast.parse(f.read(), name, feature_version=(3, 8))  # 3.8 syntax too
            for node in ast.walk(tree):  # every import, at any level
                if isinstance(node, ast.Import):
                    tops = [a.name.split(".")[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    tops = [node.module.split(".")[0]]
                else:
                    continue
                for top in tops:
                    self.assertIn(top, stdlib, "%s imports %s" % (name, top))


class WithAgent(unittest.TestCase):
    def setUp(self):
        self.agent = FakeAgent(decision())
        self.client = AgentClient(self.agent.url, timeout_s=5.0)
        self.slept = []
        self.cb = HeadroomCallback(self.client, sleep=self.slept.append)

    def tearDown(self):
        self.agent.stop()


class Callback(WithAgent):
    def test_holds_taken_at_the_step_boundary(self):
        self.agent.script(decision(1, hold_s=5, hold_id=1), decision(2, hold_s=3, hold_id=2),
                          decision(3, concurrency=6, group_size=12))
        a = self.cb.on_step_begin(step=4, tokens=100)
        self.assertEqual(self.slept, [5.0, 3.0])
        self.assertEqual(a["seq"], 3)
        self.assertIs(self.cb.actuation, a)
        self.assertEqual((self.cb.group_size, self.cb.concurrency()), (12, 6))
        self.assertEqual([(r["step"], r["phase"], r["tokens"], r["in_flight"])
                          for r in self.agent.reports], [(4, "idle", 100.0, 0)] * 2)
        self.assertEqual(self.agent.requests, 5)  # 3 reads, 2 reports

    def test_standby_held_until_admitted(self):
        self.agent.script(decision(1, site=True, standby=True), decision(2, site=True))
        self.cb.on_step_begin()
        self.assertEqual(self.slept, [1.0])

    def test_group_size_fixed_for_the_step(self):
        self.agent.script(decision(1, concurrency=4, group_size=8),
                          decision(2, concurrency=2, group_size=16))
        self.cb.on_step_begin(step=0)
        r = self.cb.refresh()
        self.assertEqual(r["group_size"], 16)
        self.assertEqual(self.cb.concurrency(), 2)  # the concurrency changes within the step
        self.assertEqual(self.cb.group_size, 8)     # the group size does not
        self.assertTrue(self.cb.on_phase("rollout", tokens=50, in_flight=3, progress=0.5))
        self.assertEqual(self.agent.reports[-1],
                         {"step": 0, "phase": "rollout", "tokens": 50.0, "in_flight": 3,
                          "progress": 0.5, "group_size": 8})
        self.cb.on_step_begin(step=1)
        self.assertEqual(self.cb.group_size, 16)
        self.cb.on_phase("train")
        self.assertEqual(self.agent.reports[-1],
                         {"step": 1, "phase": "train", "tokens": 50.0, "in_flight": 0,
                          "group_size": 16})

    def test_refresh_takes_no_hold(self):
        self.cb.on_step_begin(step=0)
        self.agent.script(decision(2, hold_s=9, hold_id=4))
        self.cb.refresh()
        self.assertEqual(self.slept, [])
        self.cb.on_step_begin(step=1)  # the hold is taken at the next boundary
        self.assertEqual(self.slept, [9.0])

    def test_step_numbers(self):
        control = object()
        state = types.SimpleNamespace(global_step=7)
        self.assertIs(self.cb.on_step_begin(None, state, control), control)  # HF-style
        self.assertEqual(self.cb.step, 7)
        self.cb.on_step_begin()  # neither step= nor state: one more than the last
        self.assertEqual(self.cb.step, 8)
        self.cb.on_step_begin(None, state, step=3)  # step= first
        self.assertEqual(self.cb.step, 3)
        self.assertIsNone(self.cb.on_train_begin(None, state, control))  # other events: no-ops
        self.assertRaises(AttributeError, getattr, self.cb, "not_an_event")

    def test_tokens_kept_and_step_end_reports_nothing(self):
        self.cb.on_step_begin(step=2)
        self.cb.on_phase("rollout")
        self.assertEqual(self.agent.reports[-1]["tokens"], 0.0)  # starts at 0
        n = len(self.agent.reports)
        self.assertIsNone(self.cb.on_step_end(tokens=500))
        self.assertEqual(len(self.agent.reports), n)
        self.cb.on_phase("sync")
        self.assertEqual(self.agent.reports[-1]["tokens"], 500.0)

    def test_phase_names(self):
        for phase in ["idle", "startup", "rollout", "logprob", "train", "sync", "checkpoint",
                      "stopped", "eval"]:
            self.assertTrue(self.cb.on_phase(phase))
        before = self.agent.requests
        for bad in ["generate", "Rollout", "", None]:
            self.assertRaises(ValueError, self.cb.on_phase, bad)
        self.assertEqual(self.agent.requests, before)

    def test_concurrency_before_any_decision(self):
        self.assertEqual(self.cb.concurrency(), 1)
        self.assertIsNone(self.cb.group_size)


class FakeDist:
    """torch.distributed as the adapters use it, for one rank of a group; the other ranks'
    side of broadcast_object_list is `value`."""

    def __init__(self, rank, initialized=True, global_rank0=0, value=None):
        self.group = types.SimpleNamespace(WORLD=object())
        self.rank, self.initialized = rank, initialized
        self.global_rank0, self.value = global_rank0, value
        self.broadcasts = []  # (what this rank sent, src, group)

    def is_available(self):
        return True

    def is_initialized(self):
        return self.initialized

    def get_rank(self, group=None):
        return self.rank

    def get_global_rank(self, group, group_rank):
        assert group_rank == 0
        return self.global_rank0

    def broadcast_object_list(self, box, src=0, group=None):
        self.broadcasts.append((box[0], src, group))
        if self.rank != 0:
            box[0] = self.value


@contextlib.contextmanager
def torch_distributed(module):
    """sys.modules["torch.distributed"] is `module` (None: torch cannot be imported)."""
    saved = {k: sys.modules[k] for k in ("torch", "torch.distributed") if k in sys.modules}
    if module is None:
        sys.modules["torch"] = None  # import torch raises ImportError
    sys.modules["torch.distributed"] = module
    try:
        yield module
    finally:
        for k in ("torch", "torch.distributed"):
            sys.modules.pop(k, None)
        sys.modules.update(saved)


class Rank0(WithAgent):
    def test_without_a_process_group_the_clients_actuation(self):
        self.agent.script(decision(5, concurrency=3))
        for module in [None, FakeDist(0, initialized=False), FakeDist(1, initialized=False)]:
            with torch_distributed(module):
                a = rank0_actuation(self.client)
                self.assertEqual((a["seq"], a["concurrency"]), (5, 3))
                self.assertEqual(self.cb.on_step_begin(step=0)["seq"], 5)
            if module is not None:
                self.assertEqual(module.broadcasts, [])
        self.assertEqual(self.agent.requests, 6)

    def test_rank0_reads_and_broadcasts(self):
        self.agent.script(decision(7))
        with torch_distributed(FakeDist(0)) as dist:
            self.assertEqual(rank0_actuation(self.client, wait_s=0.0)["seq"], 7)
            sent, src, group = dist.broadcasts[0]
            self.assertEqual((sent["seq"], src, group), (7, 0, None))
            sub = object()  # a group whose rank 0 is global rank 2
            dist.global_rank0 = 2
            rank0_actuation(self.client, group=sub)
            self.assertEqual(dist.broadcasts[1][1:], (2, sub))
            self.assertRaises(ValueError, rank0_actuation, None)  # rank 0 needs a client
        self.assertEqual(self.agent.requests, 2)

    def test_every_rank_reads_the_agent_itself(self):
        # HeadroomCallback is no collective: rank 1 reads the agent with its own client and
        # broadcasts nothing; it reports nothing (rank 0 of the group does).
        self.agent.script(decision(8, concurrency=5, group_size=6))
        with torch_distributed(FakeDist(1)) as dist:
            cb = HeadroomCallback(self.client, sleep=self.slept.append)
            self.assertEqual(cb.on_step_begin(step=3)["seq"], 8)
            self.assertEqual((cb.group_size, cb.concurrency()), (6, 5))
            self.assertIsNone(cb.on_phase("rollout"))
            self.assertEqual(cb.refresh()["seq"], 8)
            self.assertEqual(dist.broadcasts, [])
        self.assertEqual(self.agent.requests, 2)  # two reads, no report
        self.assertEqual(self.agent.reports, [])
        self.assertRaises(ValueError, HeadroomCallback, None)  # every rank needs a client

if __name__ == "__main__":
    unittest.main()
